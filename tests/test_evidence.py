"""Gathering and judging apart: one record per property, no row passes on no evidence, band edges probed both ways.

The records (``analysis.judge.property_records.RECORDS``) are checked against the contract, the experiment groups and
the mutants; every row that needs runs is shown "not measured" (a failure) when they did not happen, both on
evidence with a group taken away and on a candidate that crashes before any of them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from analysis.cli.evaluate import evaluate
from analysis.judge.property_records import RECORDS, judge_rows
from analysis.judge.verdict import Verdict
from analysis.present import render
from repro.core.f32 import F32
from repro.core.kernel_source import KernelSource
from repro.runners.campaign import scenario_groups
from repro.runners.evidence import GROUPS, SCENARIO_GROUPS, SOURCES, Fault
from repro.runners.gather import gather
from repro.runners.scenarios import onset_targets
from tests.catalogue import CANDIDATES, MUTANTS, header

#: Documented values that are not a row of their own, and the rows that read them.
PARAMETERS = {
    "seed_lambda": "every scenario's λ0",
    "tolerance": "dead_zone, ramp_onset, decay_onset (the band's edges)",
    "upper_edge": "dead_zone, ramp_onset (a peer's band edge)",
    "lower_edge": "dead_zone, decay_onset (a peer's band edge)",
    "clip": "ramp, decay (the proportional rule's rate)",
    "n_steps": "ramp, decay (the proportional rule's rate)",
    "horizon": "ramp, decay (the proportional rule's rate)",
    "warm_up_rate": "warm_up_loss (the slowest EMA rate it covers)",
    "decay_slowness": "informational: the report sets it beside the measured ratio of log-rates",
}
#: Rows no mutant of the fixed kernel breaks, and where their failing case is tested instead.
WITHOUT_MUTANT = {
    "steps_to_double": "fails with ramp under the original's contract (tests/test_properties.py)",
    "steps_to_floor": "documented by the original only; judged there (tests/test_properties.py)",
    "vanishing": "rules with no floor (peers); tests/test_peers.py",
    "launch_modes": "both launch paths run the same harness code; a kernel that differs is a harness bug",
    "resources": "reported, never fails",
    "memcheck": "GPU only: tests/test_sanitize.py",
    "initcheck": "GPU only: tests/test_sanitize.py",
}


def test_every_record_needs_evidence_that_exists():
    for key, record in RECORDS.items():
        assert set(record.needs) <= set(GROUPS) | set(SOURCES), key


def test_every_record_has_its_columns_and_no_columns_lack_a_record():
    """A row's words live in the presentation layer, by its key: one entry per record, none for a row that is gone."""
    from analysis.present.property_columns import COLUMNS

    assert list(COLUMNS) == list(RECORDS)


def test_every_documented_value_has_one_record_or_is_a_parameter(contract):
    documented = set()
    for name in ("fixed", "original", *contract.peers()):
        ctrl = contract.controller(name)
        documented |= set(ctrl.props)
        for key in ctrl.props:  # a documented property that is a row is judged for that entry
            if key in RECORDS and not ctrl[key].none and key not in ("floor", "ceiling"):
                assert RECORDS[key].applies_to(ctrl), (name, key)
    assert documented - set(RECORDS) == set(PARAMETERS), "a new documented value needs a record (or a PARAMETERS line)"


def test_every_record_has_its_mutant():
    broken = set().union(*(expected for _, expected in MUTANTS.values()))
    broken |= {header(p)["expect-row"] for p in CANDIDATES if "expect-row" in header(p)}
    assert set(RECORDS) - broken == set(WITHOUT_MUTANT), "a new record needs a mutant (tests/test_mutants.py)"


@pytest.fixture(scope="module")
def evidence_of(contract, host):
    """Contract entry name → its own kernel's evidence (gathered once per module)."""
    cache = {}

    def get(name: str):
        if name not in cache:
            # in process: the in-repo kernels neither crash nor hang (that path is crashes_first's below)
            cache[name] = gather(host, contract.source(name), contract.slots, contract.controller(name), static=False,
                                 coverage=False, isolate=False)
        return cache[name]

    return get


@pytest.fixture(scope="module")
def fixed_evidence(evidence_of):
    return evidence_of("fixed")


def subject(contract, key: str) -> str:
    """The first contract entry (fixed, original, then the peers) whose documented rule the record applies to."""
    names = ["fixed", "original", *contract.peers()]
    return next(n for n in names if RECORDS[key].applies_to(contract.controller(n)))


NEEDING = [(key, need) for key, r in RECORDS.items() for need in r.needs if need in GROUPS]


@pytest.mark.parametrize("key, need", NEEDING, ids=[f"{k}-{n}" for k, n in NEEDING])
def test_a_row_whose_group_did_not_run_is_not_measured_and_fails(contract, evidence_of, key, need):
    evidence = evidence_of(subject(contract, key))
    whole = {f.key: f for f in judge_rows(evidence)}
    assert whole[key].ok and "not_measured" not in whole[key].detail
    gone = replace(evidence, groups_run=evidence.groups_run - {need})
    row = next(f for f in judge_rows(gone) if f.key == key)
    assert not row.ok and need in row.detail["not_measured"]
    assert render.measured(row).startswith("not measured")


def test_a_stray_write_in_any_scenario_group_fails_isolation(contract, evidence_of):
    """Every scenario group the campaign runs is one the isolation row reads: a slot written in any one run of any
    group fails the row, naming that run (a group added to the campaign and forgotten by the row would pass)."""
    groups = set()
    for name in ("fixed", *contract.peers()):
        groups |= {g for g, (scenarios, _) in scenario_groups(contract.controller(name)).items() if scenarios}
    assert groups == set(SCENARIO_GROUPS)
    for name in ("fixed", "ziegler"):  # ziegler: the one entry with the vanishing group (no floor, no band)
        evidence = evidence_of(name)
        for group in SCENARIO_GROUPS:
            runs = getattr(evidence, group)
            if not runs:
                continue
            written = [*runs[:-1], replace(runs[-1], stray=[evidence.lambda_slot + 1])]
            row = next(f for f in judge_rows(replace(evidence, **{group: written})) if f.key == "isolation")
            assert not row.ok and row.where.scenario == runs[-1].scenario.name, (name, group)


def test_coverage_and_sanitizer_rows_without_their_runs_are_not_measured(fixed_evidence):
    from repro.runners.evidence import Coverage

    part = Coverage("k.cu", {1: 0}, {}, skipped=(("catalogue", "it crashed or hung in the gated build"),))
    rows = {f.key: f for f in judge_rows(replace(fixed_evidence, coverage=part))}
    assert not rows["coverage"].ok and "catalogue" in rows["coverage"].detail["not_measured"]
    required = {f.key: f for f in judge_rows(replace(fixed_evidence, unavailable=frozenset({"coverage"})), True)}
    assert not required["coverage"].ok and "not available" in required["coverage"].detail["not_measured"]
    hung = replace(fixed_evidence, sanitizer=(), faults=[Fault("sanitizer", "memcheck, looped path", "timeout", "")])
    rows = {f.key: f for f in judge_rows(hung)}
    assert not rows["memcheck"].ok and not rows["initcheck"].ok
    assert {f.key for f in judge_rows(replace(fixed_evidence, sanitizer=()))} >= {"memcheck", "initcheck"}


@pytest.fixture(scope="module")
def crashes_first(contract, host):
    """Contract entry name → the verdict, against that entry, of a candidate that crashes (a null write) on its
    first step whatever the input: no run finishes."""
    entry = contract.controller("fixed")
    src = contract.source("fixed").with_edit("if (threadIdx.x != 0 || blockIdx.x != 0) return;",
                                             "if (threadIdx.x != 0 || blockIdx.x != 0) return;\n"
                                             "    *(volatile float*)0 = 1.0f;", "crashes first")
    cache = {}

    def get(name: str):
        if name not in cache:
            # coverage only where its row is the one judged (the coverage build crashes as well; 0.5 s a build)
            cache[name] = evaluate(KernelSource(src.text, entry.symbol, "crashes_first.cu"), name, host, contract,
                                   static=False, coverage=name == subject(contract, "coverage"))
        return cache[name]

    return get


@pytest.mark.parametrize("key", [k for k, r in RECORDS.items() if set(r.needs) & (set(GROUPS) | {"coverage"})])
def test_each_row_fails_not_measured_after_a_crash_before_it(contract, crashes_first, key):
    verdict = crashes_first(subject(contract, key))
    rows = {f.key: f for f in verdict.findings}
    if key == "coverage" and key not in rows:
        pytest.skip("coverage needs gcov, which this machine lacks")
    assert not rows[key].ok and "not_measured" in rows[key].detail, render.message(rows[key], "contracts.toml")
    assert "see the execution row" in render.message(rows[key], "contracts.toml")
    assert rows["execution"].ok is False


def test_a_nonfinite_case_that_did_not_finish_fails_and_points_to_execution(fixed_evidence):
    """A group cut short (a crash or hang in its last case): the cases that ran are judged, the rest fail as
    not measured, and the hint points to the execution row rather than to a contract line."""
    cut = replace(fixed_evidence, nonfinite=fixed_evidence.nonfinite[:-1])
    row = next(f for f in judge_rows(cut) if f.key == "nonfinite")
    missing = fixed_evidence.nonfinite[-1].scenario.name
    assert not row.ok and row.detail["unmeasured"] == [missing] and row.measured == row.documented - 1
    assert missing in row.detail["not_measured"]  # every wrong case is one that did not run: no evidence, no violation
    alone = Verdict(source=KernelSource("", "k", "k.cu"), contract="fixed", backend="host", device="",
                    findings=[row], evidence=cut, seconds=0.0)
    assert "FAIL: 1 of 1 properties not measured in " in render.verdict(alone, "contracts.toml")
    wrong = replace(cut.nonfinite[0], lam=np.full_like(cut.nonfinite[0].lam, 0.123))  # and one case that ran, wrong
    mixed = next(f for f in judge_rows(replace(cut, nonfinite=[wrong, *cut.nonfinite[1:]])) if f.key == "nonfinite")
    assert not mixed.ok and "not_measured" not in mixed.detail and mixed.detail["unmeasured"] == [missing]
    assert render.hints(row, "contracts.toml") == ["not measured where the candidate crashed or hung: see the "
                                                    "execution row"]
    # the row reads whole in every form (a crash or hang on the GPU leaves exactly such a row)
    assert f"{missing}: not measured" in render.message(row, "contracts.toml")
    assert "nonfinite" in render.table([row], "contracts.toml")
    assert json.loads(render.to_json(row.as_dict()))["detail"]["unmeasured"] == [missing]


def test_isolation_never_passes_on_zero_runs(crashes_first):
    row = next(f for f in crashes_first("fixed").findings if f.key == "isolation")
    assert not row.ok and "0/0" not in render.measured(row)


def _direction(target: np.float32, a: float, op: str) -> int:
    """+1 where fl32 rounds target·a (or target/a) up, -1 down, 0 exact (exact rational arithmetic)."""
    t, a32 = Fraction(float(target)), Fraction(float(F32(a)))
    exact = t * a32 if op == "mul" else t / a32
    got = Fraction(float(F32(target) * F32(a) if op == "mul" else F32(target) / F32(a)))
    return (got > exact) - (got < exact)


@pytest.mark.parametrize("name", ["fixed", "original"])
def test_band_edges_are_probed_where_fl32_rounds_up_and_down(contract, name):
    ctrl = contract.controller(name)
    tol = ctrl.value("tolerance")
    targets = onset_targets(ctrl)
    for op in ("mul", "div"):
        assert {_direction(t, tol, op) for t in targets} >= {1, -1}, (name, op, targets)


def test_band_in_double_precision_fails_the_ramp_onset_on_the_host(contract, host):
    """The candidate of tests/candidates/band_in_double.cu, judged in process: the onset row it fails, and the
    range probe at a band's upper edge (spec_agreement) where fl32(target·3) rounds up."""
    path = Path(__file__).parent / "candidates" / "band_in_double.cu"
    verdict = evaluate(KernelSource(path.read_text(), "rl_q_distill_lambda_controller", str(path)), "fixed", host,
                       contract, static=False, coverage=False, isolate=False)
    assert [f.key for f in verdict.failed] == ["ramp_onset", "spec_agreement"]
    for row in verdict.failed:
        t = F32(row.where.target)
        assert _direction(t, 3.0, "mul") == 1, row.key  # it shows where fl32(target·3) rounds up


def test_a_new_record_alone_reaches_every_output_and_the_diagnosis(monkeypatch, contract, host):
    """Adding a property is its record and its columns (DESIGN §5): a made-up record and its columns, nothing else,
    give a row, after the others, read as its columns say in the table, the JSON and JUnit, with the difference its
    record adds blamed on it; "not measured" where the group it needs did not run."""
    from analysis.judge import property_records
    from analysis.judge.findings import Difference, Finding
    from analysis.judge.verdict import judge
    from analysis.present import property_columns

    def check(ev):
        n = len(ev.catalogue)
        return Finding(key="made_up", title="a made-up property", ok=False, unit="runs", documented=n, predicted=n,
                       measured=n - 1, detail={}, line=0, doc="made up for this test")

    made_up = Difference(kind="constant", name="made_up", documented=1, measured=2, note="a made-up difference")
    record = property_records.Property(key="made_up", check=lambda ev, required: check(ev), needs=("catalogue",),
                                       blames=frozenset({"made_up"}), differences=lambda row, b: [made_up])
    monkeypatch.setitem(property_records.RECORDS, "made_up", record)
    monkeypatch.setitem(property_columns.COLUMNS, "made_up", property_columns.Reads(
        documented=lambda f: "as made up", measured=lambda f: f"{f.measured:g} made-up runs"))
    fixed_evidence = gather(host, contract.source("fixed"), contract.slots, contract.controller("fixed"), static=False,
                            coverage=False, isolate=False, inference=True)  # with the rule it behaves as: the diagnosis
    v = judge(fixed_evidence, contract.source("fixed"), "fixed", contract)
    row = v.findings[-1]
    n = len(fixed_evidence.catalogue)
    assert row.key == "made_up" and not row.ok and row.causes == (made_up,) and made_up in v.differences
    assert [f.key for f in v.findings[:-1]] == [f.key for f in judge_rows(fixed_evidence) if f.key != "made_up"]
    table = render.table(v.findings, "kernels/contracts.toml")
    line = next(ln for ln in table.splitlines() if ln.startswith("made_up"))
    assert "as made up" in line and f"{n - 1} made-up runs" in line and line.rstrip().endswith("FAIL")
    rows = {f["key"]: f for f in json.loads(render.to_json(v.as_dict()))["properties"]}
    assert rows["made_up"]["ok"] is False and rows["made_up"]["causes"][0]["note"] == "a made-up difference"
    junit = render.junit(v.findings, "kernels/contracts.toml", "gate", 0.0)
    assert 'name="made_up"' in junit and "made_up 2 (contract 1; a made-up difference)" in junit
    gone = next(f for f in judge_rows(replace(fixed_evidence, groups_run=fixed_evidence.groups_run - {"catalogue"}))
                if f.key == "made_up")
    assert not gone.ok and "catalogue" in gone.detail["not_measured"]


def test_the_reports_gate_measures_outside_state_on_each_backend(backend, contract):
    """The report judges behaviour without the gate's static rows, except where a row has no other evidence: on a
    device backend the outside_state row reads NVRTC's PTX (a device build's data cannot be read). Without it the
    row is not measured, and the report said the fixed kernel FAILS (an H100 run)."""
    from analysis.cli.evaluate import evaluate, static_for_behaviour
    from repro.backends.ptx import nvrtc_unavailable

    if static_for_behaviour(backend) and nvrtc_unavailable():
        pytest.skip(nvrtc_unavailable())
    verdict = evaluate(contract.source("fixed"), "fixed", backend, contract, static=static_for_behaviour(backend),
                       coverage=False)
    row = next(f for f in verdict.findings if f.key == "outside_state")
    assert row.ok and "not_measured" not in row.detail, row.detail
