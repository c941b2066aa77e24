"""compute-sanitizer reports as gate rows: one failing row per report, naming the kernel line; one passing row per clean tool."""

from __future__ import annotations

from analysis.judge.findings import Finding, Where
from repro.runners.sanitize import PATHS, TOOLS, SanitizerReport

_TITLE = {"memcheck": "no out-of-bounds or misaligned device memory access",
          "initcheck": "no read of uninitialised device memory"}


def memory_findings(reports: list[SanitizerReport], tools: tuple[str, ...] = TOOLS,
                    paths: tuple[str, ...] = PATHS) -> list[Finding]:
    """Rows for the gate's table: each report fails at the line it names; a tool with none passes."""
    rows = []
    for tool in tools:
        mine = [r for r in reports if r.tool == tool]
        if not mine:
            rows.append(Finding(tool, f"compute-sanitizer {tool}", True, "errors", 0, 0, 0,
                                {"tool": tool, "paths": list(paths)}, None, 0, _TITLE[tool]))
        for r in mine:
            detail = {"tool": tool, "kind": r.kind, "kernel": r.kernel, "location": r.location, "path": r.path,
                      "detail": r.detail}
            rows.append(Finding(tool, f"compute-sanitizer {tool}", False, "errors", 0, 0, len(mine), detail,
                                Where(f"{r.location}, {r.path} path", "sanitizer"), 0, _TITLE[tool]))
    return rows
