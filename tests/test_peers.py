"""Peer controllers (kernels/peers/): each passes its own contract bit for bit, and the contracts discriminate."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.cli import gate
from analysis.cli.evaluate import evaluate
from analysis.judge.property_records import applicable
from repro.core import spec
from repro.core.contract import CONTRACTS, load
from repro.core.errors import SuiteError
from repro.core.f32 import F32, bits
from repro.core.isv import new_isv
from repro.runners.scenarios import REF_TARGET, catalogue

#: The rules issues 11 and 20 name (the contract may list more).
PEERS = ("ppo_paper", "rllib", "ziegler", "tf_agents", "modular_rl", "batch_ppo")


def test_bad_input_counts_do_not_depend_on_a_nans_payload(contract, host, verdict_in_process):
    """The GPU's arithmetic on a NaN λ returns its canonical NaN, the CPU keeps the input's payload: the peer
    table's count of non-finite cases that move λ is the same for both (here: the host's runs, their NaN λ
    replaced by another NaN's bits as the GPU's would be)."""
    from dataclasses import replace

    from analysis.judge.peer_measures import measures_of

    v = verdict_in_process(host, "rllib", "rllib")
    other = np.array([0x7FC00001], dtype=np.uint32).view(F32)[0]  # a quiet NaN with another payload
    swapped = [replace(r, lam=np.where(np.isnan(r.lam), other, r.lam).astype(F32)) for r in v.evidence.nonfinite]
    assert any(np.isnan(r.scenario.lambda0) and np.isnan(r.lam[0]) for r in v.evidence.nonfinite)
    gpu_like = replace(v, evidence=replace(v.evidence, nonfinite=swapped))
    assert measures_of(gpu_like).nonfinite_moved == measures_of(v).nonfinite_moved


def test_every_peer_has_a_contract_entry_with_sourced_values(contract):
    for name in PEERS:
        entry = contract.controller(name)
        assert entry.kernel.parent.name == "peers"
        for key, doc in entry.props.items():
            assert doc.doc, f"[{name}] {key} does not quote its source"


@pytest.mark.parametrize("peer", PEERS)
def test_peer_passes_its_own_contract(contract, backend, peer, verdict_in_process):
    """Every applicable property, spec agreement and per-step ⇄ looped agreement included."""
    v = verdict_in_process(backend, peer, peer)
    assert {"spec_agreement", "launch_modes", "guards", "isolation"} <= {f.key for f in v.findings}
    assert v.ok, "; ".join(f"{f.key}: {f.measured} ({f.where})" for f in v.failed)


@pytest.mark.parametrize("peer", PEERS)
def test_fixed_fails_the_peer_contract(contract, backend, peer, verdict_in_process):
    failed = {f.key for f in verdict_in_process(backend, "fixed", peer).failed}
    assert {"ramp", "decay", "steps_to_double", "spec_agreement"} <= failed
    if contract.controller(peer).bound("floor") is None:
        assert "vanishing" in failed  # the fixed kernel's floor stops λ long before 0
    if contract.controller(peer).is_band:
        assert {"ramp_onset", "decay_onset"} <= failed


@pytest.mark.parametrize("peer", PEERS)
def test_peer_fails_the_fixed_contract(contract, backend, peer, verdict_in_process):
    failed = {f.key for f in verdict_in_process(backend, peer, "fixed").failed}
    assert {"floor", "ramp", "decay", "spec_agreement", "ramp_onset", "decay_onset"} <= failed


def test_contracts_discriminate_pairwise(contract):
    """For every ordered pair of contracts, the spec models differ on the first one's catalogue: under its sustained
    KL (first 300 steps), or, for rules with the same constants and other arithmetic (modular_rl's double thresholds,
    BatchPPO's float32 ones), at its band's float32 edges."""
    names = list(contract.controllers)
    for a in names:
        scenarios = {s.name: s for s in catalogue(contract.controller(a)) if s.family != "bad_values"}
        picked = [scenarios[n] for n in ("aligned", "diverged", "band_edges") if n in scenarios]
        runs = [(s.lambda0, s.kl[:300], s.target[:300]) for s in picked]
        own = spec.run_each(spec.Rule.of(contract.controller(a)), runs)
        for b in names:
            if a == b:
                continue
            other = spec.run_each(spec.Rule.of(contract.controller(b)), runs)
            differ = any(not np.array_equal(bits(x), bits(y)) for x, y in zip(own, other, strict=True))
            assert differ, f"{a} and {b} give the same λ on {a}'s sustained scenarios and band edges"


def test_applicability_follows_the_rule_kind(contract):
    assert "dead_zone" not in applicable(contract.controller("ziegler"))
    assert "vanishing" not in applicable(contract.controller("tf_agents"))  # it has a floor
    assert {"floor", "ceiling"} <= set(applicable(contract.controller("tf_agents")))  # clip_by_value since v0.16.0
    assert {"floor", "ceiling"}.isdisjoint(applicable(contract.controller("ppo_paper")))
    # each documents one row the other lacks: the original its collapse count, the fixed its cold-start loss
    assert [k for k in applicable(contract.controller("fixed")) if k != "warm_up_loss"] == [
        k for k in applicable(contract.controller("original")) if k != "steps_to_floor"]


@pytest.mark.slow  # the gate's whole command per peer (1-1.5 s each); test_peer_passes_its_own_contract judges them fast
@pytest.mark.parametrize("peer", PEERS)
def test_gate_cli_exits_0_for_each_peer(contract, peer, capsys):
    assert gate.main([str(contract.controller(peer).kernel), "--contract", peer, "--backend", "host"]) == 0
    assert "PASS" in capsys.readouterr().out


# --- the rules, one step each, from their sources' descriptions ---


def _one(name, lam, kl, target=REF_TARGET):
    return spec.step(spec.Rule.of(load(CONTRACTS).controller(name)), F32(lam), F32(kl), F32(target))


def test_rules_follow_their_sources_one_step():
    t = F32(REF_TARGET)
    assert _one("ppo_paper", 0.3, t * F32(1.6)) == F32(0.3) * F32(2)  # d > d_targ·1.5: β·2
    assert _one("ppo_paper", 0.3, t * F32(0.6)) == F32(0.3) / F32(2)  # d < d_targ/1.5: β/2
    assert _one("rllib", 0.3, t * F32(2.1)) == F32(F32(0.3) * F32(1.5))  # > 2·target: ×1.5
    assert _one("rllib", 0.3, t * F32(1.9)) == F32(0.3)  # in [0.5, 2]·target: unchanged
    assert _one("modular_rl", 0.3, t * F32(0.69)) == F32(F32(0.3) / F32(1.5))  # < 0.7·target: ÷1.5
    assert _one("tf_agents", 1e-15, t * F32(0.1)) == F32(1e-15)  # clamped at 10e-16
    err = F32(F32(0.5) - F32(1))  # KL = target/2: error −0.5, clipped to −0.2
    assert err < F32(-0.2)
    assert _one("ziegler", 0.3, t / F32(2)) == F32(F32(0.3) * F32(F32(1) + F32(F32(F32(-0.2) * F32(128)) / F32(10000))))


def test_division_and_multiplication_by_the_reciprocal_differ_and_the_kernel_divides(contract, host):
    """modular_rl divides by 1.5; TF-Agents multiplies by fl32(1/1.5). Some λ round differently: there,
    the modular_rl kernel gives λ/1.5 bits and the TF-Agents kernel λ·fl32(1/1.5) bits."""
    lam = np.random.default_rng(1).uniform(0.01, 1.0, 4000).astype(F32)
    div, mul = (lam / F32(1.5)).astype(F32), (lam * F32(1.0 / 1.5)).astype(F32)
    differ = bits(div) != bits(mul)
    assert differ.any(), "no λ where ÷1.5 and ×fl(1/1.5) round differently"
    lam = lam[differ][:64]
    n = lam.size
    kl = np.full((1, n), REF_TARGET / 100, F32)
    tg = np.full((1, n), REF_TARGET, F32)
    for name, expected in (("modular_rl", lam / F32(1.5)), ("tf_agents", lam * F32(1.0 / 1.5))):
        k = host.compile(contract.source(name), contract.slots)
        got, _ = k.run_looped(new_isv(contract.slots, lam), kl, tg)
        assert np.array_equal(bits(got[0]), bits(expected.astype(F32))), name


def test_none_bounds_are_explicit(contract):
    entry = contract.controller("ppo_paper")
    assert entry.bound("floor") is None and entry["floor"].none
    with pytest.raises(SuiteError, match="documented as absent"):
        entry.value("floor")


def test_malformed_rule_fields_are_rejected(tmp_path):
    base = CONTRACTS.read_text(encoding="utf-8")
    bad = tmp_path / "contracts.toml"
    bad.write_text(base.replace('form = "mul_one_plus"', 'form = "times"'), encoding="utf-8")
    with pytest.raises(SuiteError, match="form 'times'"):
        load(bad)
    bad.write_text(base.replace('rule = "proportional"', 'rule = "pid"'), encoding="utf-8")
    with pytest.raises(SuiteError, match="rule 'pid'"):
        load(bad)
    for old, new, message in (('dtype = "f64_f32"', 'dtype = "f16"', "dtype 'f16'"),
                              ('overlap = "unchanged"', 'overlap = "raise"', "overlap 'raise'"),
                              ('bounds = "clip_by_value"', 'bounds = "clip"', "bounds 'clip'"),
                              ('release = { project = "tensorflow/agents", ', 'release = { ', "names its release")):
        bad.write_text(base.replace(old, new, 1), encoding="utf-8")
        with pytest.raises(SuiteError, match=message):
            load(bad)


def test_every_peer_names_its_release_and_has_no_suite_guard(contract):
    """Each peer's entry names the release it follows; none carries the suite's guard (no source has one)."""
    for name in contract.peers():
        entry = contract.controller(name)
        assert {"project", "version", "path", "function"} <= set(entry.release), name
        assert entry.release["path"].split("/")[-1] in entry.release_text() and not entry.guarded, name
    assert contract.controller("fixed").guarded and contract.controller("original").guarded


finite_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(d=finite_f32, t=finite_f32)
def test_paper_double_comparisons_decide_as_the_reals(contract, d, t):
    """The paper's rule in real arithmetic (fractions.Fraction) and the contract's f64 edges decide alike for
    every finite float32 d and d_targ (its kernel comment's claim)."""
    from fractions import Fraction

    d_r, t_r = Fraction(float(F32(d))), Fraction(float(F32(t)))
    beta = F32(3.0)
    if d_r < t_r / Fraction(3, 2):
        beta = F32(beta / F32(2))
    if d_r > t_r * Fraction(3, 2):
        beta = F32(beta * F32(2))
    got = spec.step(spec.Rule.of(contract.controller("ppo_paper")), F32(3.0), F32(d), F32(t))
    assert bits(got) == bits(beta)


@settings(max_examples=300, deadline=None)
@given(t=st.floats(width=32, allow_nan=True, allow_infinity=True))
def test_rllib_thresholds_rounded_once_are_the_float32_products(t):
    """RLlib's fl32(2.0·t) and fl32(0.5·t) (a double threshold rounded once) are 2f·t and 0.5f·t bit for bit:
    one correctly rounded operation on the same real; a threshold 1.3·t is not (the BatchPPO/modular_rl edges)."""
    with np.errstate(all="ignore"):
        for a in (2.0, 0.5):
            assert bits(F32(np.float64(F32(t)) * a)) == bits(F32(F32(t) * F32(a)))


def test_thresholds_rounded_once_and_in_float32_differ_for_1_3():
    t = F32(6.0)  # the issue's TF-Agents example: fl32(6·(1.0 + 0.3)) is 7.8000002, 6f·(1f + 0.3f) is 7.7999997
    assert F32(np.float64(t) * (1.0 + 0.3)) == F32(7.8) > F32(t * (F32(1) + F32(0.3)))


# --- any input, bit for bit (NaN compared as NaN: the GPU returns its canonical NaN) ---

any_f32 = st.floats(width=32, allow_nan=True, allow_infinity=True)
traces = st.lists(any_f32, min_size=1, max_size=60)


@pytest.fixture(scope="module", params=PEERS)
def peer_case(request, contract, backend, compiled):
    return compiled(backend, request.param), spec.Rule.of(contract.controller(request.param))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lam0=any_f32, kl=traces, target=any_f32)
def test_peer_equals_spec_on_any_input(peer_case, lam0, kl, target):
    kernel, rule = peer_case
    k = np.asarray(kl, dtype=F32)[:, None]
    lam, _ = kernel.run_looped(new_isv(kernel.slots, lam0), k, np.full(k.shape, target, F32))
    expected = spec.run(rule, [lam0], k, F32(target))
    same = (bits(lam) == bits(expected)) | (np.isnan(lam) & np.isnan(expected))
    assert same.all(), f"step {int(np.flatnonzero(~same.ravel())[0]) + 1}: kernel {lam.ravel()} spec {expected.ravel()}"


# --- the report's comparison: measured, consistent with the contracts and the spec ---


@pytest.fixture(scope="module")
def all_verdicts(contract, host, verdict_in_process):
    return {n: verdict_in_process(host, n, n) for n in ("fixed", "original", *contract.peers())}


@pytest.fixture(scope="module")
def all_measures(all_verdicts):
    from analysis.judge.peer_measures import measure_all

    return measure_all(all_verdicts)


@pytest.mark.slow  # the report's peer table (every controller judged; 2-3 s): the report's tests are slow too
def test_comparison_table_reads_measurements(contract, all_verdicts, all_measures):
    from analysis.present.peers_section import table

    tab = table(all_measures).set_index("controller")
    assert list(tab.index) == list(all_verdicts)
    assert set(PEERS) <= set(contract.peers())
    for name in all_verdicts:
        entry = contract.controller(name)
        if entry.has("steps_to_double"):
            assert tab.loc[name, "steps to double"] == entry.value("steps_to_double")
        assert tab.loc[name, "floor"].startswith("none") == (entry.bound("floor") is None)
        if entry.bound("floor") is None:  # the spec says where sustained aligned KL leaves λ
            rule = spec.Rule.of(entry)
            n = spec.steps_to_settle(rule, entry.value("seed_lambda"), REF_TARGET / 100, REF_TARGET)
            lam = spec.run(rule, [entry.value("seed_lambda")], np.full((n, 1), REF_TARGET / 100, F32), F32(REF_TARGET))
            cell = tab.loc[name, "aligned KL: steps to the bottom"]
            assert (f"0 at step {n}" in cell) if lam[-1, 0] == 0 else ("never 0" in cell), cell


@pytest.mark.slow  # as above
def test_peer_section_says_which_release_each_row_is(contract, all_measures):
    from analysis.present.peers_section import markdown, table

    text = "\n".join(markdown(all_measures, table(all_measures)))
    for name in contract.peers():
        assert f"- **{name}**: {contract.controller(name).release_text()}" in text
    assert "frozen by the λ ≤ 0 guard" not in text  # no peer has the guard: a λ at 0 stays 0 by multiplication
    tab = table(all_measures).set_index("controller")
    assert "KL = 0: unchanged" in tab.loc["fixed", "bad input"]
    assert all("KL = 0: decay" in tab.loc[n, "bad input"] for n in contract.peers())  # every source lowers λ at 0


@pytest.mark.slow  # as above: the report's figure of the aligned traces, every controller judged
def test_aligned_traces_start_at_the_seed_and_show_zero(contract, all_measures):
    from analysis.present.peers_section import aligned_traces

    traces = aligned_traces(all_measures)
    for name, rows in traces.groupby("controller"):
        assert rows["lambda"].iloc[0] == F32(contract.controller(name).value("seed_lambda"))
    assert (traces[traces.controller == "ppo_paper"]["lambda"] == 0).any()


def test_peer_loop_agrees_with_the_robustness_study_on_the_same_noise(contract, host):
    """The toy gives every group the same noise: the fixed controller's collapse fraction is the same whether it
    runs beside the original or beside the peers."""
    from repro import toy as closed_loop

    grid = {"actor_lr": (0.5,), "kl_ema_rate": (0.01,), "kl_target": (1.0,)}
    toy = closed_loop.Toy(steps=300, warmup=100)

    def subjects(names):
        return {n: closed_loop.compile_subject(host, contract.source(n), contract.slots,
                                               contract.controller(n).value("seed_lambda")) for n in names}

    mine = closed_loop.robustness(host, subjects(("fixed", "ppo_paper")), toy=toy, seeds=3, grid=grid)
    theirs = closed_loop.robustness(host, subjects(("original", "fixed")), toy=toy, seeds=3, grid=grid)
    assert set(mine.controller) == {"fixed", "ppo_paper"}
    assert ((mine.collapse_fraction >= 0) & (mine.collapse_fraction <= 1) & (mine.diverged_fraction <= 1)).all()
    fixed = mine[mine.controller == "fixed"].collapse_fraction.to_numpy()
    assert np.array_equal(fixed, theirs[theirs.controller == "fixed"].collapse_fraction.to_numpy())


# --- the peer checks can fail: one mutant per rule-specific property ---

PEER_MUTANTS = {
    "ppo_paper": (("beta = beta / BETA_FACTOR;", "beta = fmaxf(1e-30f, beta / BETA_FACTOR);"), {"vanishing"}),
    # modular_rl decides in double: the float32 threshold moves the ramp onset by an ulp.
    "modular_rl": (("klafter > KL_UPPER_FACTOR * kl_target", "(float)klafter > (float)KL_UPPER_FACTOR * (float)kl_target"),
                   {"ramp_onset"}),
    # BatchPPO rounds its threshold to float32 and compares in float32: a double comparison moves the onset.
    "batch_ppo": (("kl_change > (float)(KL_UPPER_FACTOR * kl_target)", "(double)kl_change > KL_UPPER_FACTOR * kl_target"),
                  {"ramp_onset"}),
    "tf_agents": (("    clipped = clipped > MAX_BETA ? MAX_BETA : clipped;", ""), {"ceiling", "spec_agreement"}),
    "tf_agents_nan": (("clipped = clipped < MIN_BETA ? MIN_BETA : clipped;", "clipped = fmaxf(clipped, MIN_BETA);"),
                      {"nonfinite"}),  # fmaxf turns a NaN β into the floor; tf.clip_by_value keeps the NaN
    "rllib": (("    if (kl > (float)", "    if (kl <= 0.0f) return;\n    if (kl > (float)"), {"guards"}),  # the suite's guard
    "ziegler": (("#define ERROR_CLIP 0.2f", "#define ERROR_CLIP 0.3f"), {"ramp", "decay", "spec_agreement"}),
}


@pytest.mark.parametrize("peer", sorted(PEER_MUTANTS))
def test_peer_mutant_fails_its_contract(contract, host, peer):
    (old, new), expected = PEER_MUTANTS[peer]
    name = peer.removesuffix("_nan")
    mutant = contract.source(name).with_edit(old, new, f"{peer} mutant")
    # In process, as verdict_in_process (conftest.py): these mutants neither crash nor hang.
    failed = {f.key: f for f in evaluate(mutant, name, host, contract, static=False, coverage=False,
                                         isolate=False).failed}
    assert expected <= set(failed), f"expected {expected} to fail, failed: {sorted(failed)}"
    assert all(failed[k].where for k in expected)
