"""The gate: measure a candidate kernel and compare every documented property with the contract.

    python -m analysis.gate [KERNEL.cu] [--contract NAME] [--backend auto|host|cupy] [--json PATH] [--sanitize]
                            [--timeout S] [--require-coverage]

Exit 0 when every property holds, 1 when any is violated, 2 for a usage
error, a missing file, a kernel that does not compile (host compiler or
NVRTC) or lacks the extern "C" symbol. The candidate runs in child processes,
each experiment group under --timeout S: a crash or a hang is a failing
``execution`` row naming the scenario (exit 1), never a dead gate.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from analysis.memory_findings import memory_findings
from analysis.verdict import Verdict, evaluate
from repro.backends import NAMES, get_backend
from repro.contract import load
from repro.errors import SuiteError
from repro.isolation import DEFAULT_TIMEOUT
from repro.kernel_source import load_kernel
from repro.sanitize import sanitize


def format_table(verdict: Verdict, contract_path: Path) -> str:
    """The verdict as a plain-text table, failures followed by where they show and the contract line."""
    head = ("property", "documented", "measured", "verdict")
    rows = [(f.key, f.documented, f.measured, "PASS" if f.ok else "FAIL") for f in verdict.findings]
    widths = [min(max(len(r[i]) for r in [head, *rows]), cap) for i, cap in enumerate((16, 24, 80, 7))]

    def line(cells):
        return "  ".join(_clip(c, w).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [line(head), line(["-" * w for w in widths])]
    for f, row in zip(verdict.findings, rows, strict=True):
        out.append(line(row))
        if not f.ok:
            out.append(f"    first shows: {f.where}")
            if f.line:
                out.append(f"    if intended, change {contract_path.name}:{f.line} ({f.doc})")
    return "\n".join(out)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.gate", description=__doc__.splitlines()[0])
    parser.add_argument("kernel", nargs="?", help="candidate .cu file (default: the contract's kernel)")
    parser.add_argument("--contract", default="fixed", help="contract entry to judge against (default: fixed)")
    parser.add_argument("--backend", default="auto", choices=NAMES)
    parser.add_argument("--json", type=Path, help="also write the verdict as JSON here")
    parser.add_argument("--sanitize", action="store_true", help="also run the GPU launches under compute-sanitizer")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
                        help=f"wall-clock limit per experiment group, run in a child process (default {DEFAULT_TIMEOUT:g} s)")
    parser.add_argument("--require-coverage", action="store_true",
                        help="fail when a line or branch of the candidate was never executed (host gcov)")
    args = parser.parse_args(argv)
    if not args.timeout > 0:
        parser.error(f"--timeout must be a positive number of seconds, not {args.timeout:g}")
    try:
        contract = load()
        controller = contract.controller(args.contract)
        path = Path(args.kernel) if args.kernel else controller.kernel
        verdict = evaluate(load_kernel(path, controller.symbol), args.contract, get_backend(args.backend), contract,
                           timeout=args.timeout, require_coverage=args.require_coverage)
        if args.sanitize:  # memcheck + initcheck rows, one per report (see repro/sanitize.py)
            verdict.findings += memory_findings(sanitize(verdict.source, contract.slots))
    except SuiteError as err:
        print(f"gate: error: {err}", file=sys.stderr)
        return 2
    print(f"kernel   {verdict.source.origin}  (sha256 {verdict.source.sha256[:12]})")
    print(f"contract {args.contract}  ({contract.path.name})")
    print(f"backend  {verdict.backend}: {verdict.device}")
    print()
    print(format_table(verdict, contract.path))
    print()
    for note in verdict.notes:
        print(f"note: {note}")
    n, bad = len(verdict.findings), verdict.failed
    if bad:
        print(f"FAIL: {len(bad)} of {n} properties violated ({', '.join(f.key for f in bad)}) in {verdict.seconds:.2f} s")
    else:
        print(f"PASS: all {n} properties hold in {verdict.seconds:.2f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(verdict.as_dict(), indent=2))
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
