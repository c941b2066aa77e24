"""The gate and replay as users drive them: exit codes, outputs in every outcome, JUnit, annotations,
root-cause rows, ``pytest --kernel``, and the CI recipe."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from analysis.cli import gate
from analysis.cli.evaluate import evaluate
from analysis.present import render
from repro.core.contract import ROOT
from repro.core.f32 import F32, same
from repro.core.kernel_source import load_kernel
from tests import commands
from tests.commands import cli, run

FIXED = ROOT / "kernels" / "rl_q_distill_lambda_controller.cu"
CONTRACT = "kernels/contracts.toml"


def variant(tmp_path: Path, name: str, old: str, new: str) -> Path:
    text = FIXED.read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1))
    return path


def contract_line(key: str, section: str = "fixed") -> int:
    current = None
    for n, line in enumerate((ROOT / CONTRACT).read_text().splitlines(), start=1):
        if line.startswith("["):
            current = line.strip("[] \n")
        elif current == section and line.split("=")[0].strip() == key:
            return n
    raise AssertionError(key)


@pytest.fixture(scope="module")
def floor_candidate(tmp_path_factory) -> Path:
    return variant(tmp_path_factory.mktemp("floor"), "floor.cu", "#define MIN_LAMBDA 0.05f", "#define MIN_LAMBDA 0.1f")


@pytest.fixture(scope="module")
def floor_gate(tmp_path_factory, floor_candidate):
    """The gate run once on the floor candidate with every output: (process, stdout by format, folder)."""
    folder = tmp_path_factory.mktemp("gate-out")
    done = cli("gate", floor_candidate, "--backend", "host", "--format", "text,junit", "--format", "github",
               "--junit", folder / "gate.xml", "--json", folder / "deep" / "verdict.json")
    text, rest = done.stdout.split("<?xml", 1)
    xml, github = rest.split("</testsuites>", 1)
    return done, {"text": text, "junit": "<?xml" + xml + "</testsuites>", "github": github}, folder


@pytest.mark.slow  # three gate processes (6 s); test_bad_input checks the exit codes in process
def test_exit_codes_and_json_for_all_three_outcomes(tmp_path, floor_gate):
    assert floor_gate[0].returncode == 1
    for args, code in (([], 0), ([tmp_path / "missing.cu"], 2)):
        out = tmp_path / f"v{code}" / "verdict.json"
        done = run("gate", *args, "--backend", "host", "--json", out)
        assert done.returncode == code, done.stderr
        assert "Traceback" not in done.stderr
    for out, code in ((tmp_path / "v0" / "verdict.json", 0), (floor_gate[2] / "deep" / "verdict.json", 1),
                      (tmp_path / "v2" / "verdict.json", 2)):
        data = json.loads(out.read_text())
        assert data["exit_code"] == code and data["ok"] is (code == 0)
        if code == 2:
            assert "kernel file not found" in data["error"] and len(done.stderr.strip().splitlines()) == 1
        else:
            assert data["properties"] and all("key" in p and "causes" in p for p in data["properties"])


@pytest.mark.parametrize("where", ["/proc/no/such/v.json", "{file}/v.json"])
def test_unwritable_json_path_is_refused_before_any_work(tmp_path, capsys, monkeypatch, where):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(gate, "evaluate", lambda *a, **k: pytest.fail("judged before the output path was checked"))
    assert gate.main(["--backend", "host", "--json", where.format(file=blocker)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("gate: error: --json") and len(out.err.strip().splitlines()) == 1


def test_usage_error_is_one_line(capsys):
    done = cli("gate", "--format", "yaml")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "gate: error: unknown --format yaml (choose from text, json, junit, github)"]
    for args in (["--no-such-flag"], ["--format", ",,"], ["a.cu", "b.cu"], ["--backend", "tpu"]):
        try:
            code = gate.main(args)
        except SystemExit as exited:  # argparse's own refusals
            code = exited.code
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1, (args, err)


@pytest.mark.parametrize("module,missing", [("gate", "numpy"), ("report", "pandas")])
def test_a_missing_dependency_is_one_line(module, missing):
    code = (f"import sys, runpy; sys.modules[{missing!r}] = None; sys.argv[1:] = [{module!r}]; "
            "runpy.run_module('analysis', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code, "x"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"missing dependency {missing!r}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_internal_error_is_one_line_and_debug_shows_the_traceback(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(gate, "evaluate", broken)
    assert gate.main(["--backend", "host"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "gate: error: internal error: RuntimeError: boom (run with --debug for the traceback)"
    assert gate.main(["--backend", "host", "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_text_says_what_the_candidate_behaves_as_above_the_table(floor_gate):
    assert floor_gate[0].returncode == 1
    lines = floor_gate[1]["text"].splitlines()
    floor_row = next(line for line in lines if line.startswith("floor"))
    assert floor_row.rstrip().endswith("FAIL")
    assert f"{CONTRACT}:" in floor_gate[1]["text"] and "first shows: " in floor_gate[1]["text"]
    behaves = next(i for i, ln in enumerate(lines) if ln.startswith("behaves as: "))
    assert behaves < next(i for i, ln in enumerate(lines) if ln.startswith("property"))
    assert "floor 0.1 (contract 0.05)" in lines[behaves] and "ramp ×1.2," in lines[behaves]


def test_junit_has_one_test_case_per_property(tmp_path, capsys, floor_gate):
    for root in (ET.parse(floor_gate[2] / "gate.xml").getroot(), ET.fromstring(floor_gate[1]["junit"].split("?>", 1)[1])):
        assert root.tag == "testsuites"
        (suite,) = root.findall("testsuite")
        cases = suite.findall("testcase")
        names = [c.get("name") for c in cases]
        assert len(names) == len(set(names)) == int(suite.get("tests"))
        failed = {c.get("name") for c in cases if c.find("failure") is not None}
        assert int(suite.get("failures")) == len(failed) and "floor" in failed and "ceiling" not in failed
        floor = next(c for c in cases if c.get("name") == "floor").find("failure")
        assert f"{CONTRACT}:{contract_line('floor')}" in floor.text and "Finding(" not in floor.text
    error = tmp_path / "error.xml"
    assert gate.main([str(tmp_path / "nope.cu"), "--junit", str(error)]) == 2
    assert ET.parse(error).getroot().find("testsuite/testcase/error") is not None


def test_github_annotations_point_at_the_constant_and_the_contract_line(floor_candidate, floor_gate):
    lines = floor_gate[1]["github"].strip().splitlines()
    source_line = next(n for n, t in enumerate(floor_candidate.read_text().splitlines(), 1) if "0.1f" in t)
    errors = [ln for ln in lines if ln.startswith("::error ")]
    assert errors and all(f"file={floor_candidate},line={source_line}," in ln for ln in errors)
    notices = {ln.split("::")[1] for ln in lines if ln.startswith("::notice ")}
    assert {n.split(",title")[0] for n in notices} == {f"notice file={CONTRACT},line={contract_line('floor')}"}


def _verdict(contract, host, old, new, label):
    fixed = contract.controller("fixed")
    source = load_kernel(FIXED, fixed.symbol).with_edit(old, new, label)
    return evaluate(source, "fixed", host, contract, static=False, coverage=False, isolate=False)  # none hangs


def test_a_raised_floor_is_blamed_on_the_floor_line_alone(contract, host):
    v = _verdict(contract, host, "#define MIN_LAMBDA 0.05f", "#define MIN_LAMBDA 0.1f", "floor")
    assert v.failed
    for f in v.failed:
        assert [(d.name, d.line) for d in f.causes] == [("floor", contract_line("floor"))], f.key
    # the rule it behaves as, bit for bit: the edited floor, the fixed kernel's ramp
    assert same(v.behaviour.floor, F32(0.1)) and v.behaviour.ramp_exact and same(v.behaviour.ramp, F32(1.2))
    assert "floor 0.1 (contract 0.05)" in render.behaves_as(v.behaves_as)


def test_a_slot_change_is_named_as_a_slot_change(contract, host):
    v = _verdict(contract, host, "#define RL_Q_DISTILL_KL_TARGET_INDEX 491", "#define RL_Q_DISTILL_KL_TARGET_INDEX 490",
                 "slot")
    assert v.behaviour.target_slot == 490 and same(v.behaviour.floor, F32(0.05))
    slot_line = next(n for n, t in enumerate((ROOT / CONTRACT).read_text().splitlines(), 1) if t.startswith("kl_target"))
    for f in v.failed:
        assert [(d.kind, d.measured, d.line) for d in f.causes] == [("slot", 490, slot_line)], f.key
        assert "reads the target from slot 490" in render.message(f, CONTRACT)
        assert "None" not in render.message(f, CONTRACT)


def test_a_kernel_ignoring_its_inputs_gets_no_slot_line_to_edit(contract, host):
    v = _verdict(contract, host, "if (kl_observed <= 0.0f", "lambda = 0.5f; isv[RL_Q_DISTILL_LAMBDA_INDEX] = lambda; return;\n"
                 "    if (kl_observed <= 0.0f", "constant")
    assert v.behaviour.kl_slot is None and v.behaviour.target_slot is None
    for f in v.failed:
        assert f.causes and all(d.line == 0 for d in f.causes), f.key
        assert "if intended" not in render.message(f, CONTRACT)


def test_nan_propagation_is_said_in_words(contract, host):
    v = _verdict(contract, host, "fminf(MAX_LAMBDA, lambda * LAMBDA_RAMP_RATE)",
                 "(lambda * LAMBDA_RAMP_RATE > MAX_LAMBDA ? MAX_LAMBDA : lambda * LAMBDA_RAMP_RATE)", "nan")
    row = next(f for f in v.failed if f.key == "nonfinite")
    assert any("propagates NaN through the ceiling clamp where fminf returns the other operand" in render.difference(d)
               for d in row.causes)


def test_an_inclusive_edge_is_found_with_its_comparison(contract, host):
    v = _verdict(contract, host, "kl_observed > upper", "kl_observed >= upper", "ge")
    assert v.behaviour.upper.inclusive and v.behaviour.upper.factor == 3.0 and not v.behaviour.lower.inclusive
    edge = next(d for d in v.differences if d.kind == "edge")
    assert "kl_observed >= upper" in v.source.text.splitlines()[edge.source_line - 1]


@pytest.mark.slow  # a pytest inside pytest (5 s each)
@pytest.mark.parametrize("form", ["absolute", "relative"])
def test_pytest_kernel_takes_any_path(tmp_path, floor_candidate, form):
    path = floor_candidate  # under the system's temporary folder, outside the repository
    # --kernel=PATH: pytest reads a bare path after an option its first parse does not know as a test path.
    shown = {"absolute": str(path), "relative": os.path.relpath(path, ROOT)}[form]
    junit = tmp_path / "pytest.xml"
    done = run("pytest", f"--kernel={shown}", "-p", "no:xdist", "-q", "-k", "documented and host", f"--junitxml={junit}",
               "tests/test_properties.py")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr
    assert "unrecognized arguments" not in done.stderr and "Finding(" not in done.stdout
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    floor = cases["test_documented_property_holds[host-floor]"].find("failure")
    assert floor is not None and f"{CONTRACT}:{contract_line('floor')} (floor)" in floor.get("message")
    assert cases["test_documented_property_holds[host-ceiling]"].find("failure") is None


def test_replay_replays_a_candidate_beside_the_controllers(tmp_path, floor_candidate):
    trace = tmp_path / "t.csv"
    trace.write_text("kl,kl_target\n" + "0.0001,0.02\n" * 400)
    done = cli("replay", trace, "--backend", "host", "--kernel", floor_candidate)
    assert done.returncode == 0, done.stderr
    lines = {ln.split()[0]: ln for ln in done.stdout.splitlines()}
    assert "→ 0.1 " in lines["candidate"] and "→ 0.05 " in lines["fixed"] and "original" in lines


@pytest.mark.parametrize("text,args,message", [
    ("kl\n0.1\nnan\n", ["--target", "0.02"], ":3: 'nan' is not finite"),
    ("kl,kl_target\n0.1,0.02\n0.1,inf\n", [], ":3: 'inf' is not finite"),
    ("0.1\n0.2\n", ["--target", "0.02"], "no header"),
    ("kl,kl_target\n0.1,0.02\n", ["--target", "0.02"], "use one of them"),
    ("kl\n0.1\n", ["--target", "0"], "positive finite"),
    ("kl\n0.1\n", ["--target", "-1"], "positive finite"),
    ("kl\n0.1\n", ["--target", "nan"], "positive finite"),
    ("kl\n0.1\n", ["--target", "0.02", "--csv", "/proc/no/out.csv"], "--csv /proc/no/out.csv"),
    ("kl\n0.1\n", ["--target", "0.02", "--plot", "{tmp}"], "it is a folder"),
    ("kl\n0.1\n", ["--target", "0.02", "--kernel", "/no/such.cu"], "kernel file not found"),
    ("kl\n0.1\n", ["--target", "0.02", "--controller", "none"], "needs --kernel"),
    ("kl\n0.1\n", ["--target", "x"], "invalid float value"),
    ("step,kl,KL\n1,0.1,0.2\n", ["--target", "0.02"], ":1: 2 columns named 'kl' (columns 2, 3); keep one"),
    ("kl,kl_target,kl_target\n0.1,0.02,0.03\n", [], "2 columns named 'kl_target' (columns 2, 3)"),
    ("kl;kl_target\n0,1;0,02\n", [], "the file looks ';'-separated: the trace format separates columns with commas"),
    ("kl\n0.1;0.02\n", ["--target", "0.02"], ":2: not a number: '0.1;0.02'; the file looks ';'-separated"),
    ("kl\n0.1\n0.2\n0.3\n", ["--target", "0.02", "--max-rows", "2"],
     "more than 2 rows, the replay's limit (a million rows hold about 60 MB, 500 MB with --csv); "
     "--max-rows N raises it"),
    ("kl\n0.1\n", ["--target", "0.02", "--max-rows", "0"], "--max-rows must be 1 to"),
])
def test_replay_refuses_bad_input_in_one_line(tmp_path, capsys, monkeypatch, text, args, message):
    from analysis.cli import replay

    def no_work(*a, **k):
        raise AssertionError("a kernel was compiled before the input was checked")

    monkeypatch.setattr(replay, "get_backend", no_work)
    path = tmp_path / "trace.csv"
    path.write_text(text)
    argv = [str(path), "--backend", "host", *[a.format(tmp=tmp_path) for a in args]]
    code = replay.main(argv)  # argparse's own refusals too: main answers under the one policy
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert message in out.err and len(out.err.strip().splitlines()) == 1, out.err
    if "nan" in text:
        monkeypatch.undo()
        assert replay.main([str(path), "--target", "0.02", "--backend", "host", "--allow-nonfinite"]) == 0


@pytest.mark.slow  # every gate command of the recipe in a process of its own (8 s)
def test_ci_recipe_parses_and_its_commands_pass():
    yaml = pytest.importorskip("yaml", reason="pyyaml (test group) is not installed")
    workflow = yaml.safe_load((ROOT / "docs" / "ci" / "github-workflow.yml").read_text())
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as True
    assert on["push"]["paths"] == ["kernels/**"]
    steps = workflow["jobs"]["gate"]["steps"]
    gates = [s["run"] for s in steps if "analysis.gate" in s.get("run", "")]
    assert gates and any(s.get("uses", "").startswith("actions/upload-artifact") for s in steps)
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    local = yaml.safe_load((ROOT / "docs" / "ci" / "pre-commit-config.yaml").read_text())
    entries = [h["entry"] for h in hooks] + [h["entry"] for r in local["repos"] for h in r["hooks"]]
    assert all(re.match(r"^kernels/", h["files"]) or h["files"] == "^kernels/" for h in hooks)
    for command in dict.fromkeys([*gates, *entries]):
        argv = shlex.split(command)
        assert argv[:3] == ["python", "-m", "analysis.gate"]
        argv = [a for a in argv[3:] if not a.startswith("gate-results/")]
        argv = [a for a in argv if a not in ("--junit", "--json")]
        done = run("gate", *argv)
        assert done.returncode == 0, (command, done.stderr)
    assert any(s.get("run", "").startswith("python -m analysis report") for s in steps)


@pytest.mark.slow  # a pytest inside pytest (1.4 s)
def test_pytest_kernel_that_cannot_be_judged_is_one_usage_error(tmp_path):
    done = run("pytest", f"--kernel={tmp_path / 'missing.cu'}", "-p", "no:xdist", "-q", "tests/test_properties.py")
    assert done.returncode == 4  # pytest's usage error
    assert f"ERROR: --kernel: kernel file not found: {tmp_path / 'missing.cu'}" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.parametrize("module", [pytest.param("gate", marks=pytest.mark.slow), "replay"])  # gate: 1.6 s; one policy
def test_a_reader_closing_stdout_early_gets_no_traceback(tmp_path, module):
    trace = tmp_path / "t.csv"
    trace.write_text("kl\n0.1\n")
    args = ["--backend", "host"] + ([str(trace), "--target", "0.02"] if module == "replay" else [])
    proc = subprocess.Popen([sys.executable, "-m", "analysis", module, *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # as `| head -0` would, before anything is printed
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 2 and err == ""


@pytest.mark.slow  # a real process and two gates' workers: 3-4 s
@pytest.mark.parametrize("tmpdir", ["short", "long"])
def test_a_gate_whose_workers_come_from_a_forkserver_ends_in_its_verdict_alone(tmp_path, tmpdir):
    """The cupy backend's way of starting workers (a forkserver), given to the host's entry in a real process: the
    gate ends with its verdict and exit 0, nothing on stderr (multiprocessing's own folder, the server's socket,
    is removed with the run's folder, not again by multiprocessing at exit: a traceback after the verdict) and
    nothing left in TMPDIR — a short one, and one too long for a socket's path (the socket then goes in /tmp:
    "AF_UNIX path too long" was exit 2)."""
    import shutil
    import tempfile

    from tests.commands import environment

    if tmpdir == "short":
        tmp_path = Path(tempfile.mkdtemp(prefix="rlqt-", dir="/tmp"))
    else:
        tmp_path = tmp_path / ("deep" * 8)
        tmp_path.mkdir()
    code = ("import runpy, sys\n"
            "from dataclasses import replace\n"
            "from repro import backends\n"
            "backends.REGISTRY['host'] = replace(backends.REGISTRY['host'], start_method='forkserver')\n"
            "sys.argv = ['analysis', 'gate', 'tests/candidates/device_helpers.cu', '--backend', 'host']\n"
            "runpy.run_module('analysis', run_name='__main__', alter_sys=True)\n")
    try:
        done = commands.python(code, env=environment(ROOT, TMPDIR=str(tmp_path)))
        left = list(tmp_path.iterdir())
    finally:
        if tmpdir == "short":
            shutil.rmtree(tmp_path)
    assert done.returncode == 0 and done.stdout.splitlines()[-1].startswith("PASS: all "), done.stdout + done.stderr
    assert done.stderr == ""
    assert left == []
