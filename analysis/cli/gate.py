"""The gate: measure a candidate kernel and compare every documented property with the contract.

Exit 0 when every property holds, 1 when any is violated, 2 for anything that
prevents a verdict (a usage error, a missing file, a kernel that does not
compile or lacks the symbol, an output path that cannot be written, an
internal error: one line; ``--debug`` shows the traceback). ``--json`` and
``--junit`` files are written for all three outcomes; their folders are checked
before any work. The candidate runs in child processes, each experiment group
under ``--timeout S``: a crash or a hang is a failing ``execution`` row naming
the scenario (exit 1), never a dead gate.
"""

from __future__ import annotations

import contextlib
import sys
import time

from analysis.cli import confined, policy
from analysis.cli.evaluate import evaluate
from analysis.present import render
from repro.backends import backend_names, get_backend
from repro.core.contract import load
from repro.core.errors import SuiteError
from repro.core.kernel_source import load_kernel
from repro.core.outputs import Output, check_outputs, write_text
from repro.core.paths import shown
from repro.runners.isolation import LIMIT_FACTOR, LIMIT_FLOOR

FORMATS = ("text", "json", "junit", "github")
#: Most seconds ``--timeout`` takes per experiment group (an hour: a longer hang is a hang).
MAX_TIMEOUT = 3600.0


def _formats(values: list[str] | None) -> list[str]:
    chosen = [f.strip() for v in (values or ["text"]) for f in v.split(",") if f.strip()]
    if not chosen:
        raise SuiteError(f"--format needs one of {', '.join(FORMATS)}")
    unknown = sorted(set(chosen) - set(FORMATS))
    if unknown:
        raise SuiteError(f"unknown --format {', '.join(unknown)} (choose from {', '.join(FORMATS)})")
    return list(dict.fromkeys(chosen))


@policy.command("gate")
def main(argv: list[str] | None = None) -> int:
    parser = policy.Parser("gate", description=__doc__.splitlines()[0])
    # an empty path is refused, not taken for "no kernel": `gate "$KERNEL"` with KERNEL unset must not pass
    parser.add_argument("kernel", nargs="?", type=policy.path, help="candidate .cu file (default: the contract's kernel)")
    parser.add_argument("--contract", help="contract entry to judge against (default: fixed, or the first entry of a "
                        "--contracts file that adds entries of its own)")
    parser.add_argument("--backend", default="auto", choices=backend_names())
    parser.add_argument("--format", action="append", metavar="FMT",
                        help=f"what to print on stdout: {', '.join(FORMATS)} (comma-separated or repeated; default text)")
    parser.add_argument("--json", type=policy.path, metavar="PATH", help="also write the verdict as JSON here")
    parser.add_argument("--junit", type=policy.path, metavar="PATH", help="also write JUnit XML (one test case per property)")
    parser.add_argument("--sanitize", action="store_true", help="also run the GPU launches under compute-sanitizer")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="wall-clock limit per experiment group, run in a child process (default: "
                             f"{LIMIT_FACTOR:g}× the reference kernel's time for the group, at least {LIMIT_FLOOR:g} s; "
                             f"at most {MAX_TIMEOUT:g})")
    parser.add_argument("--require-coverage", action="store_true",
                        help="fail when a line or branch of the candidate was never executed (host gcov)")
    parser.add_contracts()
    parser.add_require_sandbox(help="exit 2 where the candidate's code cannot be confined here (seccomp; see docs/DESIGN.md)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    contract_file = shown(args.contracts)
    kernel_file = shown(args.kernel) if args.kernel else "kernels"
    try:
        formats = _formats(args.format)
        if args.timeout is not None and not 0 < args.timeout <= MAX_TIMEOUT:  # NaN and inf (1e400) fail here too
            raise SuiteError(f"--timeout must be a positive number of seconds, at most {MAX_TIMEOUT:g}, "
                             f"not {args.timeout:g}")
        confined.check(args.require_sandbox)  # a line on stderr, beside the verdict (stdout keeps the asked-for formats alone)
        contract = load(args.contracts)
        args.contract = args.contract or contract.default_entry()
        controller = contract.controller(args.contract)
        contract_file = shown(controller.file or contract.path)  # the file whose lines the rows name
        path = args.kernel or controller.kernel
        kernel_file = shown(path)
        check_outputs([Output("--json", args.json), Output("--junit", args.junit)],
                      inputs=[("kernel", path), ("contract", contract.path)])
        verdict = evaluate(load_kernel(path, controller.symbol), args.contract, get_backend(args.backend), contract,
                           timeout=args.timeout, require_coverage=args.require_coverage, sanitize=args.sanitize,
                           # one line per experiment group, on a terminal only: a log or a pipe gets the verdict alone
                           progress=policy.progress("gate") if sys.stderr.isatty() else None)
        policy.stop_if_asked()  # a stop whose exception was dropped on the way ends here, before any verdict
    except BaseException as err:  # the gate's own part of the policy: the exit-2 outcome in every asked-for form
        _outputs_for_error(args, policy.describe(err), kernel_file, contract_file, time.perf_counter() - start)
        raise
    code = 0 if verdict.ok else 1
    data = {**verdict.as_dict(), "kernel": shown(verdict.source.origin), "exit_code": code}
    for row, f in zip(data["properties"], verdict.findings, strict=True):
        row["message"] = render.message(f, contract_file)  # the row as the table and JUnit say it
    printed = {
        "text": lambda: render.verdict(verdict, contract_file),
        "json": lambda: render.to_json(data),
        "junit": lambda: render.junit(verdict.findings, contract_file, f"gate.{args.contract}", verdict.seconds).rstrip(),
        "github": lambda: "\n".join(render.github(verdict.findings, kernel_file, contract_file)),
    }
    for fmt in formats:
        text = printed[fmt]()
        if text:
            print(text)
    for path, fmt in ((args.json, "json"), (args.junit, "junit")):  # each file: its printed form and a newline
        if path:
            write_text(path, printed[fmt]() + "\n")
    return code


def _outputs_for_error(args, error: str, kernel_file: str, contract_file: str, seconds: float) -> None:
    """The exit-2 outcome in every requested form: stdout formats, --json and --junit files."""
    formats = []
    with contextlib.suppress(SuiteError):
        formats = _formats(args.format)
    data = {"kernel": None if args.kernel is None else str(args.kernel), "contract": args.contract or "fixed",
            "backend": args.backend, "ok": False, "exit_code": 2, "error": error, "properties": []}
    printed = {"json": render.to_json(data),
               "junit": render.junit([], contract_file, f"gate.{args.contract or 'fixed'}", seconds, error=error).rstrip(),
               "github": "\n".join(render.github([], kernel_file, contract_file, error=error))}
    for fmt, text in printed.items():
        if fmt in formats:
            print(text)
    for path, fmt in ((args.json, "json"), (args.junit, "junit")):
        if path is not None:
            with contextlib.suppress(SuiteError):  # the error above already says why; an unwritable output path was that error
                # never over an input or a file of the repository, nor over the other output
                check_outputs([Output("--json", args.json), Output("--junit", args.junit)], inputs=[("kernel", args.kernel)])
                write_text(path, printed[fmt] + "\n")
