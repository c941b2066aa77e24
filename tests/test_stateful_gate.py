"""A stateful rule through the gate: the stateful peers and a user's own stateful candidate (docs/examples/log_pi.*,
in a contract file of its own, its rule's spec model named by it) pass their contracts; a write to an undeclared
slot, a wound-up integral, a gain 1 ulp off and the integral's sign or clamp wrong each fail the row that says so;
a rule of one's own (a model file) or of the suite's own (one registry entry) needs nothing else."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from analysis.cli.evaluate import evaluate
from analysis.judge.property_records import RATE_ROWS, applicable
from repro.core import stateful
from repro.core.contract import CONTRACTS, load
from repro.core.errors import SuiteError
from repro.core.f32 import F32
from repro.core.paths import ROOT

EXAMPLE = ROOT / "docs" / "examples" / "log_pi.toml"


@pytest.fixture(scope="module")
def mine():
    return load(EXAMPLE)


def _verdict(contract, name, source, host):
    return evaluate(source, name, host, contract, static=False, coverage=False, isolate=False)


def test_a_user_file_adds_a_stateful_entry_judged_by_default(mine):
    assert mine.default_entry() == "log_pi" and load(CONTRACTS).default_entry() == "fixed"
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


# --- a stateful rule of one's own: the contract names its spec model (docs/examples/log_pi_model.py) ---------------

KERNEL = ROOT / "docs" / "examples" / "log_pi.cu"


def _gate(kernel, contracts, tmp_path, capsys) -> tuple[int, dict]:
    """The gate's whole command on the host: its exit code and its JSON."""
    import json

    from analysis.cli import gate

    out = tmp_path / "verdict.json"
    code = gate.main([str(kernel), "--contracts", str(contracts), "--backend", "host", "--json", str(out)])
    capsys.readouterr()
    return code, json.loads(out.read_text(encoding="utf-8"))


def _failed(data: dict) -> set[str]:
    return {row["key"] for row in data["properties"] if not row["ok"]}


def test_the_pi_example_passes_the_gate_command(tmp_path, capsys):
    """docs/examples/log_pi.toml names its rule's spec model (no rule of the suite's own): the gate exits 0 with
    spec_agreement among the rows it judged."""
    entry = load(EXAMPLE).controller("log_pi")
    assert entry.model == ROOT / "docs" / "examples" / "log_pi_model.py" and entry.rule not in stateful.KINDS
    code, data = _gate(KERNEL, EXAMPLE, tmp_path, capsys)
    assert code == 0 and data["ok"], _failed(data)
    assert "spec_agreement" in {row["key"] for row in data["properties"]}


def _define(text: str, name: str) -> str:
    return re.search(rf"^#define {name} (\S+)$", text, re.M).group(1)


def _one_ulp_up(literal: str) -> str:
    """A float32 ``f`` literal's next float32 up, as a literal that rounds to it exactly."""
    return f"{float(np.nextafter(F32(literal.removesuffix('f')), F32(np.inf))):.9g}f"


#: (what the bug is, the kernel's text → its buggy text). Each keeps the state slot and the guard: only the spec
#: model can tell it from the contract's rule.
PI_BUGS = {
    "k_i_one_ulp": lambda t: t.replace(f"#define K_I {_define(t, 'K_I')}", f"#define K_I {_one_ulp_up(_define(t, 'K_I'))}"),
    "integral_sign": lambda t: t.replace("isv[LPI_INTEGRAL_INDEX] + K_I * e", "isv[LPI_INTEGRAL_INDEX] - K_I * e"),
    "no_lower_clamp": lambda t: t.replace("fminf(fmaxf(integral, I_MIN), I_MAX)", "fminf(integral, I_MAX)"),
}


@pytest.mark.parametrize("bug", [
    "k_i_one_ulp",
    pytest.param("integral_sign", marks=pytest.mark.slow),  # 3 s each: the gate's whole command
    pytest.param("no_lower_clamp", marks=pytest.mark.slow),
])
def test_a_pi_kernel_with_a_bug_fails_spec_agreement_through_the_gate(tmp_path, capsys, bug):
    text = KERNEL.read_text(encoding="utf-8")
    buggy = PI_BUGS[bug](text)
    assert buggy != text, bug
    kernel = tmp_path / "pi_bug.cu"
    kernel.write_text(buggy, encoding="utf-8")
    code, data = _gate(kernel, EXAMPLE, tmp_path, capsys)
    assert code == 1 and "spec_agreement" in _failed(data), (bug, _failed(data))


def _own_rule(tmp_path, model_text: str, entry: str = "") -> Path:
    """A contract file of one's own in ``tmp_path``: rule "pi" (a name of no kind of the suite's) for
    docs/examples/log_pi.cu, its model ``model_text``, its properties those of the example's entry."""
    model = tmp_path / "pi_model.py"
    model.write_text(model_text, encoding="utf-8")
    example = EXAMPLE.read_text(encoding="utf-8")
    body = example[example.index("[log_pi]"):].replace('rule = "log_pi"', 'rule = "pi"')
    body = body.replace('model = "docs/examples/log_pi_model.py"', f'model = "{model}"')
    mine = tmp_path / "mine.toml"
    mine.write_text('base = "kernels/contracts.toml"\n\n' + body.replace("[log_pi", "[pi") + entry, encoding="utf-8")
    return mine


def test_a_new_rule_alone_is_judged_with_its_own_state_and_property_names(tmp_path, host):
    """A model with a state key and a property name the suite has never seen (acc, gain_i), in a folder of its own:
    its entry alone (no edit of the suite) is parsed, seeded and judged; the gain 1 ulp off fails spec_agreement."""
    text = (ROOT / "docs" / "examples" / "log_pi_model.py").read_text(encoding="utf-8")
    renamed = text.replace('"integral"', '"acc"').replace('p["k_i"]', 'p["gain_i"]').replace('"k_i"', '"gain_i"')
    assert renamed.count("acc") >= 3 and "gain_i" in renamed
    mine = _own_rule(tmp_path, renamed)
    mine.write_text(mine.read_text(encoding="utf-8").replace("[pi.state.integral]", "[pi.state.acc]")
                    .replace("\nk_i = {", "\ngain_i = {"), encoding="utf-8")
    c = load(mine)
    entry = c.controller("pi")
    assert entry.stateful and entry.rule == "pi" and [s.name for s in entry.state] == ["acc"] and entry.has("gain_i")
    assert set(applicable(entry)).isdisjoint(RATE_ROWS)
    v = _verdict(c, "pi", c.source("pi"), host)
    assert v.ok, [(f.key, f.measured) for f in v.failed]
    k_i = _define(KERNEL.read_text(encoding="utf-8"), "K_I")
    v = _verdict(c, "pi", c.source("pi").with_defines(K_I=_one_ulp_up(k_i)), host)
    assert {f.key for f in v.failed} == {"spec_agreement"}


def test_a_new_kind_in_the_registry_alone_is_a_rule_of_the_suites_own(tmp_path, host, monkeypatch):
    """One entry in repro.core.stateful.KINDS (here the example's model) is all a stateful kind of the suite's own
    needs: an entry naming it (no model) is parsed, its state required, and judged."""
    kind = stateful.load_model(ROOT / "docs" / "examples" / "log_pi_model.py")
    monkeypatch.setitem(stateful.KINDS, "pi_builtin", replace(kind, path=None))
    mine = tmp_path / "mine.toml"
    text = EXAMPLE.read_text(encoding="utf-8").replace('rule = "log_pi"', 'rule = "pi_builtin"')
    mine.write_text(text.replace('model = "docs/examples/log_pi_model.py"\n', ""), encoding="utf-8")
    c = load(mine)
    assert c.controller("log_pi").model is None and c.controller("log_pi").stateful
    v = _verdict(c, "log_pi", c.source("log_pi"), host)
    assert v.ok, [(f.key, f.measured) for f in v.failed]
    text = mine.read_text(encoding="utf-8")
    mine.write_text(text[:text.index("[log_pi.state.integral]")], encoding="utf-8")  # its state undeclared
    with pytest.raises(SuiteError, match=r"rule 'pi_builtin' keeps integral: declare \[log_pi.state.integral\]"):
        load(mine)
