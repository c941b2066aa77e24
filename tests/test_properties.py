"""Every documented property, measured on each controller (or a --kernel candidate) × backend."""

from __future__ import annotations

import pytest

from analysis.cli.evaluate import evaluate
from analysis.present import render
from repro.runners.scenarios import catalogue


@pytest.fixture(scope="session")
def judged() -> dict:
    """(subject, backend) → its findings by key, for the whole session: unparametrised, so it outlives the
    parametrised ``findings`` (which pytest sets up again each time its subject or backend changes)."""
    return {}


@pytest.fixture(scope="session")
def findings(contract, backend, subject, subject_contract, subject_source, judged):
    key = (subject, backend.name)
    if key not in judged:
        verdict = evaluate(subject_source, subject_contract, backend, contract)  # with the diagnosis's hints
        judged[key] = {f.key: f for f in verdict.findings}
    return judged[key]


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


def made_up_contract(contract, folder):
    """The contract with one more controller entry, ``[made_up]``: the fixed entry's lines under a new name (its
    kernel by absolute path), and nothing else changed; the path of the file written in ``folder``."""
    text = contract.path.read_text()
    start = text.index("\n[fixed]\n") + 1
    end = text.index("\n# ----", start)
    entry = text[start:end].replace("[fixed]", "[made_up]", 1)
    entry = entry.replace(f'kernel = "{contract.controller("fixed").kernel.relative_to(contract.path.parent.parent)}"',
                          f'kernel = "{contract.controller("fixed").kernel.as_posix()}"', 1)
    path = folder / "contracts.toml"
    path.write_text(text + "\n" + entry)
    return path


def test_a_new_controller_entry_alone_is_a_subject(contract, tmp_path):
    """The subjects are the contract's own entries (tests/catalogue.py): one more entry is one more subject."""
    from repro.core.contract import load
    from tests.catalogue import subjects

    before = subjects(contract)
    assert before and not set(before) & set(contract.peers())
    assert subjects(load(made_up_contract(contract, tmp_path))) == [*before, "made_up"]


@pytest.mark.slow  # pytest in a process of its own (collection, then the made-up entry's tests on the host)
def test_a_new_controller_entry_alone_reaches_the_property_and_agreement_tests(contract, tmp_path):
    """With a made-up entry added to the contract and nothing else, pytest collects the property and agreement
    tests for it, every property its entry documents, and they pass on the host (it is the fixed kernel). The
    GPU tests are left out (their names hold "host" too: cupy against host), so the count is the same on any machine."""
    import os
    import subprocess
    import sys

    from analysis.judge.property_records import applicable
    from repro.core.paths import ROOT

    path = made_up_contract(contract, tmp_path)
    # loaded by -p before the conftest: the tracked file's name, CONTRACTS, is the made-up contract in this pytest run
    (tmp_path / "made_up_plugin.py").write_text(
        f"import pathlib\nimport repro.core.contract as c\nc.CONTRACTS = pathlib.Path({str(path)!r})\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "made_up_plugin", "-p", "no:cacheprovider",
                           "tests/test_properties.py", "tests/test_agreement.py", "-k", "made_up and host", "-q",
                           "-rs", "-m", "not slow and not gpu"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    documented = len(applicable(contract.controller("fixed")))
    scenarios = len(catalogue(contract.controller("fixed")))
    assert f"{documented + 2 * scenarios} passed" in done.stdout, done.stdout[-3000:]
