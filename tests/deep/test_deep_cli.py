"""``python -m analysis study --deep``: bad input is one line and exit 2, before any run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from repro.core.paths import ROOT
from repro.runners import confine
from tests import commands
from tests.catalogue import forger

pytest.importorskip("torch", reason="the deep study needs PyTorch (pip install --group deep)")

from analysis.cli import study  # noqa: E402

CANDIDATES = ROOT / "tests" / "candidates"
MARKER = "gate_escape_marker.txt"  # what escape_write.cu writes into $PWD


@pytest.mark.parametrize("argv, says", [
    (["--deep", "--seeds", "1"], "--seeds must lie in 2..1000"),
    (["--deep", "--steps", "333"], "--steps must be a multiple of 250"),
    (["--deep", "--cells", "nowhere", "--reduced", "--backend", "host"], "unknown cell(s) nowhere"),
    (["--deep", "--kernel", "no/such.cu", "--backend", "host"], "kernel file not found"),
    (["--deep", "--prereg", "no/such.toml"], "cannot read the pre-registration"),
    (["--deep", "--cells", ","], "--cells needs at least one name"),
    (["--deep", "--json", "studies/preregistered_3.toml"], "studies/preregistered_3.toml"),
    (["--deep", "--traces", "x.csv"], ".npz"),
    (["--deep", "--kernel", "kernels/rl_q_distill_lambda_controller.cu", "--markdown", "x.md"], "with --kernel write --json"),
])
def test_bad_input_is_one_line_exit_2(argv, says, capsys):
    assert study.main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("study: error:") and says in lines[0], err
    assert out == ""


def test_help_lists_the_deep_options(capsys):
    assert study.main(["--deep", "--help"]) == 0
    assert "--kernel" in capsys.readouterr().out


def _study(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return commands.run("study", "--deep", "--backend", "host", *args, cwd=cwd, timeout=600)


def test_a_candidates_escape_ends_the_study_with_one_line_and_changes_nothing(tmp_path):
    """The candidate's host build runs in a confined child, as replay/toy/report --kernel run theirs."""
    if confine.unavailable():
        pytest.skip(confine.unavailable())
    run_in = tmp_path / "cwd"
    run_in.mkdir()
    done = _study(run_in, "--kernel", str(CANDIDATES / "escape_write.cu"), "--reduced", "--json", "out.json")
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("study: error:")]
    assert errors == [f"study: error: the candidate tried to open {run_in / MARKER} for writing: the run was ended "
                      "(nothing outside its scratch folder was changed; docs/DESIGN.md, sandbox)"], done.stderr
    assert [p for p in run_in.rglob("*")] == []


def test_the_fixed_kernel_as_a_candidate_runs_confined_and_its_json_lands(tmp_path):
    """Its outputs are written in the child's scratch folder and moved to the path given after an exit 0; it
    collapses in no more runs than itself, so the exit is 0."""
    if confine.unavailable():
        pytest.skip(confine.unavailable())
    fixed = ROOT / "kernels" / "rl_q_distill_lambda_controller.cu"
    done = _study(tmp_path, "--kernel", str(fixed), "--reduced", "--seeds", "2", "--json", "out.json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    arms = result["cells"]["primary"]["arms"]
    assert arms["candidate"]["per_seed"]["collapsed"] == arms["fixed"]["per_seed"]["collapsed"]
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


@pytest.mark.parametrize("payload, status, says", [
    ('{"$":"dict","items":[["loops",{"$":"dict","items":[]}],["not_run",[]]]}', 0,
     "the confined study's measurements name other loops than the study's: not read"),
    ("cposix\ngetpid\n)R.", 0, "the confined study's measurements are no plain data (not a JSON message"),
    ("", 1, "the confined run ended with exit status 1: no measurements read"),
])
def test_the_verdict_is_the_parents_not_the_childs_exit_status(tmp_path, payload, status, says):
    """A candidate's load-time code ends the confined child at once, with exit 0 (it used to be the study's exit
    0, no verdict line) or 1 (it used to be the study's exit 1), having written measurements of its own or none:
    the parent reads what the child wrote against its own plan, and judges only what it can read; else exit 2,
    one line, no verdict."""
    if confine.unavailable():
        pytest.skip(confine.unavailable())
    done = _study(tmp_path, "--kernel", str(forger(tmp_path, "measured.json", payload, status)), "--reduced",
                  "--seeds", "2")
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("study: error:")]
    assert len(errors) == 1 and says in errors[0], done.stderr
    assert "candidate vs fixed" not in done.stdout, done.stdout


def _planned():
    from repro.learning.deep import prereg as prereg3
    from repro.learning.deep import study as deep

    return deep, deep.plan(prereg3.load(prereg3.PREREGISTERED_3), reduced=True, candidate=True, cells=["primary"],
                           seeds=3)


def _measured(deep, planned, trace_of) -> dict:
    """What a child's loops would measure under ``planned``: float32 series with NaN payloads and odd bits."""
    import numpy as np

    rng = np.random.default_rng(0)
    loops = {}
    for key, (_, cfg, _) in planned.loops.items():
        rows, traced = len(planned.entries(key)), planned.trace_rows(key, trace_of)
        bits = lambda *shape: rng.integers(0, 2**32, size=shape, dtype=np.uint32).view(np.float32)
        loops[key] = {"series": {k: bits(cfg.steps // cfg.eval_every, rows) for k in deep.KEPT},
                      "trace_kl": None if traced is None else bits(cfg.steps, traced.size),
                      "trace_lambda": None if traced is None else bits(cfg.steps, traced.size), "seconds": 1.5}
    return {"loops": loops, "not_run": []}


def test_measurements_read_back_against_the_plan_bit_for_bit(tmp_path):
    deep, planned = _planned()
    trace_of = lambda arm, cell, i: i == 0
    raw = _measured(deep, planned, trace_of)
    path = tmp_path / deep.MEASURED
    deep.write_measured(path, raw)
    back = deep.read_measured(path, planned, trace_of)
    assert list(back["loops"]) == list(planned.loops) and back["not_run"] == [] and back["seeds"] == 3
    for key, loop in back["loops"].items():
        assert loop["entries"] == planned.entries(key) and len(loop["entries"]) == 2 * 3
        assert loop["cfg"] is planned.loops[key][1] and loop["seconds"] == 1.5
        assert loop["eval_steps"].tolist() == list(range(loop["cfg"].eval_every, loop["cfg"].steps + 1,
                                                          loop["cfg"].eval_every))
        assert loop["trace_rows"].tolist() == [k for k, e in enumerate(loop["entries"]) if e[3] == 0]
        for name, a in loop["series"].items():
            assert a.tobytes() == raw["loops"][key]["series"][name].tobytes()
        assert loop["trace_kl"].tobytes() == raw["loops"][key]["trace_kl"].tobytes()


def _mutations(raw: dict, key: str):
    """(name, a copy of ``raw`` changed one way its schema does not allow)."""
    import copy

    import numpy as np

    def changed(name, edit):
        out = copy.deepcopy(raw)
        edit(out, out["loops"][key])
        return name, out

    yield changed("a loop missing", lambda r, _loop: r["loops"].pop(key))
    yield changed("a loop not planned", lambda r, loop: r["loops"].__setitem__("Pong/64", loop))
    yield changed("run and not run", lambda r, _loop: r["not_run"].append(key))
    yield changed("a key more", lambda r, _loop: r.__setitem__("verdict", "pass"))
    yield changed("a series missing", lambda _r, loop: loop["series"].pop("lambda"))
    yield changed("a series more", lambda _r, loop: loop["series"].__setitem__("x", loop["series"]["kl"]))
    yield changed("float64", lambda _r, loop: loop["series"].__setitem__("kl", loop["series"]["kl"].astype(np.float64)))
    yield changed("a row less", lambda _r, loop: loop["series"].__setitem__("kl", loop["series"]["kl"][:, 1:]))
    yield changed("a trace not planned", lambda _r, loop: loop.__setitem__("trace_kl", loop["series"]["kl"]))
    yield changed("no time", lambda _r, loop: loop.__setitem__("seconds", float("nan")))
    yield changed("a tuple for a dict", lambda _r, loop: loop.__setitem__("series", tuple(loop["series"].items())))


def test_measurements_outside_the_schema_are_refused(tmp_path):
    """Each way of differing from the plan is one SuiteError (exit 2), so is a pickle, a link, an oversized file."""
    import pickle

    from repro.core.errors import SuiteError
    from repro.runners import plain

    deep, planned = _planned()
    raw = _measured(deep, planned, None)
    path = tmp_path / deep.MEASURED
    for name, bad in _mutations(raw, next(iter(planned.loops))):
        path.write_bytes(plain.dumps(bad))  # as the child would write it, but for the change
        with pytest.raises(SuiteError, match="the confined study's measurements"):
            deep.read_measured(path, planned)
            pytest.fail(name)
    path.write_bytes(pickle.dumps(raw))
    with pytest.raises(SuiteError, match="are no plain data .not a JSON message"):
        deep.read_measured(path, planned)
    deep.write_measured(tmp_path / "elsewhere.json", raw)
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(SuiteError, match="are no plain data"):
        deep.read_measured(path, planned)
    path.unlink()
    path.write_bytes(b" " * (8 << 20) + (tmp_path / "elsewhere.json").read_bytes())
    with pytest.raises(SuiteError, match="past the .* expected"):
        deep.read_measured(path, planned)
    path.unlink()
    with pytest.raises(SuiteError, match="are no plain data"):
        deep.read_measured(path, planned)


def test_the_headline_is_re_read_in_the_five_words_beside_the_pre_registered_ones(tmp_path):
    """The reduced study's primary cell: the pre-registered words, then the five-word re-read with the evidence it
    rests on (the original's median λ at its floor, evaluations after the warm-up), read from the run itself."""
    import numpy as np

    from repro.core.contract import CONTRACTS, load

    done = _study(tmp_path, "--reduced", "--cells", "primary", "--json", "out.json")
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("re-read in five words"))
    result = json.loads((tmp_path / "out.json").read_text())
    lam = result["cells"]["primary"]["arms"]["original"]["median_series"]["lambda"]
    steps, warmup = result["cells"]["primary"]["eval_steps"], result["cells"]["primary"]["warmup"]
    after = [x for x, s in zip(lam, steps, strict=True) if s > warmup]
    floor = float(np.float32(load(CONTRACTS).controller("original").value("floor")))  # the tracked contract's, as float32
    at_floor = sum(1 for x in after if x is not None and x <= floor)
    assert f"at {at_floor} of {len(after)} evaluations" in line
    assert ("precondition absent" in line) == (at_floor < 0.5 * len(after))
