"""Output paths checked before any work, so that a long run never ends on an unwritable file."""

from __future__ import annotations

import tempfile
from pathlib import Path

from repro.errors import SuiteError


def check_writable(path: Path, flag: str) -> None:
    """Raise a one-line error unless ``path`` can be written: its folder is created if missing and a
    scratch file is made and removed there (permission bits alone do not tell, e.g. as root on /proc)."""
    path = Path(path)
    if path.is_dir():
        raise SuiteError(f"{flag} {path}: is a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            with path.open("a"):
                pass
        else:
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".write-check-"):
                pass
    except OSError as err:
        raise SuiteError(f"{flag} {path}: cannot be written ({err.strerror or err})".lstrip()) from None


def write_text(path: Path, text: str) -> None:
    """Write ``text`` (creating folders); an OS error becomes one line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise SuiteError(f"cannot write {path}: {err.strerror or err}") from None
