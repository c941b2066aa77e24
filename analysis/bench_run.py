"""Run the benchmark as a regression gate, then write its table and figure.

    python -m analysis.bench_run [--out DIR] [--threshold PCT] [PYTEST ARGS...]

Each run is saved under ``reports/bench/baselines/<machine>/`` (the GPU's name,
or the CPU's model where there is no GPU). When an earlier run of the same
machine exists, a median slower than it by more than ``--threshold`` percent
(default 15: three times the 5 % run-to-run spread the benchmark aims for)
fails the run (pytest-benchmark's ``--benchmark-compare-fail``); without one
the run only records itself, as the first baseline.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

from analysis import bench_report
from repro.backends import get_backend, unavailable_reason
from repro.paths import ROOT


def machine_tag() -> str:
    """A file-name-safe name of what the benchmark times: the GPU where there is one, else the CPU."""
    if unavailable_reason("cupy") is None:
        name = get_backend("cupy").describe().split(" (")[0]
    else:
        name = get_backend("host").describe().split(" (")[0]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.bench_run", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench")
    parser.add_argument("--threshold", type=float, default=15.0, help="allowed median regression, percent")
    args, rest = parser.parse_known_args(argv)
    storage = args.out / "baselines" / machine_tag()
    baseline = sorted(storage.rglob("*.json"))
    flags = [str(ROOT / "tests" / "test_bench.py"), "-m", "benchmark", "--benchmark-only", "-p", "no:xdist",
             f"--benchmark-json={args.out / 'latest.json'}", f"--benchmark-storage={storage}", "--benchmark-autosave"]
    if baseline:
        print(f"bench: comparing with {baseline[-1].relative_to(args.out)}; fails beyond +{args.threshold:g}% median")
        flags += ["--benchmark-compare", f"--benchmark-compare-fail=median:{args.threshold:g}%"]
    else:
        print(f"bench: no baseline for this machine yet; this run becomes it ({storage.relative_to(args.out)})")
    args.out.mkdir(parents=True, exist_ok=True)
    code = int(pytest.main(flags + rest))
    if (args.out / "latest.json").is_file():
        bench_report.compact(args.out / "latest.json")  # per-round samples are megabytes; stats suffice
        bench_report.main([str(args.out / "latest.json"), "--out", str(args.out)])
    return code


if __name__ == "__main__":
    sys.exit(main())
