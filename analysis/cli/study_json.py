"""The fourth study's JSONs as its two commands read and judge them (``study --explore-4``, ``study --confirm-4``):
one reading, one judging and printing, for the search and the confirmation alike."""

from __future__ import annotations

import json
from pathlib import Path

from analysis.present import render
from repro.core.errors import SuiteError
from repro.core.outputs import write_text


def read_study(path: Path | str, study: str) -> dict:
    """The JSON at ``path``, which must be a ``study`` result (its ``"study"`` field); SuiteError in one line."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SuiteError(f"{path}: cannot read the {study} JSON ({err})") from None
    if not isinstance(data, dict) or data.get("study") != study:
        raise SuiteError(f"{path}: not a JSON of the {study} study")
    return data


def judge_and_show(result: dict, judge_module, judged_path: Path | str | None) -> dict:
    """``judge_module.judge(result)`` with the run's source (declaration, backend, device, reduced) beside it, its
    ``lines`` printed, written as JSON to ``judged_path`` where given; the judged result."""
    judged = judge_module.judge(result)
    judged["source"] = {k: result[k] for k in ("declaration", "backend", "device", "reduced")}
    for line in judge_module.lines(judged):
        print(line)
    if judged_path:
        write_text(judged_path, render.strict_json(judged, indent=1) + "\n")
    return judged
