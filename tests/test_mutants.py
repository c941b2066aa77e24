"""A kernel with any single documented property broken fails the gate, with a row that says why."""

from __future__ import annotations

import pytest

from analysis.cli import gate
from analysis.cli.evaluate import evaluate
from tests.catalogue import MUTANTS, mutant


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_fails_the_gate(contract, backend, name):
    # In process: these mutants neither crash nor hang, and isolation is test_execution's and test_evidence's subject.
    verdict = evaluate(mutant(contract, name), "fixed", backend, contract, static=False, coverage=False, isolate=False)
    failed = {f.key: f for f in verdict.failed}
    expected = MUTANTS[name][1]
    assert expected <= set(failed), f"{name}: expected {expected} to fail, failed: {sorted(failed)}"
    for key in expected:
        assert failed[key].where, f"{name}: the {key} row does not say where it fails"


@pytest.mark.slow  # the gate on every in-repo kernel × contract (2.6 s); test_properties judges them
def test_gate_exit_codes_for_the_in_repo_kernels(contract, capsys):
    original = str(contract.controller("original").kernel)
    assert gate.main(["--backend", "host"]) == 0
    assert gate.main([original, "--backend", "host"]) == 1
    out = capsys.readouterr().out
    for row in ("floor", "steps_to_halve", "dead_zone"):
        assert any(line.startswith(row) and line.rstrip().endswith("FAIL") for line in out.splitlines()), row
    assert gate.main([original, "--contract", "original", "--backend", "host"]) == 0


def test_gate_json(tmp_path):
    import json

    out = tmp_path / "verdict.json"
    assert gate.main(["--backend", "host", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["ok"] is True and data["backend"] == "host"
    assert {p["key"] for p in data["properties"]} >= {"floor", "steps_to_halve", "dead_zone"}
