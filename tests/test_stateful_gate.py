"""A stateful rule through the gate: the stateful peers and a user's own stateful candidate (docs/examples/log_pi.*,
in a contract file of its own) pass their contracts; a write to an undeclared slot, a wound-up integral and a
state slot left unseeded each fail the row that says so."""

from __future__ import annotations

import pytest

from analysis.cli.evaluate import evaluate
from analysis.judge.properties import RATE_ROWS, applicable
from repro.core.contract import load
from repro.core.paths import ROOT

EXAMPLE = ROOT / "docs" / "examples" / "log_pi.toml"


@pytest.fixture(scope="module")
def mine():
    return load(EXAMPLE)


def _verdict(contract, name, source, host):
    return evaluate(source, name, host, contract, static=False, coverage=False, isolate=False)


def test_a_user_file_adds_a_stateful_entry_judged_by_default(mine):
    assert mine.default_entry() == "log_pi" and load().default_entry() == "fixed"
    entry = mine.controller("log_pi")
    assert entry.stateful and [(s.name, s.slot, s.start) for s in entry.state] == [("integral", 492, 0.0)]
    assert set(applicable(entry)).isdisjoint(RATE_ROWS) and {"spec_agreement", "isolation", "floor"} <= set(applicable(entry))


@pytest.mark.slow  # 1-1.5 s each; tests/test_stateful_peers.py holds them to the spec model bit for bit fast
@pytest.mark.parametrize("peer", ["pid_lagrangian", "geco"])
def test_stateful_peer_passes_its_own_contract(contract, host, peer):
    v = _verdict(contract, peer, contract.source(peer), host)
    assert v.ok, [(f.key, f.measured) for f in v.failed]


def test_the_example_candidate_passes_its_contract(mine, host):
    v = _verdict(mine, "log_pi", mine.source("log_pi"), host)
    assert v.ok, [(f.key, f.measured) for f in v.failed]


@pytest.mark.parametrize(("defines", "row"), [
    ({"LPI_INTEGRAL_INDEX": "493"}, "isolation"),  # the integral kept in a slot the contract does not declare
    pytest.param({"I_MIN": "-10.0f"}, "spec_agreement", marks=pytest.mark.slow),  # the anti-windup loosened
    pytest.param({"K_I": "0.06f"}, "spec_agreement", marks=pytest.mark.slow),  # a gain other than the contract's
], ids=["undeclared_slot", "windup", "gain"])
def test_a_stateful_mutant_fails_the_row_that_names_it(mine, host, defines, row):
    v = _verdict(mine, "log_pi", mine.source("log_pi").with_defines(**defines), host)
    failed = {f.key for f in v.failed}
    assert row in failed, (defines, failed)
    if row == "isolation":
        assert next(f for f in v.failed if f.key == "isolation").detail["written"] == [493]


@pytest.mark.slow  # the whole candidate report (about 20 s on 2 cores)
def test_report_puts_a_stateful_candidate_beside_the_fixed_kernel(tmp_path, capsys):
    """``report --kernel K --contracts F`` for F's own entry: both verdicts, the same replayed inputs, the toy on the
    same seeds and the learning loops on the same seeds, in candidate.md and data/candidate.json."""
    import json

    from analysis.cli import report

    kernel = ROOT / "docs" / "examples" / "log_pi.cu"
    assert report.main(["--kernel", str(kernel), "--contracts", str(EXAMPLE), "--out", str(tmp_path / "out"),
                        "--backend", "host"]) == 0
    data = json.loads((tmp_path / "out" / "data" / "candidate.json").read_text(encoding="utf-8"))
    assert data["entry"] == "log_pi" and data["verdicts"]["candidate"]["ok"] and data["verdicts"]["fixed"]["ok"]
    assert data["replay"]["fixed"].keys() == data["replay"]["candidate"].keys() and "square_wave" in data["replay"]["fixed"]
    assert [r["seed"] for r in data["toy"]["fixed"]] == [r["seed"] for r in data["toy"]["candidate"]]
    assert all(set(block) == {"fixed", "log_pi"} for block in data["study"].values())
    text = (tmp_path / "out" / "candidate.md").read_text(encoding="utf-8")
    assert "contract log_pi  (docs/examples/log_pi.toml)" in text and "contract fixed  (kernels/contracts.toml)" in text
