"""The first learning-loop study's parameters: the pre-registration read, the reduced study, seeds; the study
JSONs read back.

Every parameter comes from the pre-registered file (``studies/preregistered.toml``); the reduced study (CI, report)
changes only the number of steps, seeds, grid points and controllers, never a learning parameter. The study is run
by :mod:`analysis.cli.study_runs` and judged by :mod:`analysis.judge.first_study`.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from repro.core.errors import SuiteError
from repro.core.grid import combinations
from repro.core.paths import ROOT
from repro.learning.agent import Learning

PREREGISTERED = ROOT / "studies" / "preregistered.toml"
GRID_AXES = ("entropy_bonus", "aux_reward", "pi_view")
#: Most steps per run and seeds a study takes (the traces of a bigger one would not fit in memory anyway).
MAX_STEPS, MAX_SEEDS = 10_000_000, 1_000_000
#: Most memory the traces of one environment may take (bytes).
MAX_TRACE_BYTES = 8 << 30


@dataclass(frozen=True)
class Collapse:
    """The pre-registered collapse criteria (see the file for each one's sentence)."""

    warmup: int  # steps
    mean_fraction_of_uniform: float
    min_threshold: float
    confidence: float
    bracket_min_agreement_gap: float


@dataclass(frozen=True)
class Prereg:
    envs: tuple[str, ...]
    seeds: str
    controllers: tuple[str, ...]
    learning: Learning
    grid: dict[str, tuple]
    collapse: Collapse
    path: str  # repo-relative


def read_prereg(path: Path | str, build: Callable[[dict, str], Any]) -> Any:
    """``build(data, repo-relative path)`` of the pre-registration TOML at ``path``; a missing or malformed
    file is one :class:`SuiteError` line (both studies' loaders)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        rel = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path.name
        return build(data, str(rel))
    except FileNotFoundError:
        raise SuiteError(f"pre-registration file not found: {path}") from None
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as err:
        raise SuiteError(f"{path}: not a valid pre-registration ({type(err).__name__}: {err})") from None


def load_prereg(path: Path | str = PREREGISTERED) -> Prereg:
    def build(data: dict, rel: str) -> Prereg:
        s = data["study"]
        return Prereg(tuple(s["envs"]), s["seeds"], tuple(s["controllers"]), Learning(**data["learning"]),
                      {k: tuple(data["grid"][k]) for k in GRID_AXES}, Collapse(**data["collapse"]), rel)

    return read_prereg(path, build)


#: What tells the two studies' JSONs apart: every controller entry of the first holds the first key, of the
#: second the second study's first criterion.
_RESULT_KEYS = {"first": "collapse_fraction", "second": "relative", "cold_start": "lambda_side_first_window"}


def read_result(path: Path, kind: str) -> dict:
    """The ``kind`` ("first" or "second") study's JSON as its ``--json`` wrote it; a one-line :class:`SuiteError`
    for anything else (a missing file, bad JSON, the other study's or another command's JSON)."""
    try:
        result = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise SuiteError(f"{path}: cannot read the {kind} study's JSON ({err.strerror or err})") from None
    except ValueError as err:  # UnicodeDecodeError and json's errors
        raise SuiteError(f"{path}: not JSON ({err})") from None
    key = _RESULT_KEYS[kind]
    try:
        blocks = list(result["envs"].values())
        ok = bool(blocks) and all(key in e for b in blocks for e in b["controllers"].values())
    except (KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        made_by = "python -m analysis study" + (" --second" if kind == "second" else "") + " --json PATH"
        raise SuiteError(f"{path}: not the {kind} learning-loop study's JSON (`{made_by}` writes one)")
    return result


def grid_columns(grid: dict[str, tuple]) -> dict[str, np.ndarray]:
    """The first study's grid points as arrays by axis (:data:`GRID_AXES` order)."""
    return combinations({k: grid[k] for k in GRID_AXES})


def parse_seeds(text: str) -> np.ndarray:
    """``A:B`` → seeds A..B−1 (0 ≤ A < B < 2^64, at most :data:`MAX_SEEDS` of them)."""
    try:
        a, b = (int(x) for x in text.split(":"))
    except ValueError:
        raise SuiteError(f"--seeds {text!r}: expected A:B with integers A < B") from None
    if not 0 <= a < b <= 1 << 64:
        raise SuiteError(f"--seeds {text!r}: expected 0 ≤ A < B ≤ 2^64")
    if b - a > MAX_SEEDS:
        raise SuiteError(f"--seeds {text!r}: {b - a} seeds; a study takes at most {MAX_SEEDS}")
    return np.arange(a, b, dtype=np.uint64)


#: The reduced study (CI and the report's quick section): fewer steps, seeds and grid points, same parameters.
REDUCED = {"envs": ("FrozenLake-v1", "CliffWalking-v1"), "seeds": "0:8", "steps": 6000,
           "controllers": ("fixed", "original", "const:0.001", "const:1"),
           "grid": {"entropy_bonus": (0.0,), "aux_reward": (0.0, 1.0), "pi_view": (1,)}}
