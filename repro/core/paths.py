"""Where the repository is, and how a path is shown in anything the suite writes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The studies' committed results (JSON, figures, sections); only a study run as declared writes its own there.
RESULTS = ROOT / "studies" / "results"
#: The fourth study's committed judged JSONs: the collapse map (the exploratory search, judged) and the
#: confirmation (judged); the report's In brief and the closed-loop check (study --deep --kernel) read them.
JUDGED_MAP = RESULTS / "exploration_4_judged.json"
JUDGED_CONFIRMATION = RESULTS / "confirmation_4_judged.json"


def shown(path: Path | str) -> str:
    """``path`` relative to the repository when it lies inside it (generated files never carry this
    machine's absolute paths); otherwise as the user gave it."""
    path = Path(path)
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def suite_commit() -> str:
    """The suite's commit, ``+uncommitted changes`` where tracked code differs (``$RLQ_SUITE_COMMIT`` where the tree
    travelled without its .git, as to a GPU machine). The committed report (reports/) does not count as a change."""
    if os.environ.get("RLQ_SUITE_COMMIT"):
        return os.environ["RLQ_SUITE_COMMIT"]
    try:
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!reports"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return rev + ("+uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
