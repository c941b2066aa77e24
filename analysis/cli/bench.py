"""Run the launch-overhead benchmark (pytest-benchmark), gate it on the machine's baseline, write its table and figure.

The benchmarks are ``tests/test_bench.py``'s, run by pytest-benchmark in a
child process (``python -m pytest … --benchmark-only --benchmark-json``); pytest's
own report goes to stderr with ``--verbose``, and otherwise only where the run broke
or a benchmark failed. A machine's baseline is a folder
of two or more of those JSON files, ``reports/bench/baselines/<machine>/run-N.json``
(``<machine>``: the GPU's name, or the CPU's model where there is no GPU).
``--record`` measures two back-to-back runs and makes them the machine's
baseline (``--add``: adds them to its runs, e.g. from a second machine of the
same kind) and writes the table from them: the committed ``reports/bench/``
on the reference machine (NVIDIA H200), nowhere else unless ``--out`` says
where. Otherwise one run is measured and judged against the baseline
(:mod:`analysis.judge.bench_verdict` says on what, with which thresholds):
one ``REGRESSED`` line per regressed mode and exit 1, else exit 0 (a benchmark
that fails, by timing wrong bits or raising, is a ``FAILED`` line and exit 1 too); the last line says how
many modes were gated, "0 modes gated" and why where nothing was (no baseline for this machine). The table
and figure go to ``reports/bench/last-run/`` (git-ignored) either way.
``--slow-ns`` adds a busy wait of about NS ns to the controller, to see the
gate catch it. Every input is checked before the first benchmark: exit 2 and
one line for a bad one.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from analysis.cli import policy
from analysis.judge.bench_verdict import (
    REFERENCE,
    baseline_runs,
    baselines,
    gated_count,
    judge_run,
    load_baseline,
    load_run,
    portable,
    regressions,
    run_to_run,
    thresholds,
    wrong_results,
)
from analysis.present import bench_report
from repro import bench
from repro.core.contract import CONTRACTS, load
from repro.core.errors import SuiteError
from repro.core.outputs import Output, check_outputs
from repro.core.paths import ROOT, shown

BENCH_TESTS = "tests/test_bench.py"
PYTEST_FAILED = 1  # pytest's exit code when a test failed (here: a mode timed wrong bits, failed a check, or raised)


def _rounds(text: str) -> int:
    with contextlib.suppress(ValueError):
        if 1 <= (n := int(text)) <= bench.ROUNDS_MAX:
            return n
    raise argparse.ArgumentTypeError(f"must be a whole number of rounds from 1 to {bench.ROUNDS_MAX}, not {text!r}")


def check(args) -> tuple[tuple[bench.Mode, ...], str, Path, list | None]:
    """Every input, before any work: the modes, this machine's tag, the baseline folder and its runs (None: none)."""
    if not 0 <= args.slow_ns <= bench.SLOW_NS_MAX:
        raise SuiteError(f"--slow-ns must be 0 to {bench.SLOW_NS_MAX} ns, not {args.slow_ns}")
    if args.add and not args.record:
        raise SuiteError("--add adds a recorded pair to a baseline: it needs --record")
    if args.record and args.slow_ns:
        raise SuiteError("--record with --slow-ns would make a slowed controller the baseline")
    if any(not t.strip() for t in args.mode):
        raise SuiteError("--mode needs a piece of a mode's name, not an empty one")
    modes = tuple(m for m in bench.MODES if not args.mode or any(t in m.name for t in args.mode))
    if not modes:
        raise SuiteError(f"no mode matches {args.mode} (modes: {', '.join(m.name for m in bench.MODES)})")
    tag = bench.machine_tag()
    folder = args.baseline or ROOT / "reports" / "bench" / "baselines" / tag
    if folder.exists() and not folder.is_dir():
        raise SuiteError(f"--baseline {folder}: not a folder (a baseline is a folder of run-N.json)")
    named = args.baseline is not None and not args.record  # a baseline asked for by name must be one
    if named and not folder.is_dir():
        raise SuiteError(f"--baseline {folder}: no such folder")
    old = None
    if named or (folder.is_dir() and baseline_runs(folder) and (args.add or not args.record or args.baseline)):
        old = load_baseline(folder)
        if old[0].tag != tag:
            raise SuiteError(f"--baseline {shown(folder)} is the baseline of {old[0].tag}; this machine is {tag}")
    if args.add and old is None:
        raise SuiteError(f"--add: no baseline to add to in {shown(folder)}")
    default_out = args.out is None
    if args.out is None:
        if args.record and tag != REFERENCE:
            raise SuiteError(f"--record on {tag}: the committed table reports/bench/bench.md is the "
                             f"{REFERENCE}'s; give --out DIR for this machine's table")
        args.out = ROOT / "reports" / "bench" / ("" if args.record else "last-run")
    # Nothing lands in a folder of the repository's own (kernels/, the top level) but what --record writes: the
    # machine's committed baseline, and on the reference machine the committed table. The default last-run
    # folder is allowed too: a copy without git counts every file under reports/ as the repository's.
    outputs = [Output("--out", args.out, folder=True)]
    committed = [args.out] if default_out else []
    if args.record:
        outputs.append(Output("--baseline", folder, folder=True))
        committed.append(ROOT / "reports" / "bench" / "baselines" / tag)
        if tag == REFERENCE:
            committed.append(ROOT / "reports" / "bench")
    # a judging run reads the baseline's runs: its output folder must not be the one holding them
    inputs = [("baseline", p) for p in baseline_runs(folder)] if old is not None and not args.record else []
    check_outputs(outputs, inputs=inputs, committed=committed)
    return modes, tag, folder, old


def pytest_run(modes: tuple[bench.Mode, ...], args, json_path: Path) -> int:
    """One run of the benchmarks of ``modes`` through pytest-benchmark, in a child pytest; pytest's exit code.

    pytest's own report (a line per benchmark, pytest-benchmark's table) goes to stderr with ``--verbose``;
    otherwise it is kept and shown only where the run broke (:class:`SuiteError`) or a benchmark failed.
    """
    ids = [f"{BENCH_TESTS}::test_mode[{m.slug}-{w}]" for m in modes for w in bench.WHICH]
    cmd = [sys.executable, "-m", "pytest", *ids, f"--rootdir={ROOT}", "--benchmark-only",
           f"--benchmark-json={json_path}", "--bench-slow-ns", str(args.slow_ns), "-p", "no:cacheprovider",
           "-v" if args.verbose else "-q"]
    if importlib.util.find_spec("xdist") is not None:
        cmd += ["-p", "no:xdist"]  # pytest-benchmark times nothing under xdist
    if args.rounds:
        cmd += ["--bench-rounds", str(args.rounds)]
    # The benchmarks run in one process whatever started this one: no -n from a CI job's PYTEST_ADDOPTS, and
    # no xdist worker's variables (pytest-benchmark disables itself inside a worker, e.g. in this suite's tests).
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS" and not k.startswith("PYTEST_XDIST")}
    if args.verbose:
        return subprocess.run(cmd, cwd=ROOT, env=env, stdout=sys.stderr, stdin=subprocess.DEVNULL).returncode
    done = subprocess.run(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          errors="replace")
    if done.returncode != 0 or not json_path.is_file():  # what broke, or which benchmark failed: pytest's words
        sys.stderr.write(done.stdout + done.stderr)
    return done.returncode


@policy.command("bench")
def main(argv: list[str] | None = None) -> int:
    p = policy.Parser("bench", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=policy.path, help="folder for the run's JSON, table and PNG (default: reports/bench/last-run, "
                   "which git ignores; with --record on the reference machine the committed reports/bench)")
    p.add_argument("--record", action="store_true", help="measure two back-to-back runs and save them as the baseline")
    p.add_argument("--add", action="store_true", help="with --record: add the pair to the baseline's runs")
    p.add_argument("--baseline", type=policy.path, help="baseline folder (default: reports/bench/baselines/<machine>)")
    p.add_argument("--slow-ns", type=int, default=0,
                   help=f"slow the controller by a busy wait of about NS ns (0 to {bench.SLOW_NS_MAX})")
    p.add_argument("--mode", action="append", default=[], help="only modes whose name contains TEXT (repeatable)")
    p.add_argument("--rounds", type=_rounds, metavar="N",
                   help=f"timed rounds per mode (1 to {bench.ROUNDS_MAX}; default: each mode's own)")
    p.add_argument("--verbose", action="store_true", help="show pytest's and pytest-benchmark's own report as it runs")
    args = p.parse_args(argv)
    modes, tag, folder, old = check(args)
    rig = bench.make_rig(load(CONTRACTS))  # bench takes no --contracts: the tracked file
    skipped = {m.name: why for m in modes if (why := bench.unavailable(m, rig))}
    runs, failed, say = [], False, policy.progress("bench")
    with tempfile.TemporaryDirectory(prefix="rlq-bench-") as tmp:
        for i in range(2 if args.record else 1):
            what = f"run {i + 1} of 2" if args.record else "run"
            n = len(modes) - len(skipped)
            say(f"{what}: {n} mode{'s' * (n != 1)} × {len(bench.WHICH)} kernels through "
                f"pytest-benchmark ({BENCH_TESTS} --benchmark-only)"
                + (f", controller slowed on purpose by a busy wait of about {args.slow_ns} ns" if args.slow_ns else ""))
            path = Path(tmp) / f"run-{i}.json"
            code = pytest_run(modes, args, path)
            if code not in (0, PYTEST_FAILED) or not path.is_file():
                raise SuiteError(f"pytest-benchmark ended with exit code {code} and "
                                 f"{'its JSON' if path.is_file() else 'no JSON'} (pytest's output above)")
            run = load_run(path)
            timed = set(zip(run.df["mode"], run.df["kernel"], strict=True))
            if any((m.name, w) not in timed for m in modes if m.name not in skipped for w in bench.WHICH):
                # a mode that raised leaves no row: the run broke (not a violated property), whatever else failed
                raise SuiteError("a benchmark mode raised, so its row is missing and nothing was saved "
                                 "(pytest's output above)")
            failed |= code == PYTEST_FAILED
            runs.append(run)
        written = _save(runs, args, folder, old)
    return _judge(runs, written, args, folder, old, skipped, failed)


def _save(runs: list, args, folder: Path, old: list | None) -> list[Path]:
    """Move the runs into place: the baseline's next run-N.json files (--record), else OUT/run.json."""
    if not args.record:
        args.out.mkdir(parents=True, exist_ok=True)
        written = [args.out / "run.json"]
    else:
        if not args.add:  # a new baseline replaces the machine's old runs
            for p in baseline_runs(folder):
                p.unlink()
        start = len(old) + 1 if args.add else 1  # check() refuses --add without a baseline
        written = [folder / f"run-{start + i}.json" for i in range(len(runs))]
    for run, target in zip(runs, written, strict=True):
        shutil.move(run.path, target)
    return written


def _judge(runs: list, written: list[Path], args, folder: Path, old: list | None, skipped: dict,
           failed: bool) -> int:
    df = runs[0].df  # the runs as measured: written[] holds the same files, moved (each run's .path is stale)
    lines = ["FAILED a benchmark test failed: a mode timed wrong bits or failed one of its checks (pytest's output "
             "above)"] if failed else []
    label = f"controller slowed by {args.slow_ns} ns on purpose" if args.slow_ns else ""
    shown_runs = [shown(p) for p in written]
    drift = checks = None
    if args.record:
        every = [*(old if args.add else []), *runs]
        repeat = runs[1].df
        lines += wrong_results(df) + wrong_results(repeat)
        title = f"Launch-overhead benchmark: baseline of {len(every)} runs (the last two shown, back to back)"
        drift, checks = run_to_run(df, repeat), thresholds(*(r.df for r in every))
        outcome = f"bench: saved the baseline {shown(folder)} ({len(every)} runs; nothing judged)"
    elif old is None:  # no baseline of its own: the ratios measured side by side, against every committed one
        checks = portable(df, baselines(ROOT / "reports" / "bench" / "baselines"))
        lines = regressions(checks) + wrong_results(df) + lines
        title = f"Launch-overhead benchmark, gated by machine-independent ratios {label}".strip()
        gated, bad = gated_count(checks), sum(c.regressed for c in checks)
        why = (f"no baseline for this machine: {shown(folder)}, record one with --record for per-step figures; the "
               f"committed table is the {REFERENCE}'s: reports/bench/bench.md")
        if bad:
            outcome = f"bench: {bad} of {gated} modes regressed by their controller/empty ratio ({why})"
        elif gated:
            outcome = (f"bench: {gated} modes gated by their controller/empty ratio against the committed baselines, "
                       f"within bounds ({why})")
        else:
            outcome = (f"bench: 0 modes gated ({why}): no device-timed mode measured here has a committed ratio "
                       "(host-timed ratios move with the host)")
    else:
        checks = judge_run(df, *(r.df for r in old))
        lines = regressions(checks) + wrong_results(df) + lines
        title = f"Launch-overhead benchmark against the baseline {shown(folder)} {label}".strip()
        gated, bad = gated_count(checks), sum(c.regressed for c in checks)
        if bad:
            outcome = f"bench: {bad} of {gated} gated modes regressed"
        elif gated:
            outcome = f"bench: {gated} gated modes within bounds"
        else:
            outcome = (f"bench: 0 modes gated: none of the baseline's gated modes ({shown(folder)}) was measured in "
                       "this run")
    bench_report.write(args.out, title, df, runs[0].machine, drift=drift, checks=checks, skipped=skipped,
                              verdict=[*lines, outcome.removeprefix("bench: ")], runs=shown_runs)
    print(bench_report.table(df, drift, checks))  # bench.md has the rest: the verdict, what each mode measures
    by_reason: dict[str, list[str]] = {}
    for mode, why in skipped.items():
        by_reason.setdefault(why, []).append(mode)
    for why, names in by_reason.items():
        print(f"bench: not run here ({why}): {', '.join(names)}")
    for line in lines:
        print(line)
    print(f"wrote {', '.join(shown_runs)}, {shown(args.out / 'bench.md')} and {shown(args.out / 'bench.png')}")
    print(outcome)
    return 1 if lines else 0
