"""compute-sanitizer reports as gate rows: one failing row per report, naming the kernel line; one passing row per clean tool."""

from __future__ import annotations

from analysis.judge.findings import Finding, Where
from repro.runners.sanitize import PATHS, SanitizerReport

_TITLE = {"memcheck": "no out-of-bounds or misaligned device memory access",
          "initcheck": "no read of uninitialised device memory"}


def memory_findings(reports: tuple[SanitizerReport, ...], tool: str) -> list[Finding]:
    """``tool``'s rows for the gate's table: each of its reports fails at the line it names; none passes."""
    mine = [r for r in reports if r.tool == tool]
    if not mine:
        return [Finding(key=tool, title=f"compute-sanitizer {tool}", ok=True, unit="errors", documented=0, predicted=0,
                        measured=0, detail={"tool": tool, "paths": list(PATHS)}, where=None, line=0, doc=_TITLE[tool])]
    return [Finding(key=tool, title=f"compute-sanitizer {tool}", ok=False, unit="errors", documented=0, predicted=0,
                    measured=len(mine), detail={"tool": tool, "kind": r.kind, "kernel": r.kernel, "location": r.location,
                                                "path": r.path, "detail": r.detail},
                    where=Where(scenario=f"{r.location}, {r.path} path", event="sanitizer"), line=0, doc=_TITLE[tool])
            for r in mine]
