"""Invariants over Hypothesis-generated KL sequences (any float32, NaN and infinities included)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from repro.core import spec
from repro.core.f32 import F32, bits
from repro.core.isv import new_isv

any_f32 = st.floats(width=32, allow_nan=True, allow_infinity=True)
traces = st.lists(any_f32, min_size=1, max_size=120)
positive = st.floats(min_value=float(F32(1e-30)), max_value=float(F32(1e30)), width=32)


@pytest.fixture(scope="module", params=["fixed", "original"])
def case(request, contract, backend):
    entry = contract.controller(request.param)
    return backend.compile(contract.source(request.param), contract.slots), spec.Rule.of(entry)


def _run(kernel, lam0, kl, target):
    kl = np.asarray(kl, dtype=F32)[:, None]
    tg = np.broadcast_to(np.asarray(target, dtype=F32), kl.shape[:1])[:, None].copy()
    lam, isv = kernel.run_looped(new_isv(kernel.slots, lam0), kl, tg)
    return lam[:, 0], isv


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), kl=traces, target=st.one_of(positive, any_f32))
def test_lambda_stays_within_bounds_and_moves_by_one_rule(case, data, kl, target):
    kernel, rule = case
    lam0 = data.draw(st.floats(min_value=float(rule.floor), max_value=float(rule.ceiling), width=32))
    lam, _ = _run(kernel, lam0, kl, target)
    assert np.all((lam >= rule.floor) & (lam <= rule.ceiling)), "λ left [floor, ceiling]"
    prev = np.concatenate([[F32(lam0)], lam[:-1]])
    with np.errstate(all="ignore"):
        allowed = [prev, prev * rule.ramp, prev * rule.decay,
                   np.full_like(prev, rule.floor), np.full_like(prev, rule.ceiling)]
    ok = np.zeros(lam.shape, dtype=bool)
    for a in allowed:
        ok |= bits(a.astype(F32)) == bits(lam)
    assert ok.all(), f"step {int(np.flatnonzero(~ok)[0]) + 1} multiplied λ by something other than 1, ramp, decay"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lam0=any_f32, kl=traces, target=any_f32)
def test_kernel_equals_spec_on_any_input(case, lam0, kl, target):
    kernel, rule = case
    lam, isv = _run(kernel, lam0, kl, target)
    expected = spec.run(rule, [lam0], np.asarray(kl, dtype=F32)[:, None], F32(target))[:, 0]
    assert np.array_equal(bits(lam), bits(expected))
