"""Fixtures of the deep loop's tests (issue 34). PyTorch is optional (the ``deep`` dependency group): nothing here
imports it at module level; each test module skips itself, with the reason, where it does not import."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repro.backends import get_backend


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Each test's PyTorch CPU work in one thread: under xdist every worker is a process, and torch's default of a
    thread per core in each put 16 workers × 16 threads on the 16-core GPU machine, where a two-task loop of 200
    steps took over 120 s (6 s on 2 cores with 2 workers)."""
    try:
        import torch
    except ImportError:  # each test module skips itself, with the reason
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


#: ``python -c`` driver of :func:`study_apart`: argv[1] the deep study's map, the rest the command's arguments.
_STUDY_APART = ("import sys; from pathlib import Path; from analysis.cli import deep_study, study; "
                "deep_study.MAP = Path(sys.argv[1]); sys.exit(study.main(sys.argv[2:]))")


@pytest.fixture
def study_apart():
    """``f(map_path, *argv, cwd=ROOT)``: ``study ARGV`` in a new Python process whose deep study reads
    ``map_path`` as its map; the ``subprocess.CompletedProcess``. A command that forks a confined child where
    PyTorch trains needs a process in which autograd never ran: on a machine with a GPU, the first backward
    starts autograd's device threads, and PyTorch refuses backward in any child forked after that ("Unable to
    handle autograd's threading in combination with fork-based multiprocessing"), which an xdist worker that
    ran another deep test first would give."""
    import subprocess
    import sys

    from repro.core.paths import ROOT
    from tests.commands import environment

    def run(map_path, *argv, cwd=ROOT):
        # one PyTorch thread, as in the tests' own process (one_torch_thread): -n auto puts a worker on each core
        return subprocess.run([sys.executable, "-c", _STUDY_APART, str(map_path), *map(str, argv)], cwd=cwd,
                              capture_output=True, text=True, timeout=300, env=environment(cwd, OMP_NUM_THREADS="1"))

    return run


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


#: A search declaration small enough for the CPU suite, up to its [grid]: the loop 200 steps, one task.
TINY_LOOP = """
[study]
name = "exploration_4"
exploratory = true
seed = 7
[loop]
steps = 200
eval_every = 50
warmup = 100
replay = 200
batch = 16
probe = 32
hidden = 16
pi_hidden = 16
gamma = 0.99
lr = 0.001
polyak = 0.005
ema_alpha = 0.01
aux_action = 0
kl_direction = "reverse"
ema_start = "zero"
matmul = "highest"
[tasks."Acrobot-v1"]
region_obs = 4
region_threshold = 1.0
tau_unit = 0.0852
beta = 0.001
"""
#: The declared selection rule's thresholds (issue 42 item 2), as studies/exploration_4.toml gives them.
TINY_SELECTION = """[selection]
min_precondition = 0.5
min_separation = 2.0
min_separated_seeds = 0.8
forward = 3
"""


@pytest.fixture(scope="session")
def tiny_declaration(tmp_path_factory):
    """``f(grid)``: the path of a tiny search declaration (:data:`TINY_LOOP`, the TOML lines ``grid`` as its
    [grid], :data:`TINY_SELECTION`), written once per grid."""
    written = {}

    def write(grid: str) -> Path:
        if grid not in written:
            written[grid] = tmp_path_factory.mktemp("decl") / "tiny.toml"
            written[grid].write_text(TINY_LOOP + "[grid]\n" + grid.strip() + "\n" + TINY_SELECTION)
        return written[grid]

    return write
