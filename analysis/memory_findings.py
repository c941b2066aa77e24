"""compute-sanitizer reports as gate rows: one failing row per report, naming the kernel line; one passing row per clean tool."""

from __future__ import annotations

from analysis.properties import Finding
from repro.sanitize import PATHS, TOOLS, SanitizerReport

_TITLE = {"memcheck": "no out-of-bounds or misaligned device memory access",
          "initcheck": "no read of uninitialised device memory"}


def memory_findings(reports: list[SanitizerReport], tools: tuple[str, ...] = TOOLS,
                    paths: tuple[str, ...] = PATHS) -> list[Finding]:
    """Rows for the gate's table: each report fails at the line it names; a tool with none passes."""
    rows = []
    for tool in tools:
        mine = [r for r in reports if r.tool == tool]
        if not mine:
            rows.append(Finding(tool, f"compute-sanitizer {tool}", _TITLE[tool], "0 errors",
                                f"0 errors on the {', '.join(paths)} launch paths", True, value=0))
        for r in mine:
            rows.append(Finding(tool, f"compute-sanitizer {tool}", _TITLE[tool], "0 errors",
                                f"{r.kind} in {r.kernel or 'a CUDA call'} at {r.location} ({r.path} path)", False,
                                where=f"{r.location}, {r.path} path" + (f" ({r.detail})" if r.detail else ""),
                                value=len(mine)))
    return rows
