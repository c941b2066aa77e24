"""Output paths a command line will write: checked before any work, so a bad one costs nothing."""

from __future__ import annotations

import os
from pathlib import Path

from repro.errors import SuiteError


def check_writable(path: Path | None) -> None:
    """Create ``path``'s folder if needed; raise a one-line :class:`SuiteError` unless a file can be written there."""
    if path is None:
        return
    if path.is_dir():
        raise SuiteError(f"cannot write {path}: it is a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SuiteError(f"cannot write {path}: {err.strerror or err}") from None
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise SuiteError(f"cannot write {path}: permission denied")
