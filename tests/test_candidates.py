"""The candidate catalogue (tests/candidates/*.cu) through the gate CLI, as a controller author runs it.

Each file's header says what the gate must answer: ``// expect-exit: N``, the
failing row (``// expect-row: KEY``), a text the output must contain
(``// expect-text: …``), extra gate arguments (``// gate-args: …``) and tools
it needs (``// needs: nvrtc``; ``sandbox``: it fails where the sandbox of
repro/runners/confine.py stops its host code, which only the host backend runs); tests/catalogue.py reads it. Refactors (exit 0)
are also compared bit for bit with the fixed kernel on each backend: on cupy
that is the NVRTC build against the host build of the same file.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from analysis.present import render
from repro.backends import ptx
from repro.core.contract import ROOT
from repro.core.f32 import bits
from repro.core.kernel_source import load_kernel
from repro.runners import confine
from repro.runners.runner import run_scenarios
from repro.runners.scenarios import catalogue
from tests import commands
from tests.catalogue import CANDIDATES, SYMBOL, header

REFACTORS = [p for p in CANDIDATES if header(p).get("expect-exit") == "0" and "gate-args" not in header(p)]
# Through the CLI: every candidate that must fail or needs a flag, and one refactor (the others are
# checked in process below, bit for bit and through NVRTC, which is what the CLI would add).
THROUGH_CLI = [p for p in CANDIDATES if p not in REFACTORS] + REFACTORS[:1]


# Through the CLI, 2-6 s each: the slow job (CI). How long the gate takes is a timing, not a verdict: no test
# asserts one (`python -m analysis timings` measures the gate: docs/performance.md). The fast run keeps the
# gate's pieces in process: a hang ended at a fixed limit and a crash while loading (test_execution), a
# crash before each row and a double-precision band (test_evidence); the CLI's table and exit codes (test_gate_cli).
@pytest.mark.slow
@pytest.mark.parametrize("path", THROUGH_CLI, ids=[p.stem for p in THROUGH_CLI])
def test_gate_answers_each_candidate(path, tmp_path):
    spec = header(path)
    if spec.get("needs") == "nvrtc" and ptx.nvrtc_unavailable():
        pytest.skip(ptx.nvrtc_unavailable())
    if spec.get("needs") == "sandbox" and confine.unavailable():
        pytest.skip(confine.unavailable())
    out_json = tmp_path / "verdict.json"
    # The hostile candidates write to $PWD; tox passes no PWD, and one unset writes inside the worker's own
    # scratch folder, which the sandbox allows: name a folder outside it, empty, that must stay so.
    (tmp_path / "started_from").mkdir()
    done = commands.run("gate", path.relative_to(ROOT), "--backend", "host", "--json", out_json,
                        *shlex.split(spec.get("gate-args", "")), env=commands.environment(tmp_path / "started_from"),
                        timeout=120)
    shown = done.stdout + done.stderr
    assert list((tmp_path / "started_from").iterdir()) == [], "a candidate wrote outside its sandbox"
    assert done.returncode == int(spec["expect-exit"]), shown
    assert "Traceback" not in shown
    if "expect-text" in spec:
        assert spec["expect-text"] in shown, shown
    if done.returncode == 2:
        assert len(done.stderr.strip().splitlines()) == 1
    if "expect-row" in spec:
        failed = [p["key"] for p in json.loads(out_json.read_text())["properties"] if not p["ok"]]
        assert spec["expect-row"] in failed, failed
    if done.returncode == 1:  # the verdict line counts violations apart from the rows that had no evidence
        rows = json.loads(out_json.read_text())["properties"]
        violated = [p["key"] for p in rows if not p["ok"] and "not_measured" not in p["detail"]]
        unmeasured = sum(not p["ok"] and "not_measured" in p["detail"] for p in rows)
        assert violated, "a verdict of 1 with no violated row"
        line = (f"FAIL: {len(violated)} of {len(rows)} properties violated ({', '.join(violated)})"
                + (f", {unmeasured} not measured" if unmeasured else "") + " in ")
        assert line in done.stdout, done.stdout
        if spec.get("expect-row") == "execution":  # a crash or hang: the rows it cut short are not violations
            assert [k for k in violated if k in ("nonfinite", "guards", "catalogue")] == [], violated


@pytest.mark.parametrize("path", REFACTORS, ids=[p.stem for p in REFACTORS])
def test_refactor_computes_the_fixed_kernels_bits(contract, host, backend, path):
    """Every catalogue scenario: the refactor on ``backend`` gives the fixed kernel's host bits, step by step.

    An approximate intrinsic is exact on the host and approximate on the GPU (the gate notes it): there the
    GPU's bits may differ by design: not compared there.
    """
    entry = contract.controller("fixed")
    source = load_kernel(path, SYMBOL)
    if backend.name != "host" and source.approximate_intrinsics():
        pytest.skip("an approximate intrinsic: the GPU's bits may differ by design (the gate prints the note)")
    scenarios = catalogue(entry)
    reference = run_scenarios(host.compile(load_kernel(entry.kernel, SYMBOL), contract.slots), scenarios)
    got = run_scenarios(backend.compile(source, contract.slots), scenarios)
    for ref, run in zip(reference, got, strict=True):
        assert np.array_equal(bits(run.lam), bits(ref.lam)), f"{path.name}: {run.scenario.name} differs"
        assert run.stray == []


@pytest.mark.parametrize("path", REFACTORS, ids=[p.stem for p in REFACTORS])
def test_refactor_is_cuda_for_nvrtc(contract, path):
    """NVRTC (no GPU needed) accepts each refactor, alone and inside the cupy backend's harness units."""
    from repro.backends.translation_unit import device_grid_unit, harness_unit

    if ptx.nvrtc_unavailable():
        pytest.skip(ptx.nvrtc_unavailable())
    src = load_kernel(path, SYMBOL)
    report = ptx.analyse(src)
    assert report.atomics == () and report.global_stores >= 1
    for unit in (harness_unit(src, contract.slots, for_device=True), device_grid_unit(src, contract.slots)):
        ptx.compile_ptx(unit, src.origin)


def test_uncovered_branch_is_listed_and_fails_only_when_required(contract, host):
    """Coverage is reported on every run; a line the scenarios never reach fails the gate only on request."""
    from analysis.cli.evaluate import evaluate
    from analysis.judge.verdict import judge
    from repro.runners import coverage

    if coverage.gcov_unavailable():
        pytest.skip(coverage.gcov_unavailable())
    path = Path(__file__).parent / "candidates" / "uncovered_branch.cu"
    unreached = next(n for n, line in enumerate(path.read_text().splitlines(), 1) if "lambda = 0.5f;" in line)
    source = load_kernel(path, SYMBOL)
    relaxed = evaluate(source, "fixed", host, contract)
    row = next(f for f in relaxed.findings if f.key == "coverage")
    assert relaxed.ok, [(f.key, render.measured(f)) for f in relaxed.failed]
    assert unreached in row.detail["uncovered_lines"]
    assert f"lines never run: {unreached}" in render.measured(row)
    # the same evidence judged on request (judgement is a pure function of it: nothing runs twice)
    strict = judge(relaxed.evidence, source, "fixed", contract, require_coverage=True)
    assert [f.key for f in strict.failed] == ["coverage"]


# ``needs: sandbox``: what fails is host code (the sandbox's escapes), which no GPU build compiles.
FAILING = [p for p in CANDIDATES if header(p).get("expect-exit") == "1" and header(p).get("needs") != "sandbox"]


@pytest.mark.gpu
@pytest.mark.parametrize("path", FAILING, ids=[p.stem for p in FAILING])
def test_failing_candidates_fail_alike_on_the_gpu(contract, path):
    """On the cupy backend the same rows fail: a device fault or a hung kernel ends its worker, not the gate.

    Limits derived from the reference kernel on the GPU, as the gate derives them (a ``--timeout`` in the
    header: at least 5 s there, since a GPU worker also compiles the thread probe's unit on first use).
    """
    from analysis.cli.evaluate import evaluate
    from repro.backends import get_backend

    spec = header(path)
    args = shlex.split(spec.get("gate-args", ""))
    timeout = max(5.0, float(args[args.index("--timeout") + 1])) if "--timeout" in args else None
    verdict = evaluate(load_kernel(path, SYMBOL), "fixed", get_backend("cupy"), contract, timeout=timeout,
                       require_coverage="--require-coverage" in args)
    assert spec["expect-row"] in {f.key for f in verdict.failed}, [(f.key, f.where) for f in verdict.failed]
    # and it reads as the gate prints it: the table, each row's message (a GPU fault leaves rows no host run does)
    assert spec["expect-row"] in render.verdict(verdict, "contracts.toml")
    for f in verdict.findings:
        assert render.message(f, "contracts.toml").startswith(f"{f.key}: {'PASS' if f.ok else 'FAIL'} — documented ")


@pytest.mark.slow  # two gate processes (2.5 s each)
@pytest.mark.parametrize("name, literal", [("oob_after", "isv[600]"), ("oob_before", "isv[-1]")])
def test_a_stray_write_is_annotated_at_its_line(name, literal):
    """GitHub annotations put the isolation failure on the line that writes outside the ISV."""

    path = Path(__file__).parent / "candidates" / f"{name}.cu"
    expected = next(n for n, line in enumerate(path.read_text().splitlines(), 1) if literal in line)
    done = subprocess.run([sys.executable, "-m", "analysis", "gate", str(path), "--backend", "host", "--format", "github"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    row = next(line for line in done.stdout.splitlines() if "title=gate%3A isolation" in line)
    assert f",line={expected}," in row, row
