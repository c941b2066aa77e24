"""Bad input to the kernels' tools: one clear line, exit code 2 from the CLIs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from analysis.cli import gate
from repro.core.contract import Slots, load
from repro.core.errors import SuiteError
from repro.core.kernel_source import load_kernel
from repro.core.paths import ROOT


def run_gate(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analysis", "gate", *args], cwd=ROOT, capture_output=True, text=True)


def test_missing_file_exits_2_with_one_line():
    done = run_gate("no/such/kernel.cu", "--backend", "host")
    assert done.returncode == 2
    assert done.stderr.strip() == "gate: error: kernel file not found: no/such/kernel.cu"


def test_compile_error_shows_the_compilers_message(tmp_path, capsys):
    bad = tmp_path / "broken.cu"
    bad.write_text('extern "C" __global__ void rl_q_distill_lambda_controller(float* isv) {\n  isv[0] = nope;\n}\n')
    assert gate.main([str(bad), "--backend", "host"]) == 2
    err = capsys.readouterr().err
    assert "does not compile" in err and "broken.cu:2" in err and "nope" in err
    assert len(err.strip().splitlines()) == 1


def test_missing_symbol_is_named(tmp_path, capsys):
    other = tmp_path / "other.cu"
    other.write_text('extern "C" __global__ void something_else(float* isv) {}\n')
    assert gate.main([str(other), "--backend", "host"]) == 2
    assert "no kernel named 'rl_q_distill_lambda_controller' (found: something_else)" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--contract", "nope"], ["--backend", "tpu"]])
def test_usage_errors_exit_2(args):
    assert run_gate(*args).returncode == 2


def test_unavailable_backend_is_a_clear_error(monkeypatch, capsys):
    from repro.core.errors import BackendUnavailable

    def unavailable(name="auto"):
        raise BackendUnavailable("cupy backend: no CUDA device")

    monkeypatch.setattr(gate, "get_backend", unavailable)
    assert gate.main(["--backend", "cupy"]) == 2
    assert capsys.readouterr().err.strip() == "gate: error: cupy backend: no CUDA device"


def test_unknown_define_is_rejected(contract):
    with pytest.raises(SuiteError, match="no #define named MIN_LAMDA"):
        contract.source("fixed").with_defines(MIN_LAMDA=0.1)


def test_define_override_is_visible_in_behaviour(contract, host):
    """The variant mechanism changes the compiled kernel: a floor of 0.2 is where λ settles."""
    from repro.runners.runner import run_scenarios
    from repro.runners.scenarios import catalogue

    variant = contract.source("fixed").with_defines(MIN_LAMBDA=0.2)
    aligned = next(s for s in catalogue(contract.controller("fixed")) if s.name == "decay_from_ceiling")
    lam = run_scenarios(host.compile(variant, contract.slots), [aligned])[0].lam
    assert lam[-1] == np.float32(0.2) and lam.min() == np.float32(0.2)


def test_isv_too_small_for_the_slots():
    with pytest.raises(SuiteError, match="too small for slot 491"):
        Slots(486, 488, 491, 491, 0)


def test_malformed_contract(tmp_path):
    bad = tmp_path / "contracts.toml"
    bad.write_text("[slots]\nlambda = 486\n")
    with pytest.raises(SuiteError, match="missing key"):
        load(bad)
    bad.write_text("[slots\n")
    with pytest.raises(SuiteError, match="not valid TOML"):
        load(bad)


def test_unreadable_kernel_file(tmp_path):
    binary = tmp_path / "k.cu"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SuiteError, match="cannot read kernel file"):
        load_kernel(binary, "x")


@pytest.mark.parametrize("module, args", [
    ("gate", ["--backend", "nosuch"]),
    ("report", ["--backend", "nosuch"]),
    ("bench", ["--slow-ns", "abc"]),
    ("bench", ["--slow-ns", "-5"]),
    ("bench", ["--out", "/proc/no/such/dir"]),
    ("replay", []),
    ("toy", []),
    ("toy", ["--controller", "fixed", "--seed", "-1"]),
    ("toy", ["--controller", "fixed", "--steps", "abc"]),
    ("study", ["--backend", "nosuch"]),
    ("study", ["--env", ""]),
])
def test_every_command_line_refuses_bad_input_in_one_line(module, args):
    """Usage errors as a stranger makes them: exit 2, one line on stderr, no traceback, no work done."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "analysis", module, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in done.stderr, done.stderr
