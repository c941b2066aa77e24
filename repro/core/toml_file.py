"""Reading a declaration or pre-registration TOML file: its table, or one line saying why it cannot be read."""

from __future__ import annotations

import tomllib
from pathlib import Path

from repro.core.errors import SuiteError


def read_toml(path: Path | str, what: str) -> dict:
    """``path``'s TOML as a dict; one-line :class:`SuiteError` naming ``what`` the file is where it cannot be read
    (missing, not UTF-8) or is not TOML."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise SuiteError(f"{path}: cannot read the {what} ({err})") from None
    except tomllib.TOMLDecodeError as err:
        raise SuiteError(f"{path}: not TOML ({err})") from None
