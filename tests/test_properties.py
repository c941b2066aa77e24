"""Every documented property, measured on each controller (or a --kernel candidate) × backend."""

from __future__ import annotations

import pytest

from analysis.cli.evaluate import evaluate
from analysis.present import render

_findings: dict = {}


@pytest.fixture(scope="session")
def findings(contract, backend, subject, subject_contract, subject_source):
    key = (subject, backend.name)
    if key not in _findings:
        verdict = evaluate(subject_source, subject_contract, backend, contract)  # with the diagnosis's hints
        _findings[key] = {f.key: f for f in verdict.findings}
    return _findings[key]


def test_documented_property_holds(findings, prop):
    """``prop`` runs over the properties the subject's contract documents (see conftest.py)."""
    f = findings[prop]
    if not f.ok:  # the gate's row, with its hint (pytest's introspection would print the Finding's repr)
        pytest.fail(render.message(f, "kernels/contracts.toml"), pytrace=False)


def test_original_fails_the_fixed_contract(contract, backend):
    """The reconstructed original must fail the fix's contract where the fix changed it."""

    # behavioural rows only: in process, without coverage and PTX (the in-repo kernels neither crash nor hang)
    verdict = evaluate(contract.source("original"), "fixed", backend, contract, static=False, coverage=False,
                       isolate=False)
    failed = {f.key for f in verdict.failed}
    assert {"floor", "steps_to_halve", "dead_zone", "ramp_onset", "decay_onset"} <= failed
    assert {"ceiling", "ramp", "steps_to_double", "guards", "isolation"}.isdisjoint(failed)


def test_fixed_fails_the_original_contract(contract, backend):

    verdict = evaluate(contract.source("fixed"), "original", backend, contract, static=False, coverage=False,
                       isolate=False)
    failed = {f.key for f in verdict.failed}
    assert {"floor", "decay", "steps_to_halve", "steps_to_floor", "ramp_onset", "decay_onset"} <= failed
    # the fix's wider band contains the original's, so λ still holds throughout the narrower one
    assert "dead_zone" not in failed
