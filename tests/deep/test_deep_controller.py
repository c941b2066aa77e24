"""The controller in the deep loop (CPU, host backend): λ is the kernel's, row by row, on the loop's own KL."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the deep study needs PyTorch (pip install --group deep)")

from repro.backends import get_backend  # noqa: E402
from repro.learning.controllers import source_and_seed  # noqa: E402
from repro.learning.deep.controller import ArmRows, Controllers, new_isv  # noqa: E402

NAMES, SEEDS = ["original", "fixed"], 3


def bits(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def test_loop_lambda_is_the_kernel_on_its_kl_trace(host_run, replay_host):
    """The λ the loop read each step equals, bit for bit, the host harness replaying the loop's recorded KL EMA."""
    loop, out = host_run
    kl, lam = out["trace_kl"], out["trace_lambda"]
    assert kl.shape == (loop.cfg.steps, len(NAMES) * SEEDS)
    assert (kl > 0).any() and (kl[200] < kl[199]).all(), "the resume event at step 200 restarts the EMA"
    np.testing.assert_array_equal(bits(lam), bits(replay_host(NAMES, SEEDS, kl)))
    assert len({float(x) for x in lam[-1]}) > 1, "λ moved differently across rows"


def test_batched_harness_gives_the_per_row_bits(host_run, contract):
    """The same KL trace through the looped harness's batched step (all rows of an arm in one call) on a CPU
    tensor's memory: λ's bits equal the per-row launches the loop made."""
    loop, out = host_run
    be, slots = get_backend("host"), contract.slots
    isv = new_isv(len(NAMES) * SEEDS, slots, "cpu")
    arms = []
    for k, name in enumerate(NAMES):
        source, lam0 = source_and_seed(name, contract)
        arms.append(ArmRows(name, be.compile(source, slots), k * SEEDS, (k + 1) * SEEDS, lam0))
        isv[k * SEEDS:(k + 1) * SEEDS, slots.lambda_] = np.float32(lam0).item()
    isv[:, slots.target] = np.float32(0.1).item()
    ctl = Controllers(be, isv, arms, slots, mode="batched")
    got = np.empty_like(out["trace_lambda"])
    for t, row in enumerate(out["trace_kl"]):
        isv[:, slots.kl] = torch.from_numpy(row)
        ctl.step()
        got[t] = isv[:, slots.lambda_].numpy()
    np.testing.assert_array_equal(bits(got), bits(out["trace_lambda"]))


def test_the_kernel_writes_lambda_only(host_run, contract):
    """Every ISV slot but λ, KL and target still holds the contract's sentinel after the whole loop."""
    loop, _ = host_run
    s = contract.slots
    rest = np.delete(loop.isv.numpy().view(np.uint32), [s.lambda_, s.kl, s.target], axis=1)
    assert (rest == np.uint32(s.sentinel)).all()


def test_host_launch_needs_the_cpu_tensor(contract):
    from repro.core.errors import SuiteError

    if not torch.cuda.is_available():
        isv = new_isv(2, contract.slots, "cpu")[:, :-1]
        with pytest.raises(SuiteError):
            Controllers(get_backend("host"), isv, [], contract.slots)
