"""The benchmark's table and figure, built from real (host-only) benchmark runs."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.present import bench_report
from repro import bench
from repro.core.errors import SuiteError


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, contract):
    folder = tmp_path_factory.mktemp("bench")
    modes = tuple(m for m in bench.MODES if m.needs == "host")
    paths = []
    for name in ("run.json", "repeat.json"):
        run = bench.measure(contract, modes, rounds=lambda m: 5)
        run.save(folder / name)
        paths.append(folder / name)
    return paths


def test_table_reports_per_step_medians_and_the_empty_twin_ratio(two_runs):
    run = bench.load_run(two_runs[0])
    med = {s.kernel: float(np.median(s.us)) for s in run.samples}
    text = bench_report.table(bench.frame(run))
    row = next(line for line in text.splitlines() if line.startswith("| host ctypes call |"))
    assert f"{med['controller'] / med['empty']:.2f}×" in row


def test_repeat_column_is_the_change_between_the_two_runs(two_runs):
    first, second = (bench.load_run(p) for p in two_runs)
    change = np.median(second.samples[0].us) / np.median(first.samples[0].us) - 1
    text = bench_report.table(bench.frame(first), bench.frame(second))
    row = next(line for line in text.splitlines() if line.startswith("| host ctypes call |"))
    assert f"{change:+.1%}" in row


def test_write_makes_table_modes_and_png(two_runs, tmp_path):
    df, machine = bench_report.load(two_runs[0])
    bench_report.write(tmp_path, "two runs", df, machine, bench_report.load(two_runs[1])[0])
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"
    text = (tmp_path / "bench.md").read_text()
    assert "## Modes" in text and "| host ctypes call | one ctypes call" in text


def test_a_missing_or_foreign_file_is_one_suite_error(tmp_path):
    with pytest.raises(SuiteError):
        bench_report.load(tmp_path / "none.json")
    (tmp_path / "x.json").write_text('{"benchmarks": []}')
    with pytest.raises(SuiteError):
        bench_report.load(tmp_path / "x.json")
