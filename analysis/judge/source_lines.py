"""A candidate's source read as code: lines with comments blanked, line numbers kept (for pointing at a line)."""

from __future__ import annotations

import re


def code_lines(text: str) -> list[str]:
    """The source's lines with comments blanked (line numbers kept)."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    return [line.split("//", 1)[0] for line in text.splitlines()]
