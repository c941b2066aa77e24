"""Steps per second of the deep loop (pytest-benchmark): 64, 256, 1024 runs (and 4096, the study's size), eager
against the step captured in a CUDA graph. GPU only; timing is ``tox -e bench``'s job, the suite runs it once."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the deep study needs PyTorch (pip install --group deep)")

from repro.backends import get_backend  # noqa: E402
from repro.learning.deep.loop import LoopConfig  # noqa: E402
from repro.learning.deep.study import small_loop  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")]

STEPS = 50  # steps per timed round


@pytest.mark.parametrize("runs", [64, 256, 1024, 4096])
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_steps_per_second(benchmark, contract, runs, graph):
    cfg = LoopConfig(steps=10**6, replay=20000)
    loop = small_loop(get_backend("cupy"), contract, ["original", "fixed"], runs // 2, cfg, device="cuda", trace=False)
    if graph:
        loop.capture()
    else:
        loop.advance(3)

    def steps():
        loop.advance(STEPS)
        torch.cuda.synchronize()

    before = int(loop.t)
    benchmark.pedantic(steps, rounds=5, warmup_rounds=1)
    if benchmark.stats is None:  # --benchmark-disable (the GPU suite): one untimed round, which must still step
        assert int(loop.t) == before + STEPS
        return
    mean = benchmark.stats.stats.mean
    benchmark.extra_info.update(runs=runs, graph=graph, steps_per_round=STEPS, steps_per_s=STEPS / mean,
                                run_steps_per_s=runs * STEPS / mean)
