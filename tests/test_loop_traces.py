"""The deep loop's recorded KL traces as gate scenarios (torch-free): the host build of each unmodified kernel
replays the trace recorded on the H200 (cupy, inside a CUDA graph) to the recorded λ bits, and the gate's
catalogue groups carry them for every controller."""

from __future__ import annotations

import numpy as np
import pytest

from repro.backends import get_backend
from repro.runners import campaign, loop_traces


def test_traces_are_there():
    rec = loop_traces.recorded()
    assert {k for k, _ in rec} == {"original", "fixed"}
    assert {w for _, w in rec} == set(loop_traces.WINDOWS)


@pytest.mark.parametrize("kernel", ["original", "fixed"])
@pytest.mark.parametrize("window", sorted(loop_traces.WINDOWS))
def test_host_replays_the_recorded_lambda_bits(contract, kernel, window):
    """λ the GPU loop recorded = the host build of the same .cu over the same KL, bit for bit."""
    controller = contract.controller(kernel)
    sc = next(s for s in loop_traces.scenarios(controller) if s.name == f"deep_{kernel}_{window}")
    rec = loop_traces.recorded()[(kernel, window)]
    compiled = get_backend("host").compile(contract.source(kernel), contract.slots)
    isv0 = np.zeros((1, contract.slots.isv_len), np.float32)
    isv0[0, contract.slots.lambda_] = sc.lambda0
    lam, _ = compiled.run_looped(isv0, sc.kl[:, None], sc.target[:, None])
    span = rec["lambda"][loop_traces.SPANS[window]]
    want = span if window == "cold" else span[1:]
    np.testing.assert_array_equal(lam[:, 0].view(np.uint32), want.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("name", ["fixed", "original", "ppo_paper"])
def test_gate_groups_carry_them(contract, name):
    """The catalogue and per-step groups hold one deep-loop scenario per recorded (kernel, window)."""
    controller = contract.controller(name)
    groups = campaign.scenario_groups(controller)
    for group in ("catalogue", "per_step"):
        got = [s.name for s in groups[group][0] if s.family == "deep_loop"]
        assert len(got) == len(loop_traces.recorded()) == 6


def test_a_new_recording_alone_becomes_a_scenario(contract, tmp_path):
    """The registry is the file: one more (kernel, window) in it is one more scenario, nothing else edited."""
    path = tmp_path / "t.npz"
    kl = np.full(700, 0.2, np.float32)
    np.savez(path, **{"fixed__cold__kl": kl, "fixed__cold__lambda": kl, "fixed__cold__start": np.int64(0)})
    got = loop_traces.scenarios(contract.controller("fixed"), path)
    assert [s.name for s in got] == ["deep_fixed_cold"] and got[0].steps == loop_traces.SPANS["cold"].stop
