"""The benchmark's table and figure, built from a real (host-only) benchmark run's JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from analysis import bench_report
from repro.paths import ROOT


@pytest.fixture(scope="module")
def run_json(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "run.json"
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/test_bench.py", "-m", "benchmark and not gpu",
                           "--benchmark-only", "-p", "no:xdist", "-q", f"--benchmark-json={out}",
                           "--benchmark-max-time=0.05"], cwd=ROOT, capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


def test_table_reports_per_step_medians_and_the_empty_twin_ratio(run_json):
    df, machine = bench_report.load(run_json)
    data = json.loads(run_json.read_text())
    host = {b["extra_info"]["kernel"]: b["stats"]["median"] * 1e6 for b in data["benchmarks"]}
    assert set(df.kernel) == {"controller", "empty"}
    text = bench_report.table(df)
    row = next(line for line in text.splitlines() if line.startswith("| host ctypes call |"))
    assert f"{host['controller'] / host['empty']:.2f}×" in row


def test_cli_writes_table_and_png(run_json, tmp_path):
    assert bench_report.main([str(run_json), "--repeat", str(run_json), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"
    assert "+0.0%" in (tmp_path / "bench.md").read_text()


def test_cli_missing_file_exits_2(tmp_path):
    assert bench_report.main([str(tmp_path / "none.json")]) == 2
