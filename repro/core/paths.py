"""Where the repository is, and how a path is shown in anything the suite writes."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def shown(path: Path | str) -> str:
    """``path`` relative to the repository when it lies inside it (generated files never carry this
    machine's absolute paths); otherwise as the user gave it."""
    path = Path(path)
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)
