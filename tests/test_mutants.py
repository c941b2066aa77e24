"""A kernel with any single documented property broken fails the gate, with a row that says why."""

from __future__ import annotations

import pytest

from analysis.cli import gate
from analysis.cli.evaluate import evaluate

G = "isv[RL_Q_DISTILL_LAMBDA_INDEX] = lambda;"

# name -> (how the fixed kernel is broken, properties that must fail)
MUTANTS = {
    "floor_0.04": (dict(defines={"MIN_LAMBDA": 0.04}), {"floor"}),
    "no_floor_clamp": (dict(edit=("fmaxf(MIN_LAMBDA, lambda * LAMBDA_DECAY_RATE)", "lambda * LAMBDA_DECAY_RATE")),
                       {"floor"}),
    "ceiling_0.9": (dict(defines={"MAX_LAMBDA": 0.9}), {"ceiling"}),
    "tolerance_2.5": (dict(defines={"KL_TOLERANCE": 2.5}), {"dead_zone", "ramp_onset", "decay_onset"}),
    "decay_0.997": (dict(defines={"LAMBDA_DECAY_RATE": 0.997}), {"decay", "steps_to_halve"}),
    "ramp_1.25": (dict(defines={"LAMBDA_RAMP_RATE": 1.25}), {"ramp"}),
    "ramp_ge": (dict(edit=("kl_observed > upper", "kl_observed >= upper")), {"ramp_onset", "dead_zone"}),
    "decay_le": (dict(edit=("kl_observed < lower", "kl_observed <= lower")), {"decay_onset", "dead_zone"}),
    "writes_slot_487": (dict(edit=(G, G + "\n    isv[RL_Q_DISTILL_LAMBDA_INDEX + 1] = lambda;")), {"isolation"}),
    "writes_slot_0": (dict(edit=(G, G + "\n    isv[0] = kl_observed;")), {"isolation"}),
    "no_kl_guard": (dict(edit=("kl_observed <= 0.0f || ", "")), {"guards"}),
    "no_target_guard": (dict(edit=("kl_target <= 0.0f || ", "")), {"guards"}),
    "no_lambda_guard": (dict(edit=(" || lambda <= 0.0f", "")), {"guards"}),
    "reads_slot_489": (dict(defines={"RL_Q_DISTILL_KL_EMA_INDEX": 489}), {"spec_agreement", "floor"}),
    # decays ×0.99 (5× faster) where KL is between target/30 and target/3: no sustained-KL scenario sits there
    # (aligned KL is target/100), a warming EMA passes through it
    "fast_decay_near_band": (dict(edit=("lambda * LAMBDA_DECAY_RATE",
                                        "lambda * (kl_observed > lower * 0.1f ? 0.99f : LAMBDA_DECAY_RATE)")),
                             {"warm_up_loss", "spec_agreement"}),
    "nan_lambda_kept": (dict(edit=("fminf(MAX_LAMBDA, lambda * LAMBDA_RAMP_RATE)",
                                   "(lambda * LAMBDA_RAMP_RATE > MAX_LAMBDA ? MAX_LAMBDA : lambda * LAMBDA_RAMP_RATE)")),
                        {"nonfinite"}),
}


def mutant(contract, name):
    how, _ = MUTANTS[name]
    src = contract.source("fixed")
    if "defines" in how:
        return src.with_defines(**how["defines"])
    old, new = how["edit"]
    return src.with_edit(old, new, name)


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
