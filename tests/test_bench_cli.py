"""``python -m analysis bench``: pytest-benchmark runs recorded and judged, the table made from their JSON, bad input.

One real baseline (the host mode, 5 rounds, two pytest-benchmark runs) is recorded per module
and shared; every bad input is refused in-process, before a benchmark runs (no progress line).
"""

from __future__ import annotations

import json
import shutil
from argparse import Namespace

import pytest

from analysis.cli import bench as bench_run
from analysis.judge.bench_verdict import REFERENCE, baseline_runs, committed, difference, load_run, run_to_run
from analysis.present import bench_report
from repro import bench
from repro.core.paths import ROOT
from tests.commands import cli

HOST = ["--mode", "host ctypes", "--rounds", "5"]


def _cli(*args: str):
    """The command as a user runs it, in this process (pytest-benchmark's run is in-process there too)."""
    return cli("bench", *args)


#: The tests on a recorded baseline run pytest-benchmark itself three times in process (5 s on 2 cores): they
#: run in the slow job; the bad-input checks, which stop before any benchmark, in the fast one.
on_a_recording = pytest.mark.slow


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    done = _cli(*HOST, "--record", "--out", str(folder / "table"), "--baseline", str(folder / "base"))
    assert done.returncode == 0, done.stderr[-2000:]
    return folder, done


@on_a_recording
def test_record_saves_two_pytest_benchmark_runs_timed_by_the_modes_clock_without_pytests_chatter(recorded):
    folder, done = recorded
    paths = baseline_runs(folder / "base")
    assert [p.name for p in paths] == ["run-1.json", "run-2.json"]
    data = json.loads(paths[0].read_text())
    names = {b["name"] for b in data["benchmarks"]}
    assert names == {"test_mode[host-ctypes-call-controller]", "test_mode[host-ctypes-call-empty]"}
    first = data["benchmarks"][0]
    assert first["options"]["timer"] == "perf_counter"  # pytest-benchmark timed the rounds with the mode's clock (its bare name)
    assert first["extra_info"]["clock"] == "wall clock (Python)" and first["stats"]["rounds"] == 5
    assert first["stats"]["iterations"] > 1 and first["extra_info"]["steps_per_call"] == 1  # many calls a round, a step each
    assert data["machine_info"]["rlq_machine"] == bench.machine_tag()
    assert "bench: run 1 of 2" in done.stderr and "bench: saved the baseline" in done.stdout
    # pytest's own report stays out of the terminal without --verbose
    assert "test session starts" not in done.stdout + done.stderr and "Wrote benchmark data" not in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


@on_a_recording
def test_table_reports_the_stats_pytest_benchmark_stored(recorded):
    folder, _ = recorded
    first, second = (load_run(p) for p in baseline_runs(folder / "base"))
    stats = {b["extra_info"]["kernel"]: b["stats"] for b in json.loads(first.path.read_text())["benchmarks"]}
    text = bench_report.table(first.df, run_to_run(first.df, second.df))
    row = next(line for line in text.splitlines() if line.startswith("| host ctypes call |"))
    assert f"{stats['controller']['median'] / stats['empty']['median']:.2f}×" in row
    moved = second.df.set_index("kernel").median_us["controller"] / first.df.set_index("kernel").median_us["controller"]
    assert f"{moved - 1:+.1%}" in row  # the run-to-run column
    table = (folder / "table" / "bench.md").read_text()
    assert "## Modes" in table and "(pytest-benchmark JSON)" in table
    assert (folder / "table" / "bench.png").read_bytes()[:4] == b"\x89PNG"


@on_a_recording
def test_a_judging_run_fails_one_line_per_regressed_mode(recorded, tmp_path):
    """The recorded pair with the controller's stats cut to a tenth: the host run now regresses (exit 1).

    A tenth and 21 rounds: a loaded machine (the GPU suite's 16 workers) moved a 5-round median 5×.
    """
    folder, _ = recorded
    base = tmp_path / "base"
    shutil.copytree(folder / "base", base)
    for path in baseline_runs(base):
        data = json.loads(path.read_text())
        for b in data["benchmarks"]:
            if b["extra_info"]["kernel"] == "controller":
                b["stats"] = {k: v / 10 if k in ("min", "max", "mean", "median", "q1", "q3") else v
                              for k, v in b["stats"].items()}
        path.write_text(json.dumps(data))
    shutil.copy(baseline_runs(base)[0], baseline_runs(base)[1])  # an identical pair: spread 0, threshold 5 %
    done = _cli("--mode", "host ctypes", "--rounds", "21", "--out", str(tmp_path / "out"), "--baseline", str(base))
    assert done.returncode == 1, done.stderr[-2000:]
    regressed = [ln for ln in done.stdout.splitlines() if ln.startswith("REGRESSED")]
    assert len(regressed) == 1 and regressed[0].startswith("REGRESSED host ctypes call:")
    assert (tmp_path / "out" / "run.json").is_file() and "REGRESSED" in (tmp_path / "out" / "bench.md").read_text()


def _refused(argv: list[str], capsys) -> str:
    assert bench_run.main(argv) == 2  # the one policy: argparse's refusals are exit codes too
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "bench: run" not in err, err
    return err


@pytest.mark.parametrize(("argv", "says"), [
    (["--slow-ns", "99999999999999"], f"--slow-ns must be 0 to {bench.SLOW_NS_MAX} ns"),
    (["--slow-ns", "-5"], "--slow-ns must be 0"),
    (["--add"], "--add adds a recorded pair to a baseline: it needs --record"),
    (["--mode", ""], "--mode needs a piece of a mode's name"),
    (["--mode", "  "], "--mode needs a piece of a mode's name"),
    (["--mode", "no such mode"], "no mode matches"),
    (["--rounds", "0"], "--rounds: must be a whole number of rounds from 1 to"),
    (["--rounds", "1e9"], "--rounds: must be a whole number of rounds from 1 to"),
    (["--record", "--slow-ns", "1000"], "would make a slowed controller the baseline"),
])
def test_bad_values_are_refused_before_any_benchmark(argv, says, capsys):
    assert says in _refused(argv, capsys)


def test_a_garbage_baseline_is_refused_before_the_benchmark_runs(tmp_path, capsys):
    (tmp_path / "garbage.csv").write_text("a,b\n1,2\n")
    assert "not a folder" in _refused(["--baseline", str(tmp_path / "garbage.csv")], capsys)
    bad = tmp_path / "bad"
    bad.mkdir()
    for i in (1, 2):
        (bad / f"run-{i}.json").write_text("{}")
    assert "not a pytest-benchmark JSON" in _refused(["--baseline", str(bad)], capsys)
    assert "no such folder" in _refused(["--baseline", str(tmp_path / "none")], capsys)
    (tmp_path / "empty").mkdir()
    assert "at least two runs" in _refused(["--baseline", str(tmp_path / "empty")], capsys)


@on_a_recording
def test_another_machines_baseline_is_refused_for_judging_and_adding(recorded, tmp_path, capsys):
    folder, _ = recorded
    other = tmp_path / "other"
    shutil.copytree(folder / "base", other)
    for path in baseline_runs(other):
        data = json.loads(path.read_text())
        data["machine_info"]["rlq_machine"] = "NVIDIA_H200" if bench.machine_tag() != "NVIDIA_H200" else "X"
        path.write_text(json.dumps(data))
    for argv in (["--baseline", str(other)], ["--record", "--add", "--baseline", str(other), "--out", str(tmp_path)]):
        assert "this machine is" in _refused(argv, capsys)


def test_record_rewrites_the_committed_table_only_on_the_reference_machine(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(bench, "machine_tag", lambda gpu=None: "Some_CPU")
    committed = {p: p.read_bytes() for p in (ROOT / "reports" / "bench").rglob("*") if p.is_file()}
    err = _refused(["--record", *HOST, "--baseline", str(tmp_path / "b")], capsys)
    assert "the committed table reports/bench/bench.md is the NVIDIA_H200's; give --out DIR" in err
    assert {p: p.read_bytes() for p in committed} == committed
    args = Namespace(slow_ns=0, add=False, record=False, mode=[], baseline=None, out=None, rounds=None)
    bench_run.check(args)  # a judging run writes the git-ignored last-run folder
    assert args.out == ROOT / "reports" / "bench" / "last-run"


@on_a_recording
def test_the_controller_empty_difference_and_its_interval_come_from_pytest_benchmarks_stats(recorded):
    folder, _ = recorded
    run = load_run(baseline_runs(folder / "base")[0])
    mean, half = difference(run.df, "host ctypes call")
    rows = run.df.set_index("kernel")
    assert mean == pytest.approx(rows.mean_us["controller"] - rows.mean_us["empty"]) and half > 0


def test_the_committed_h200_baseline_gates_the_headline_modes_within_5_percent():
    """reports/bench/baselines/NVIDIA_H200: back-to-back runs of a fresh H200 (``bench --record``; ``--add`` on
    another H200 adds its runs); graph replay reproduces within the 5 % goal across them, so it is gated."""
    df, repeat, machine, paths, checks = committed(ROOT / "reports" / "bench")
    assert machine["rlq_machine"] == REFERENCE and len(baseline_runs(paths[0].parent)) >= 2
    by_mode = {c.mode: c for c in checks}
    mode = "graph replay: controller"
    assert by_mode[mode].gated and by_mode[mode].metric == "median" and by_mode[mode].spread <= 0.05, by_mode[mode]
    text = (ROOT / "reports" / "bench" / "bench.md").read_text()
    assert all(f"`{p.relative_to(ROOT).as_posix()}`" in text for p in paths)  # the table is made from these runs


@pytest.mark.parametrize("wrong_bits", [False, True])
def test_a_mode_that_raised_stops_in_one_line_with_exit_2_and_saves_nothing(tmp_path, capsys, monkeypatch, wrong_bits):
    """pytest fails a benchmark test for wrong bits (a violated property: exit 1) and for a mode that raised (the
    run broke: exit 2, nothing written); a raise leaves its mode's row out of the JSON, also where another mode
    timed wrong bits in the same run (which must not let a --record save a baseline without that row)."""
    data = json.loads(sorted((ROOT / "reports" / "bench" / "baselines" / REFERENCE).glob("run-*.json"))[0].read_text())
    data["benchmarks"] = [b for b in data["benchmarks"] if b["name"] != "test_mode[host-ctypes-call-empty]"]  # raised
    if wrong_bits:
        data["benchmarks"][0]["extra_info"]["matches_spec"] = False

    def pytest_run(modes, args, path):
        path.write_text(json.dumps(data))
        return bench_run.PYTEST_FAILED

    monkeypatch.setattr(bench_run, "pytest_run", pytest_run)
    out, base = tmp_path / "out", tmp_path / "base"
    assert bench_run.main([*HOST, "--out", str(out), *(["--record", "--baseline", str(base)] if wrong_bits else [])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("bench: error: a benchmark mode raised, so its row is missing and nothing was saved "
                       "(pytest's output above)")
    assert not (out / "run.json").exists() and not list(base.glob("run-*.json"))


def test_a_judging_run_never_writes_into_the_baseline_it_reads(tmp_path, capsys, monkeypatch):
    """Without --record the baseline's runs are inputs: --out naming their folder is refused before any work."""
    base = tmp_path / "base"
    shutil.copytree(ROOT / "reports" / "bench" / "baselines" / REFERENCE, base)
    monkeypatch.setattr(bench, "machine_tag", lambda gpu=None: REFERENCE)  # this machine as the baseline's
    says = _refused([*HOST, "--baseline", str(base), "--out", str(base)], capsys)
    assert "holds this run's baseline" in says


def _rows_of_a_committed_run(modes, scale_controller: float = 1.0) -> dict:
    """A committed H200 run's rows of ``modes`` (pytest-benchmark's JSON), the controller's times × ``scale_controller``."""
    data = json.loads(sorted((ROOT / "reports" / "bench" / "baselines" / REFERENCE).glob("run-*.json"))[0].read_text())
    data["benchmarks"] = [b for b in data["benchmarks"] if b["extra_info"]["mode"] in modes]
    for b in data["benchmarks"]:
        if b["extra_info"]["kernel"] == "controller":
            b["stats"] = {k: v * scale_controller if k in ("min", "max", "mean", "stddev", "median", "q1", "q3", "iqr")
                          else v for k, v in b["stats"].items()}
    return data


def _judged_here(data, tmp_path, monkeypatch, argv):
    """``bench`` on a machine never seen before (no baseline), with ``data`` as pytest-benchmark's run."""
    monkeypatch.setattr(bench, "machine_tag", lambda gpu=None: "Some_GPU")
    monkeypatch.setattr(bench, "unavailable", lambda mode, rig: None)

    def pytest_run(modes, args, path):
        path.write_text(json.dumps(data))
        return 0

    monkeypatch.setattr(bench_run, "pytest_run", pytest_run)
    return bench_run.main([*argv, "--out", str(tmp_path)])


DEVICE_MODES = ("graph replay: controller", "looped harness, one scenario")


@pytest.mark.parametrize("scale, code, says", [(1.0, 0, "2 modes gated by their controller/empty ratio"),
                                               (2.0, 1, "REGRESSED graph replay: controller")])
def test_a_machine_without_a_baseline_is_gated_by_its_device_timed_ratios(tmp_path, capsys, monkeypatch, scale,
                                                                          code, says):
    """No baseline for this machine: each device-timed mode's controller/empty ratio is gated against the committed
    baselines' (a machine never seen before still fails a controller whose cost doubled); the last line says why no
    per-step figure is gated and where the committed table is."""
    data = _rows_of_a_committed_run(DEVICE_MODES, scale)
    code_now = _judged_here(data, tmp_path, monkeypatch, ["--mode", "graph replay", "--mode", "one scenario"])
    out = capsys.readouterr().out
    assert code_now == code and says in out
    last = out.strip().splitlines()[-1]
    assert "no baseline for this machine: reports/bench/baselines/Some_GPU" in last and "reports/bench/bench.md" in last


def test_a_run_that_gated_nothing_says_0_modes_gated_and_why(tmp_path, capsys, monkeypatch):
    """A host-timed mode on a machine without a baseline: its ratio moves with the host, so nothing is gated; the
    last line says "0 modes gated", why, and where the committed table is; never that nothing regressed."""
    data = _rows_of_a_committed_run(("host ctypes call",), 2.0)
    assert _judged_here(data, tmp_path, monkeypatch, HOST) == 0
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    assert last.startswith("bench: 0 modes gated (no baseline for this machine: reports/bench/baselines/Some_GPU")
    assert "reports/bench/bench.md" in last and "regressed" not in out and "within bounds" not in out
    assert "0 modes gated" in (tmp_path / "bench.md").read_text()


@pytest.mark.gpu
def test_on_the_gpu_a_controller_slowed_to_twice_its_cost_fails_without_a_baseline(tmp_path, monkeypatch, gpu_alone):
    """On a GPU, timed for real as a machine never seen before: the looped harness's controller slowed by a spin as
    long as its own step (its cost doubled) fails by its controller/empty ratio (exit 1). It holds the device alone
    (``gpu_alone``): other workers' kernels time-slicing the GPU move the unslowed ratio past its bound."""
    pytest.importorskip("cupy", reason="the device modes need CuPy")
    monkeypatch.setattr(bench, "machine_tag", lambda gpu=None: "Some_GPU")
    first = _cli("--mode", "one scenario", "--out", str(tmp_path / "a"))
    assert first.returncode == 0, first.stdout + first.stderr
    df = load_run(tmp_path / "a" / "run.json").df.set_index("kernel")
    step_ns = int(df.loc["controller", "median_us"] * 1000) + 1
    slowed = _cli("--mode", "one scenario", "--out", str(tmp_path / "b"), "--slow-ns", str(step_ns))
    assert slowed.returncode == 1 and "REGRESSED looped harness, one scenario" in slowed.stdout, slowed.stdout
