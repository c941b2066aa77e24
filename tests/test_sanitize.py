"""compute-sanitizer in the gate: clean kernels give no report; a write past a lone ISV's end is found, at its line."""

from __future__ import annotations

import pytest

from analysis.cli import gate
from repro.runners.sanitize import PATHS, parse, sanitize_all, sanitizer_unavailable


def test_parse_reads_kind_kernel_and_line_of_each_report():
    # compute-sanitizer's report layout (one error, then the summary), written by hand
    text = "\n".join([
        "========= COMPUTE-SANITIZER",
        "========= Invalid __global__ write of size 4 bytes",
        "=========     at rlq_looped+0x1f0 in kernels/k.cu [oob]:57",
        "=========     by thread (3,0,0) in block (0,0,0)",
        "=========     Address 0x7f0000000800 is out of bounds",
        "=========     Saved host backtrace up to driver entry point at kernel launch time",
        "=========         Host Frame: cuLaunchKernel [0x1234] in libcuda.so.1",
        "=========",
        "========= ERROR SUMMARY: 1 error",
    ])
    (r,) = parse(text, "memcheck", "looped")
    assert (r.kind, r.kernel, r.file, r.line) == ("Invalid __global__ write of size 4 bytes", "rlq_looped",
                                                  "kernels/k.cu [oob]", 57)
    assert "thread (3,0,0)" in r.detail and r.location == "kernels/k.cu [oob]:57"
    assert parse("========= ERROR SUMMARY: 0 errors\n", "memcheck", "looped") == []


@pytest.fixture(scope="module")
def sanitizer():
    why = sanitizer_unavailable()
    if why:
        pytest.skip(why)


def _oob(contract):
    """The fixed kernel plus one write just past the end of its ISV (slot isv_len)."""
    src = contract.source("fixed")
    stmt = "isv[RL_Q_DISTILL_LAMBDA_INDEX] = lambda;"
    bad = f"{stmt}\n    isv[{contract.slots.isv_len}] = lambda;"
    cand = src.with_edit(stmt, bad, "oob write")
    line = cand.text.splitlines().index(f"    isv[{contract.slots.isv_len}] = lambda;") + 1
    return cand, line


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["fixed", "original"])
def test_in_repo_kernels_are_clean_on_every_launch_path(sanitizer, contract, name):
    assert sanitize_all(contract.source(name), contract.slots) == ([], [])


@pytest.mark.gpu
def test_write_past_a_lone_isv_is_reported_at_its_line_on_every_path(sanitizer, contract):
    cand, line = _oob(contract)
    reports, hung = sanitize_all(cand, contract.slots, tools=("memcheck",))
    assert hung == []
    for path in PATHS:
        mine = [r for r in reports if r.path == path]
        assert mine, f"memcheck found nothing on the {path} path"
        assert all("write" in r.kind and r.line == line for r in mine), mine


@pytest.mark.gpu
def test_gate_sanitize_shows_the_failing_row(sanitizer, contract, tmp_path, capsys):
    cand, line = _oob(contract)
    path = tmp_path / "oob.cu"
    path.write_text(cand.text)
    assert gate.main([str(path), "--backend", "cupy", "--sanitize"]) == 1
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith("memcheck") and "FAIL" in ln]
    assert rows and f"oob.cu:{line}" in out
