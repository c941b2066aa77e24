"""Bitwise agreement: kernel ⇄ spec model, per-step ⇄ looped, host ⇄ cupy, one thread ⇄ a grid."""

from __future__ import annotations

import numpy as np
import pytest

from repro.core import spec
from repro.core.contract import Contract
from repro.core.f32 import bits
from repro.core.isv import new_isv
from repro.runners.runner import run_scenarios
from repro.runners.scenarios import catalogue
from tests.catalogue import subjects


def parametrize_from_contract(metafunc, contract: Contract) -> None:
    """``controller``: the suite's own controllers (every non-peer entry of the session's ``contract``); with
    ``scenario``: each one's catalogue scenarios (called by the conftest's ``pytest_generate_tests``)."""
    if "controller" not in metafunc.fixturenames:
        return
    if "scenario" in metafunc.fixturenames:
        cases = [(c, s.name) for c in subjects(contract) for s in catalogue(contract.controller(c))]
        metafunc.parametrize("controller, scenario", cases, ids=[f"{c}-{s}" for c, s in cases])
    else:
        metafunc.parametrize("controller", subjects(contract))


@pytest.fixture(scope="session")
def runs(contract):
    """``runs(backend, controller, mode)``: catalogue runs by scenario name, each made once a session."""
    made: dict = {}

    def get(backend, controller: str, mode: str) -> dict:
        key = (controller, backend.name, mode)
        if key not in made:
            kernel = backend.compile(contract.source(controller), contract.slots_of(controller))
            made[key] = {r.scenario.name: r for r in run_scenarios(kernel, catalogue(contract.controller(controller)),
                                                                  mode)}
        return made[key]

    return get


def assert_same_bits(a, b, what):
    a, b = bits(a), bits(b)
    if not np.array_equal(a, b):
        step = int(np.flatnonzero(a != b)[0])
        pytest.fail(f"{what}: first differs at step {step + 1}: {a[step]:#010x} vs {b[step]:#010x}")


def test_kernel_matches_spec(contract, backend, runs, controller, scenario):
    r = runs(backend, controller, "looped")[scenario]
    rule = spec.Rule.of(contract.controller(controller))
    expected = spec.run(rule, [r.scenario.lambda0], r.scenario.kl[:, None], r.scenario.target[:, None])[:, 0]
    assert_same_bits(r.lam, expected, f"{controller}/{scenario}: kernel vs spec")


def test_per_step_matches_looped(backend, runs, controller, scenario):
    looped = runs(backend, controller, "looped")[scenario]
    per_step = runs(backend, controller, "per_step")[scenario]
    assert_same_bits(per_step.lam, looped.lam, f"{controller}/{scenario}: per-step vs looped")
    assert per_step.stray == looped.stray == []


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ("looped", "per_step"))
def test_cupy_matches_host(host, runs, controller, mode):
    from repro.backends import get_backend

    gpu = runs(get_backend("cupy"), controller, mode)
    cpu = runs(host, controller, mode)
    assert gpu.keys() == cpu.keys()
    for name in cpu:
        assert_same_bits(gpu[name].lam, cpu[name].lam, f"{controller}/{name}: cupy vs host ({mode})")


@pytest.mark.gpu
@pytest.mark.parametrize("grid,block", [((1,), (32,)), ((64,), (256,)), ((132,), (1024,))])
def test_grid_launch_matches_one_thread(contract, grid, block):
    """Launched over many threads and blocks, only thread 0 of block 0 acts: same bits as (1,),(1,)."""
    import cupy as cp

    from repro.backends import get_backend

    s = contract.slots
    kernel = get_backend("cupy").compile(contract.source("fixed"), s)
    sc = next(x for x in catalogue(contract.controller("fixed")) if x.name == "lognormal_sigma1.0")
    isv_one = cp.asarray(new_isv(s, sc.lambda0)[0])
    isv_grid = isv_one.copy()
    for t in range(sc.steps):
        for isv in (isv_one, isv_grid):
            isv[s.kl] = float(sc.kl[t])
            isv[s.target] = float(sc.target[t])
        kernel.launch(isv_one)
        kernel.launch(isv_grid, grid=grid, block=block)
    assert_same_bits(cp.asnumpy(isv_grid), cp.asnumpy(isv_one), f"grid {grid}×{block} vs one thread")


def noisy_runs(seed: int, n_runs: int, n_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Step-major log-normal KL ``[T, S]`` around 0.02 (σ = 2, so every branch runs) and seed λs ``[S]``."""
    rng = np.random.default_rng(seed)
    kl = (0.02 * np.exp(2.0 * rng.standard_normal((n_steps, n_runs)))).astype(np.float32)
    return kl, rng.uniform(0.05, 1.0, n_runs).astype(np.float32)


def test_batched_step_matches_per_step(contract, backend):
    """S ISVs advanced by the batched harness equal S separate per-step runs, bit for bit."""
    s = contract.slots
    kernel = backend.compile(contract.source("fixed"), s)
    n_runs, n_steps = 33, 50
    kl, lam0 = noisy_runs(7, n_runs, n_steps)
    xp = backend.xp
    isv = xp.asarray(new_isv(s, lam0))
    batched = np.empty((n_steps, n_runs), dtype=np.float32)
    for t in range(n_steps):
        isv[:, s.kl] = xp.asarray(kl[t])
        isv[:, s.target] = np.float32(0.02)
        kernel.batched_step(isv)
        batched[t] = xp.asnumpy(isv[:, s.lambda_]) if xp is not np else isv[:, s.lambda_]
    for r in range(n_runs):
        lam, _ = kernel.run_per_step(new_isv(s, lam0[r])[0], kl[:, r], np.full(n_steps, 0.02, np.float32))
        assert_same_bits(batched[:, r], lam, f"run {r}: batched vs per-step")


@pytest.mark.gpu
def test_cupy_rawmodule_flushes_subnormals(contract):
    """Why the cupy backend calls NVRTC itself: built through cupy.RawModule (which appends -ftz=true)
    a subnormal KL reads as 0 and trips the guard. Measured: the IEEE build decays λ on KL = 1e-40,
    as the spec model does; the RawModule build leaves λ unchanged.
    """
    from repro.backends import get_backend
    from repro.runners.scenarios import case

    cupy_be = get_backend("cupy")
    src = contract.source("fixed")
    entry = contract.controller("fixed")
    sc = case(entry, "kl=1e-40", steps=1)
    ieee = run_scenarios(cupy_be.compile(src, contract.slots), [sc])[0].lam[0]
    rawmodule = run_scenarios(cupy_be.compile(src, contract.slots, cupy_defaults=True), [sc])[0].lam[0]
    assert bits(ieee) == bits(spec.step(spec.Rule.of(entry), sc.lambda0, sc.kl[0], sc.target[0]))
    assert bits(ieee) != bits(sc.lambda0)
    assert bits(rawmodule) == bits(sc.lambda0), "cupy.RawModule no longer flushes subnormals to zero"


def test_throughput_harness_matches_spec(contract, backend):
    """The benchmark's register-resident, chunk-major harness computes the spec's bits too."""
    from repro.backends.base import chunked, unchunked

    kernel = backend.compile(contract.source("fixed"), contract.slots)
    n_runs, n_steps = 37, 64
    kl, lam0 = noisy_runs(11, n_runs, n_steps)
    target = np.full(n_runs, 0.02, np.float32)
    xp = backend.xp
    out = xp.empty((n_steps // 4, n_runs, 4), dtype=xp.float32)
    kernel.run_private(xp.asarray(lam0), xp.asarray(chunked(kl)), xp.asarray(target), out)
    got = unchunked(out if xp is np else xp.asnumpy(out))
    expected = spec.run(spec.Rule.of(contract.controller("fixed")), lam0, kl, target[None, :])
    assert_same_bits(got, expected, "throughput harness vs spec")


@pytest.mark.gpu
def test_a_worker_loads_the_cubins_the_gate_built_and_never_writes_them(contract, tmp_path, monkeypatch):
    """The gate's process builds the units once and keeps their CUBINs (``check_compiles``); a backend in another
    process (a spawned worker) loads them without NVRTC, with the same bits; a confined process
    (``READ_ONLY_CACHE``, set by the sandbox) builds what it lacks and writes nothing."""
    from repro.backends import cupy_backend
    from repro.backends.base import READ_ONLY_CACHE

    monkeypatch.setenv("RLQ_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(READ_ONLY_CACHE, raising=False)
    source, s = contract.source("fixed"), contract.slots
    cupy_backend.CupyBackend().check_compiles(source, s)
    kept = sorted(p.name for p in (tmp_path / "nvrtc").iterdir())
    assert len(kept) == 4 and all(n.endswith(".cubin") for n in kept), kept  # controller, harness, helpers, grid

    def no_nvrtc(*_args):
        raise AssertionError("NVRTC ran though its CUBIN was kept")

    monkeypatch.setattr(cupy_backend, "_nvrtc_build", no_nvrtc)
    fresh = cupy_backend.CupyBackend().compile(source, s)  # a new backend: nothing loaded in it yet
    sc = catalogue(contract.controller("fixed"))[0]
    lam, _ = fresh.run_per_step(new_isv(s, sc.lambda0)[0], sc.kl, sc.target)
    expected = spec.run(spec.Rule.of(contract.controller("fixed")), [sc.lambda0], sc.kl[:, None], sc.target[:, None])
    assert_same_bits(lam, expected[:, 0], "from the kept CUBINs")

    monkeypatch.undo()
    monkeypatch.setenv("RLQ_CACHE_DIR", str(tmp_path / "confined"))
    monkeypatch.setenv(READ_ONLY_CACHE, "1")
    cupy_backend.CupyBackend().compile(source.with_defines(MIN_LAMBDA=0.06), s)
    assert not (tmp_path / "confined").exists()
