"""Run the launch-overhead benchmark as a regression gate, then write its table and figure.

    python -m analysis bench [--out DIR] [--record [--add]] [--baseline PATH] [--slow-ns NS] [--mode TEXT ...]

A machine's baseline is two back-to-back runs in
``reports/bench/baselines/<machine>.json`` (the GPU's name, or the CPU's model
where there is no GPU); ``--record`` measures and saves them, ``--record --add``
adds a pair from another machine of the same kind to them. Otherwise one
run is measured and judged against that baseline (:mod:`analysis.judge.bench_verdict`
says on what, and with which thresholds): one line per regressed mode and
exit 1, else exit 0. The table and figure are written either way. ``--slow-ns``
adds a busy wait of about NS ns to the controller, to see the gate catch it.
Exit 2 for a usage error or a file that cannot be read.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from analysis.cli import policy
from analysis.judge.bench_verdict import judge, regressions, thresholds, wrong_results
from analysis.present import bench_report
from repro import bench
from repro.backends import get_backend, unavailable_reason
from repro.bench.result import frame, load_baseline, save_baseline
from repro.core.contract import load
from repro.core.errors import SuiteError
from repro.core.outputs import check_writable
from repro.core.paths import ROOT, shown


def machine_tag() -> str:
    """A file-name-safe name of what the benchmark times: the GPU where there is one, else the CPU."""
    if unavailable_reason("cupy") is None:
        name = get_backend("cupy").describe().split(" (")[0]
    else:
        name = get_backend("host").describe().split(" (")[0]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "unknown"


def _progress(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = policy.Parser(prog="python -m analysis bench", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for JSON, table, PNG (default: with --record the committed "
                        "reports/bench, else reports/bench/last-run, which git ignores)")
    parser.add_argument("--record", action="store_true", help="measure two back-to-back runs and save them as baseline")
    parser.add_argument("--add", action="store_true", help="with --record: add the pair to the baseline's runs")
    parser.add_argument("--baseline", type=Path, help="baseline file (default: reports/bench/baselines/<machine>.json)")
    parser.add_argument("--slow-ns", type=int, default=0, help="slow the controller by a busy wait of about NS ns")
    parser.add_argument("--mode", action="append", default=[], help="only modes whose name contains TEXT (repeatable)")
    args = parser.parse_args(argv)
    # a judging run never overwrites the committed table (made by --record on the baseline's machine)
    args.out = args.out or ROOT / "reports" / "bench" / ("" if args.record else "last-run")
    try:
        if args.slow_ns < 0:
            raise SuiteError(f"--slow-ns must be a non-negative number of ns, not {args.slow_ns}")
        if args.out.exists() and not args.out.is_dir():
            raise SuiteError(f"--out {args.out}: not a folder")
        check_writable(args.out / "bench.md", "--out")
        if args.baseline is not None and not args.baseline.is_file() and not args.record:
            raise SuiteError(f"--baseline {args.baseline}: no such file")
        contract = load()
        baseline = args.baseline or ROOT / "reports" / "bench" / "baselines" / f"{machine_tag()}.json"
        modes = tuple(m for m in bench.MODES if not args.mode or any(t in m.name for t in args.mode))
        if not modes:
            raise SuiteError(f"no mode matches {args.mode} (modes: {', '.join(m.name for m in bench.MODES)})")
        controller = None
        if args.slow_ns:
            entry = contract.controller("fixed")
            clock = get_backend("cupy").cp.cuda.Device().attributes["ClockRate"] if unavailable_reason("cupy") is None \
                else 1_980_000
            controller = bench.slowed(bench.sources(contract)["controller"], args.slow_ns, clock)
            _progress(f"controller {entry.symbol} slowed on purpose by a busy wait of about {args.slow_ns} ns")
        runs = [bench.measure(contract, modes, controller=controller, progress=_progress)
                for _ in range(2 if args.record else 1)]
        old = load_baseline(baseline) if (args.add or not args.record) and baseline.is_file() else None
    except SuiteError as err:
        print(f"bench_run: error: {err}", file=sys.stderr)
        return 2

    args.out.mkdir(parents=True, exist_ok=True)
    runs[0].save(args.out / "latest.json")
    df = frame(runs[0])
    for mode, why in runs[0].skipped.items():
        print(f"bench: skipped {mode}: {why}")
    errors = [f"ERROR {mode}: {why}" for run in runs for mode, why in run.errors.items()]
    label = f"controller slowed by {args.slow_ns} ns on purpose" if args.slow_ns else ""
    if args.record:
        runs[1].save(args.out / "repeat.json")
        every = [*(old or []), *runs]
        save_baseline(baseline, every)
        lines = wrong_results(df) + wrong_results(frame(runs[1])) + errors
        title = f"Launch-overhead benchmark: baseline of {len(every)} runs (the last two shown, back to back)"
        text = bench_report.write(args.out, title, df, runs[0].machine, repeat=frame(runs[1]),
                                  checks=thresholds(*(frame(r) for r in every)), skipped=runs[0].skipped, verdict=lines)
        print(text)
        print(f"bench: saved the baseline {shown(baseline)}")
    elif old is None:
        lines = wrong_results(df) + errors
        text = bench_report.write(args.out, f"Launch-overhead benchmark {label}".strip(), df, runs[0].machine,
                                  skipped=runs[0].skipped, verdict=lines)
        print(text)
        print(f"bench: no baseline for this machine ({shown(baseline)}); record one with --record")
    else:
        checks = judge(df, *(frame(r) for r in old))
        lines = regressions(checks) + wrong_results(df) + errors
        title = f"Launch-overhead benchmark against the baseline {shown(baseline)} {label}".strip()
        text = bench_report.write(args.out, title, df, runs[0].machine, checks=checks, skipped=runs[0].skipped,
                                  verdict=lines)
        print(text)
        gated, bad = sum(c.gated for c in checks), sum(c.regressed for c in checks)
        print(f"bench: {bad} of {gated} gated modes regressed" if bad else f"bench: {gated} gated modes within bounds")
    print(f"bench: table and figure in {shown(args.out)}")
    for line in lines:
        print(line)
    print(f"wrote {shown(args.out / 'bench.md')} and {shown(args.out / 'bench.png')}")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(policy.run(main))
