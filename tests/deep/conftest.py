"""Fixtures of the deep loop's tests (issue 34). PyTorch is optional (the ``deep`` dependency group): nothing here
imports it at module level; each test module skips itself, with the reason, where it does not import."""

from __future__ import annotations

import numpy as np
import pytest

from repro.backends import get_backend


@pytest.fixture(scope="session")
def small():
    """Small enough for the CPU suite: 400 steps, warm-up 200, 16-unit nets."""
    from repro.learning.deep.loop import LoopConfig

    return LoopConfig(steps=400, eval_every=100, warmup=200, replay=400, batch=16, probe=32, hidden=16, pi_hidden=16)


@pytest.fixture(scope="session")
def host_run(small, contract):
    """One small loop on the CPU through the host backend, per-row launches, with its per-step traces: 2
    controllers × 3 seeds, a resume event at step 200."""
    import torch

    from repro.learning.deep.study import small_loop

    torch.set_num_threads(1)
    loop = small_loop(get_backend("host"), contract, ["original", "fixed"], 3, small, mode="per_row", resume=200)
    out = loop.run()
    return loop, out


@pytest.fixture(scope="session")
def replay_host(contract):
    """``f(names, seeds, kl)``: the host backend's looped harness over a KL trace ``[T, S]`` (rows: ``names`` ×
    ``seeds``, arm-major), each row seeded with its controller's λ and the target 0.1; λ ``[T, S]``."""
    return lambda names, seeds, kl, target=0.1: _replay_host(contract, names, seeds, kl, target)


def _replay_host(contract, names, seeds, kl, target):
    from repro.learning.controllers import source_and_seed

    be = get_backend("host")
    lam = []
    for k, name in enumerate(names):
        source, seed_lambda = source_and_seed(name, contract)
        kernel = be.compile(source, contract.slots)
        cols = kl[:, k * seeds:(k + 1) * seeds]
        isv0 = np.zeros((seeds, contract.slots.isv_len), np.float32)
        isv0[:, contract.slots.lambda_] = np.float32(seed_lambda)
        out, _ = kernel.run_looped(isv0, cols, np.full_like(cols, np.float32(target)))
        lam.append(out)
    return np.concatenate(lam, axis=1)
