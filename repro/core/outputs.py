"""Output paths a command line will write: checked before any work, so a bad one costs nothing."""

from __future__ import annotations

import tempfile
from pathlib import Path

from repro.core.errors import SuiteError


def check_writable(path: Path | None, flag: str = "") -> None:
    """Create ``path``'s folder if needed; raise a one-line :class:`SuiteError` unless a file can be written there.

    A scratch file is made and removed there: permission bits alone do not tell (e.g. as root, or on /proc).
    ``flag`` names the option in the message (``--json``).
    """
    if path is None:
        return
    path = Path(path)
    what = f"{flag} {path}" if flag else f"cannot write {path}"
    if path.is_dir():
        raise SuiteError(f"{what}: it is a folder")
    blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise SuiteError(f"{what}: {blocker} is a file, not a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            with path.open("a"):
                pass
        else:
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".write-check-"):
                pass
    except OSError as err:
        raise SuiteError(f"{what}: cannot be written ({err.strerror or err})" if flag
                         else f"{what}: {err.strerror or err}") from None


def write_text(path: Path, text: str) -> None:
    """Write ``text`` (creating folders); an OS error becomes one line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise SuiteError(f"cannot write {path}: {err.strerror or err}") from None
