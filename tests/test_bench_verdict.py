"""The benchmark gate's rule (analysis/judge/bench_verdict.py) on hand-made runs, and the CLI's exit codes on a real one."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis.cli import bench as bench_run
from analysis.judge.bench_verdict import REPEATABILITY, SPREAD_FACTOR, UNGATED_ABOVE, judge, regressions, thresholds


def _run(device_us: float, host_controller: float, host_empty: float) -> pd.DataFrame:
    rows = [("graph replay: controller", "controller", device_us, "device"),
            ("graph replay: controller", "empty", 0.5, "device"),
            ("cupy launch + sync", "controller", host_controller, "host"),
            ("cupy launch + sync", "empty", host_empty, "host")]
    return pd.DataFrame([{"mode": m, "kernel": k, "median_us": v, "set_by": s} for m, k, v, s in rows])


def test_threshold_is_three_times_the_baseline_spread_never_below_the_goal():
    calm = {c.mode: c for c in thresholds(_run(0.800, 10.0, 9.8), _run(0.804, 10.0, 9.8))}
    assert calm["graph replay: controller"].threshold == REPEATABILITY
    assert calm["cupy launch + sync"].metric == "ratio"
    moved = {c.mode: c for c in thresholds(_run(0.800, 10.0, 9.8), _run(0.864, 10.0, 9.8))}
    spread = 0.864 / 0.800 - 1
    assert moved["graph replay: controller"].threshold == pytest.approx(SPREAD_FACTOR * spread)


def test_a_number_that_does_not_reproduce_is_reported_not_gated():
    (host,) = [c for c in thresholds(_run(0.8, 10.0, 9.8), _run(0.8, 13.0, 9.8)) if c.metric == "ratio"]
    assert host.spread > UNGATED_ABOVE and not host.gated and "does not reproduce" in host.reason
    assert not host.regressed


def test_host_modes_are_judged_on_the_ratio_so_a_slower_host_passes():
    base = (_run(0.8, 10.0, 9.8), _run(0.8, 10.1, 9.9))
    slower_host = judge(_run(0.8, 20.0, 19.6), *base)  # everything on the host twice as slow, ratio unchanged
    assert not regressions(slower_host)
    slower_controller = judge(_run(0.8, 11.0, 9.8), *base)  # the controller alone 10 % slower
    (line,) = regressions(slower_controller)
    assert line.startswith("REGRESSED cupy launch + sync:")


def test_only_a_slower_device_median_beyond_the_threshold_fails():
    base = (_run(0.8, 10.0, 9.8), _run(0.8, 10.0, 9.8))
    assert not regressions(judge(_run(0.8 * (1 + REPEATABILITY) * 0.999, 10.0, 9.8), *base))
    assert not regressions(judge(_run(0.4, 10.0, 9.8), *base))  # faster is fine
    (line,) = regressions(judge(_run(1.8, 10.0, 9.8), *base))
    assert "graph replay: controller" in line and "+125.0%" in line


def test_cli_records_a_baseline_then_fails_one_line_per_regressed_mode_with_table_and_png(tmp_path, capsys):
    """A real host run judged against its own baseline with the controller's times cut to a third there."""
    base = tmp_path / "base.json"
    args = ["--mode", "host ctypes", "--out", str(tmp_path / "out"), "--baseline", str(base)]
    assert bench_run.main([*args, "--record"]) == 0
    data = json.loads(base.read_text())
    faster = [{**s, "us": [u / 3 for u in s["us"]] if s["kernel"] == "controller" else s["us"]}
              for s in data["runs"][0]["samples"]]
    for run in data["runs"]:  # an identical pair (spread 0) whose controller was three times faster
        run["samples"] = faster
    base.write_text(json.dumps(data))
    (tmp_path / "out" / "bench.png").unlink()
    capsys.readouterr()
    assert bench_run.main(args) == 1
    out = capsys.readouterr()
    assert [ln for ln in out.out.splitlines() if ln.startswith("REGRESSED")] == [
        ln for ln in out.out.splitlines() if ln.startswith("REGRESSED host ctypes call:")]
    assert len([ln for ln in out.out.splitlines() if ln.startswith("REGRESSED")]) == 1
    assert "Traceback" not in out.out + out.err
    assert (tmp_path / "out" / "bench.png").is_file() and "REGRESSED" in (tmp_path / "out" / "bench.md").read_text()


def test_cli_unreadable_baseline_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert bench_run.main(["--mode", "host ctypes", "--out", str(tmp_path), "--baseline", str(bad)]) == 2
    assert "bench_run: error:" in capsys.readouterr().err


def test_more_runs_widen_the_spread_to_largest_over_smallest():
    runs = [_run(0.80, 10.0, 9.8), _run(0.81, 10.0, 9.8), _run(0.86, 10.0, 9.8)]
    (device,) = [c for c in thresholds(*runs) if c.metric == "median"]
    assert device.spread == pytest.approx(0.86 / 0.80 - 1)
    assert device.threshold == pytest.approx(SPREAD_FACTOR * device.spread)
    assert device.base == pytest.approx((0.80 + 0.81 + 0.86) / 3)


def test_a_judging_run_leaves_the_committed_table_alone(capsys):
    """Without --out, a run writes reports/bench/last-run, never the committed reports/bench."""
    from repro.core.paths import ROOT

    committed = {p: p.read_bytes() for p in (ROOT / "reports" / "bench").glob("*") if p.is_file()}
    assert bench_run.main(["--mode", "host ctypes"]) in (0, 1)  # judged only where this machine has a baseline
    assert "table and figure in reports/bench/last-run" in capsys.readouterr().out
    assert (ROOT / "reports" / "bench" / "last-run" / "bench.md").is_file()
    assert {p: p.read_bytes() for p in committed} == committed
