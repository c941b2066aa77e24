"""What a kernel behaves as, measured (repro.runners.inference), and where the diagnosis points (analysis.judge.diagnosis).

The in-repo controllers must be measured as their contracts document; single changes to the
fixed kernel must be measured as exactly that change, and located on the source line that makes it.
"""

from __future__ import annotations

import pytest

from analysis.judge.diagnosis import differences, locate
from repro.core.f32 import same
from repro.runners.inference import infer


@pytest.mark.parametrize("name", ["fixed", "original"])
def test_the_controllers_behave_as_their_contracts(contract, backend, name):
    ctrl = contract.controller(name)
    b = infer(backend.compile(contract.source(name), contract.slots), ctrl)
    s = contract.slots
    assert (b.reads, b.writes, b.kl_slot, b.target_slot) == ((s.lambda_, s.kl, s.target), (), s.kl, s.target)
    assert same(b.floor, ctrl.value("floor")) and same(b.ceiling, ctrl.value("ceiling"))
    assert b.ramp_exact and same(b.ramp, ctrl.value("ramp"))
    assert b.decay_exact and same(b.decay, ctrl.value("decay"))
    for edge in (b.upper, b.lower):
        assert same(edge.factor, ctrl.value("tolerance")) and not edge.inclusive
    assert differences(b, ctrl, contract, []) == []


# name -> (edit of the fixed kernel, what the measurement must then say)
CHANGES = {
    "ramp_1.25": (("#define LAMBDA_RAMP_RATE 1.2f", "#define LAMBDA_RAMP_RATE 1.25f"), ("ramp", 1.25)),
    "tolerance_2.5": (("#define KL_TOLERANCE 3.0f", "#define KL_TOLERANCE 2.5f"), ("upper", 2.5)),
    "ceiling_0.9": (("#define MAX_LAMBDA 1.0f", "#define MAX_LAMBDA 0.9f"), ("ceiling", 0.9)),
    "decay_le": (("kl_observed < lower", "kl_observed <= lower"), ("lower_inclusive", True)),
    "kl_from_489": (("#define RL_Q_DISTILL_KL_EMA_INDEX 488", "#define RL_Q_DISTILL_KL_EMA_INDEX 489"), ("kl", 489)),
    "writes_487": (("isv[RL_Q_DISTILL_LAMBDA_INDEX] = lambda;",
                    "isv[RL_Q_DISTILL_LAMBDA_INDEX] = lambda;\n    isv[487] = lambda;"), ("writes", 487)),
    "no_floor": (("fmaxf(MIN_LAMBDA, lambda * LAMBDA_DECAY_RATE)", "lambda * LAMBDA_DECAY_RATE"), ("floor", None)),
}


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_one_change_is_measured_as_that_change(contract, host, name):
    (old, new), (what, value) = CHANGES[name]
    ctrl = contract.controller("fixed")
    source = contract.source("fixed").with_edit(old, new, name)
    b = infer(host.compile(source, contract.slots), ctrl)
    diffs = differences(b, ctrl, contract, [])
    if what == "lower_inclusive":
        assert b.lower.inclusive and not b.upper.inclusive
        (d,) = diffs
        assert (d.kind, d.name) == ("edge", "lower")
    elif what == "kl":
        assert b.kl_slot == value and b.target_slot == contract.slots.target
        (d,) = diffs
        assert (d.kind, d.name, d.measured) == ("slot", "kl", value)
    elif what == "writes":
        assert b.writes == (value,)
        (d,) = diffs
        assert (d.kind, d.name) == ("slot", "writes")
    elif what == "upper":
        assert same(b.upper.factor, value) and same(b.lower.factor, value)
        assert {d.name for d in diffs} == {"upper", "lower"}
    elif value is None:
        assert getattr(b, what) is None
        (d,) = diffs
        assert d.name == what and d.measured is None
    else:
        assert same(getattr(b, what), value)
        (d,) = diffs
        assert d.name == what
    if diffs[0].kind != "slot" or diffs[0].name != "writes":
        line = locate(source.text, diffs[0])
        if value is not None:
            assert line and new.splitlines()[0].strip() in source.text.splitlines()[line - 1], (name, line)
