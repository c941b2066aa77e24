"""The deep loop on the GPU: the controller through the suite's cupy backend on torch's stream, inside a CUDA
graph, with no host synchronisation in the step; its λ bits equal the host build's on the same KL trace."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the deep study needs PyTorch (pip install --group deep)")

from repro.backends import get_backend  # noqa: E402
from repro.learning.deep.loop import LoopConfig  # noqa: E402
from repro.learning.deep.study import small_loop  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")]

NAMES, SEEDS = ["original", "fixed", "const:0.05"], 8
CFG = LoopConfig(steps=600, eval_every=100, warmup=300, replay=600, batch=32, probe=64)


def bits(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize("mode", ["per_row", "batched"])
def test_graph_step_without_sync_gives_the_host_bits(mode, replay_host, contract):
    """The whole step (controller included) captured in a CUDA graph and replayed with
    ``torch.cuda.set_sync_debug_mode("error")`` (a synchronising op in the step raises); afterwards the λ the loop
    read each step equals the host build replaying the loop's KL trace, bit for bit."""
    loop = small_loop(get_backend("cupy"), contract, NAMES, SEEDS, CFG, device="cuda", mode=mode, resume=300)
    loop.capture()
    torch.cuda.set_sync_debug_mode("error")
    try:
        loop.advance(CFG.steps - 3)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    kl = loop.trace_kl.cpu().numpy()
    lam = loop.trace_lam.cpu().numpy()
    assert loop.graph is not None
    assert (kl[10:] > 0).all()
    np.testing.assert_array_equal(bits(lam), bits(replay_host(NAMES, SEEDS, kl)))


def test_eager_step_has_no_sync(contract):
    loop = small_loop(get_backend("cupy"), contract, NAMES, SEEDS, CFG, device="cuda", mode="batched")
    loop.advance(2)  # first-use allocations and compilation outside the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        loop.advance(5)
    finally:
        torch.cuda.set_sync_debug_mode("default")
