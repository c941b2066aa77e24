"""The contract file is checked (an unknown table, key or field is an error naming its file and line) and a
user's own file (``--contracts FILE``, whole or ``base = …`` plus what differs) is judged against."""

from __future__ import annotations

import re

import pytest

from analysis.cli import gate, replay
from repro.core import contract as contract_module
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
                           ('release = { project = "joschu/modular_rl",', 'release = { projet = "x", project = "joschu/modular_rl",', "projet"),
                           ('horizon = { value = 10000.0,', 'horizn = { value = 10000.0,', "horizn")):
        text = TEXT.replace(old, new, 1)
        bad.write_text(text, encoding="utf-8")
        with pytest.raises(SuiteError, match=rf":{_line_of(text, next(l for l in text.splitlines() if word in l))}: "
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
    mine, tracked = load(copy), load()
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
    c, tracked = load(mine), load()
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
    assert contract_module.current() == CONTRACTS  # the choice ended with the command


def test_replay_reads_the_chosen_file(tmp_path, capsys):
    mine = tmp_path / "mine.toml"
    mine.write_text(TEXT.replace("[fixed]", "[fixd]"), encoding="utf-8")
    trace = tmp_path / "t.csv"
    trace.write_text("kl,target\n0.02,0.01\n", encoding="utf-8")
    assert replay.main([str(trace), "--contracts", str(mine)]) == 2
    assert "fixed" in capsys.readouterr().err
