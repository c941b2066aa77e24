"""The benchmark gate's rule (analysis/judge/bench_verdict.py) on hand-made runs, and what it refuses to read."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.judge.bench_verdict import frame, gated_count, judge_run, load_baseline, load_run, regressions, thresholds
from repro.core.errors import SuiteError

# The policy as the README states it (not read from the module under test): a threshold is 3× the baseline's
# run-to-run spread, never below the 5 % goal; a spread beyond 10 % is reported, not gated.
GOAL, FACTOR, UNGATED = 0.05, 3, 0.10


def _run(device_us: float, host_controller: float, host_empty: float) -> pd.DataFrame:
    rows = [("graph replay: controller", "controller", device_us, "device"),
            ("graph replay: controller", "empty", 0.5, "device"),
            ("cupy launch + sync", "controller", host_controller, "host"),
            ("cupy launch + sync", "empty", host_empty, "host")]
    return pd.DataFrame([{"mode": m, "kernel": k, "median_us": v, "set_by": s} for m, k, v, s in rows])


def test_threshold_is_three_times_the_baseline_spread_never_below_the_goal():
    calm = {c.mode: c for c in thresholds(_run(0.800, 10.0, 9.8), _run(0.804, 10.0, 9.8))}
    assert calm["graph replay: controller"].threshold == pytest.approx(GOAL)
    assert calm["cupy launch + sync"].metric == "ratio"
    moved = {c.mode: c for c in thresholds(_run(0.800, 10.0, 9.8), _run(0.864, 10.0, 9.8))}
    spread = 0.864 / 0.800 - 1
    assert moved["graph replay: controller"].threshold == pytest.approx(FACTOR * spread)


def test_a_number_that_does_not_reproduce_is_reported_not_gated():
    (host,) = [c for c in thresholds(_run(0.8, 10.0, 9.8), _run(0.8, 13.0, 9.8)) if c.metric == "ratio"]
    assert host.spread > UNGATED and not host.gated and "does not reproduce" in host.reason
    assert not host.regressed


def test_host_modes_are_judged_on_the_ratio_so_a_slower_host_passes():
    base = (_run(0.8, 10.0, 9.8), _run(0.8, 10.1, 9.9))
    slower_host = judge_run(_run(0.8, 20.0, 19.6), *base)  # everything on the host twice as slow, ratio unchanged
    assert not regressions(slower_host)
    slower_controller = judge_run(_run(0.8, 11.0, 9.8), *base)  # the controller alone 10 % slower
    (line,) = regressions(slower_controller)
    assert line.startswith("REGRESSED cupy launch + sync:")


def test_only_a_slower_device_median_beyond_the_threshold_fails():
    base = (_run(0.8, 10.0, 9.8), _run(0.8, 10.0, 9.8))
    assert not regressions(judge_run(_run(0.8 * (1 + GOAL) * 0.999, 10.0, 9.8), *base))
    assert not regressions(judge_run(_run(0.4, 10.0, 9.8), *base))  # faster is fine
    (line,) = regressions(judge_run(_run(1.8, 10.0, 9.8), *base))
    assert "graph replay: controller" in line and "+125.0%" in line


def test_more_runs_widen_the_spread_to_largest_over_smallest():
    runs = [_run(0.80, 10.0, 9.8), _run(0.81, 10.0, 9.8), _run(0.86, 10.0, 9.8)]
    (device,) = [c for c in thresholds(*runs) if c.metric == "median"]
    assert device.spread == pytest.approx(0.86 / 0.80 - 1)
    assert device.threshold == pytest.approx(FACTOR * device.spread)
    assert device.base == pytest.approx((0.80 + 0.81 + 0.86) / 3)


def test_a_file_that_is_not_the_suites_pytest_benchmark_json_is_one_suite_error(tmp_path):
    for name, text in [("none.json", None), ("x.json", '{"benchmarks": [], "machine_info": {}}'), ("g.csv", "a,b\n1,2"),
                       ("bin.json", "\udcff")]:
        path = tmp_path / name
        if text is not None:
            path.write_text(text, errors="surrogateescape")
        with pytest.raises(SuiteError) as err:
            load_run(path)
        assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_a_baseline_folder_needs_two_runs_of_one_machine(tmp_path):
    with pytest.raises(SuiteError, match="not a baseline folder"):
        load_baseline(tmp_path / "nothing")
    with pytest.raises(SuiteError, match="at least two runs"):
        load_baseline(tmp_path)


def test_a_baseline_mode_the_run_did_not_measure_is_not_gated_and_not_counted():
    base = (_run(0.8, 10.0, 9.8), _run(0.8, 10.0, 9.8))
    host_only = _run(0.8, 10.0, 9.8)
    host_only = host_only[host_only["mode"] != "graph replay: controller"]
    checks = {c.mode: c for c in judge_run(host_only, *base)}
    assert not checks["graph replay: controller"].gated and "not measured" in checks["graph replay: controller"].reason
    assert gated_count(list(checks.values())) == 1
    assert gated_count(judge_run(host_only.iloc[0:0].reindex(columns=host_only.columns), *base)) == 0


def test_pytest_benchmarks_seconds_per_call_are_read_as_microseconds_per_step():
    stats = {"median": 2e-3, "q1": 1e-3, "q3": 3e-3, "min": 1e-3, "max": 4e-3, "mean": 2e-3, "stddev": 1e-3, "rounds": 5}
    row = frame([{"extra_info": {"mode": "m", "kernel": "controller", "steps_per_call": 500}, "stats": stats}]).iloc[0]
    assert row["median_us"] == pytest.approx(2e-3 * 1e6 / 500) and row["rounds"] == 5
