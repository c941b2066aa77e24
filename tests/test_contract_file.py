"""The contract file is checked (an unknown table, key or field is an error naming its file and line) and a
user's own file (``--contracts FILE``, whole or ``base = …`` plus what differs) is judged against."""

from __future__ import annotations

import re

import pytest

from analysis.cli import gate, replay
from repro.core.contract import CONTRACTS, load
from repro.core.errors import SuiteError
from repro.core.paths import ROOT

TEXT = CONTRACTS.read_text(encoding="utf-8")


def _line_of(text: str, needle: str) -> int:
    return text.splitlines().index(needle) + 1


#: (what is replaced, by what, the line that must be named): the typos issue 33 names, and their kin.
TYPOS = [
    ("sentinel = 0x7fc0dead  # a quiet NaN with a payload: any stray write is visible",
     "sentinel = 0x7fc0dead\nintegral = 492", "integral = 492"),
    ('symbol = "rl_q_distill_lambda_controller"\nseed_lambda = { value = 0.1,',
     'symbol = "rl_q_distill_lambda_controller"\nstate_slotz = [492]\nseed_lambda = { value = 0.1,', "state_slotz = [492]"),
    ("[guards]", "[gaurds]", "[gaurds]"),
    ("[ziegler.nonfinite]", "[ziegler.nonfinit]", "[ziegler.nonfinit]"),
]


@pytest.mark.parametrize(("old", "new", "named"), TYPOS, ids=["slots_key", "entry_key", "table", "subtable"])
def test_an_unknown_key_or_table_is_an_error_naming_its_line(tmp_path, old, new, named):
    assert TEXT.count(old) == 1, old
    text = TEXT.replace(old, new)
    bad = tmp_path / "contracts.toml"
    bad.write_text(text, encoding="utf-8")
    with pytest.raises(SuiteError) as err:
        load(bad)
    assert str(err.value).startswith(f"{bad}:{_line_of(text, named)}: unknown"), err.value
    assert "\n" not in str(err.value)


def test_a_typo_inside_a_property_or_release_is_an_error(tmp_path):
    bad = tmp_path / "c.toml"
    for old, new, word in (("floor = { value = 0.05,", "floor = { valeu = 0.05, value = 0.05,", "valeu"),
                           ('release = { project = "joschu/modular_rl",',
                            'release = { projet = "x", project = "joschu/modular_rl",', "projet"),
                           ('horizon = { value = 10000.0,', 'horizn = { value = 10000.0,', "horizn")):
        text = TEXT.replace(old, new, 1)
        bad.write_text(text, encoding="utf-8")
        with pytest.raises(SuiteError, match=rf":{_line_of(text, next(line for line in text.splitlines() if word in line))}: "
                           rf"unknown .*'{word}'"):
            load(bad)


def test_the_gate_says_the_typo_in_one_line_and_exits_2(tmp_path, capsys):
    bad = tmp_path / "mine.toml"
    bad.write_text(TEXT.replace("[guards]", "[guards]\nstrict = true"), encoding="utf-8")
    assert gate.main(["--contracts", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert re.fullmatch(rf"gate: error: {re.escape(str(bad))}:\d+: unknown key 'strict' in \[guards\] .*", err), err


def test_a_copy_elsewhere_judges_the_same_kernels(tmp_path):
    """Paths inside a contract file are relative to the repository root, wherever the file lies."""
    copy = tmp_path / "deep" / "folder" / "contracts.toml"
    copy.parent.mkdir(parents=True)
    copy.write_text(TEXT, encoding="utf-8")
    mine, tracked = load(copy), load(CONTRACTS)
    assert {n: c.kernel for n, c in mine.controllers.items()} == {n: c.kernel for n, c in tracked.controllers.items()}
    assert all(c.kernel.is_relative_to(ROOT) and c.kernel.is_file() for c in mine.controllers.values())


def test_a_base_file_plus_what_differs(tmp_path):
    """``base = …``: the user's tables replace the base's of the same name, whole; new entries are added; each
    entry's lines are its own file's."""
    mine = tmp_path / "mine.toml"
    mine.write_text('base = "kernels/contracts.toml"\n\n[fixed]\nkernel = "kernels/rl_q_distill_lambda_controller.cu"\n'
                    'symbol = "rl_q_distill_lambda_controller"\nseed_lambda = { value = 0.1, doc = "x" }\n'
                    'floor = { value = 0.06, doc = "mine" }\nceiling = { value = 1.0, doc = "x" }\n'
                    'ramp = { value = 1.2, rtol = 1e-6, doc = "x" }\ndecay = { value = 0.998, rtol = 1e-6, doc = "x" }\n'
                    'tolerance = { value = 3.0, doc = "x" }\n', encoding="utf-8")
    c, tracked = load(mine), load(CONTRACTS)
    assert set(c.controllers) == set(tracked.controllers)
    assert (c.controller("fixed").value("floor"), c.controller("fixed")["floor"].line) == (0.06, 7)
    assert c.controller("fixed").file == mine and c.controller("original").file == CONTRACTS
    assert c.controller("original") .props == tracked.controller("original").props
    assert not c.controller("fixed").has("steps_to_double")  # replaced whole, not merged
    assert c.slots == tracked.slots


@pytest.mark.slow  # the gate's whole command (3.7 s on 2 cores)
def test_the_gate_judges_against_the_users_file_and_names_its_line(tmp_path, capsys):
    """The fixed kernel against a copy whose floor is 0.06: the floor row fails naming the copy's line; the tracked
    file is left as it is."""
    before = CONTRACTS.read_bytes()
    mine = tmp_path / "mine.toml"
    text = TEXT.replace('floor = { value = 0.05, doc = "MIN_LAMBDA', 'floor = { value = 0.06, doc = "MIN_LAMBDA')
    mine.write_text(text, encoding="utf-8")
    assert gate.main(["--contracts", str(mine)]) == 1
    out = capsys.readouterr().out
    line = _line_of(text, next(x for x in text.splitlines() if x.startswith("floor = { value = 0.06")))
    assert f"{mine}:{line}" in out, out
    assert CONTRACTS.read_bytes() == before
    # and nothing measured under the user's values is reused for the tracked entry of the same name
    from analysis.cli.evaluate import evaluate
    from repro.backends import get_backend

    tracked = load(CONTRACTS)
    verdict = evaluate(tracked.source("fixed"), "fixed", get_backend("host"), tracked, coverage=False)
    assert [f.key for f in verdict.findings if not f.ok] == []


def test_replay_reads_the_chosen_file(tmp_path, capsys):
    mine = tmp_path / "mine.toml"
    mine.write_text(TEXT.replace("[fixed]", "[fixd]"), encoding="utf-8")
    trace = tmp_path / "t.csv"
    trace.write_text("kl,target\n0.02,0.01\n", encoding="utf-8")
    assert replay.main([str(trace), "--contracts", str(mine)]) == 2
    assert "fixed" in capsys.readouterr().err


# --- a stateful rule of one's own: the spec model a contract file names (docs/examples/log_pi_model.py) --------------

EXAMPLE = ROOT / "docs" / "examples" / "log_pi.toml"
MODEL = ROOT / "docs" / "examples" / "log_pi_model.py"


def _own(tmp_path, model_text: str | None, rule: str = "pi", model_line: str | None = None):
    """The example's contract in ``tmp_path`` with its rule renamed ``rule`` and its model ``model_text`` (None:
    the model file left unwritten); ``model_line`` replaces the entry's ``model = …`` line."""
    model = tmp_path / "pi_model.py"
    if model_text is not None:
        model.write_text(model_text, encoding="utf-8")
    text = EXAMPLE.read_text(encoding="utf-8").replace('rule = "log_pi"', f'rule = "{rule}"')
    text = text.replace('model = "docs/examples/log_pi_model.py"',
                        f'model = "{model}"' if model_line is None else model_line)
    mine = tmp_path / "mine.toml"
    mine.write_text(text, encoding="utf-8")
    return mine, model, text


def _gate_error(mine, capsys) -> str:
    assert gate.main([str(ROOT / "docs" / "examples" / "log_pi.cu"), "--contracts", str(mine), "--backend", "host"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


GOOD = MODEL.read_text(encoding="utf-8")
#: (a fault of the model or of the entry that names it, the model's text, the entry's model line, what the error says
#: after "gate: error: ": {mine} the contract file, {model} the model file, {line} the contract's model line)
MODEL_FAULTS = [
    ("rule_of_no_kind", GOOD, "", r"{mine}:{rule_line}: \[log_pi\] rule 'pi' is not one of .*model = \"PATH.py\".*"),
    ("missing", None, None, r"{mine}:{line}: \[log_pi\] spec model file not found: {model}"),
    ("not_python", GOOD, 'model = "docs/examples/log_pi.cu"', r"{mine}:{line}: \[log_pi\] model names .*PATH.py.*"),
    ("lacks_step", GOOD.replace("def step(", "def stepp("), None, r"{mine}:{line}: \[log_pi\] {model}: .* lacks step"),
    ("signature", GOOD.replace("def step(p, lam, state, kl, target)", "def step(p, lam, state)"), None,
     r"{mine}:{line}: \[log_pi\] {model}: step takes \(p, lam, state, kl, target\), not step\(p, lam, state\)"),
    ("raises_on_load", GOOD.replace("F32 = np.float32", "F32 = np.float32\n1 / 0"), None,
     r"{mine}:{line}: \[log_pi\] {model}:{load_line}: the spec model raised ZeroDivisionError: .* while loading"),
    ("syntax", GOOD.replace("def step(p,", "def step(p,,"), None,
     r"{mine}:{line}: \[log_pi\] {model}:{step_line}: the spec model raised SyntaxError: .*"),
    ("state_undeclared", GOOD.replace('STATE = ("integral",)', 'STATE = ("integral", "derivative")'), None,
     r"{mine}:{rule_line}: \[log_pi\] rule 'pi' keeps integral, derivative: declare \[log_pi.state.derivative\]"),
    ("raises_on_step", GOOD.replace("    ok = (kl > 0)", "    assert lam.size < 2, 'one run only'\n    ok = (kl > 0)"),
     None, r"{model}:{step_body}: the spec model raised AssertionError: one run only at step 0"),
    ("returns_double", GOOD.replace("return np.where(ok, new, lam).astype(F32),", "return np.where(ok, new, lam).astype(float),"),
     None, r"{model}: step returned λ as float64 \[\d+\]: float32 \[\d+\] \(one value per run\) expected"),
]


@pytest.mark.parametrize(("model_text", "model_line", "says"), [f[1:] for f in MODEL_FAULTS], ids=[f[0] for f in MODEL_FAULTS])
def test_a_fault_of_a_spec_model_of_ones_own_is_one_line_exit_2_naming_its_file(tmp_path, capsys, model_text,
                                                                                 model_line, says):
    mine, model, text = _own(tmp_path, model_text, model_line=model_line)  # model_line "": the rule named, no model
    lines = text.splitlines()
    source = (model_text or "").splitlines()
    at = {"mine": re.escape(str(mine)), "model": re.escape(str(model)),
          "line": next((i for i, x in enumerate(lines, 1) if x.startswith("model = ")), 0),
          "rule_line": next(i for i, x in enumerate(lines, 1) if x.startswith("rule = ")),
          "load_line": next((i for i, x in enumerate(source, 1) if x == "1 / 0"), 0),
          "step_line": next((i for i, x in enumerate(source, 1) if x.startswith("def step(")), 0),
          "step_body": next((i for i, x in enumerate(source, 1) if "assert lam.size" in x), 0)}
    err = _gate_error(mine, capsys)
    assert re.fullmatch("gate: error: " + says.format(**at), err), err
