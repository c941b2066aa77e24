"""Float64 results kept as evidence give the same bits whichever SIMD code NumPy picks for this CPU.

NumPy's float64 exp/log/log10 are SIMD code on AVX-512 CPUs and glibc's elsewhere, differing in the last bit:
a committed study JSON made on one CI machine failed its bit-for-bit test on another, and a toy run's verdict
moved. ``repro.core.libm`` and the host backend's ``math`` are glibc's; the last test runs the affected
computations again with NumPy's SIMD dispatch turned off (``NPY_DISABLE_CPU_FEATURES``) and compares the bits.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from repro.core import libm
from repro.core.paths import ROOT

SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 5e-324, 1e-310, 709.8, 710.0, -746.0, -745.0, 1.0])


def _c(f, v: float) -> float:
    """C's answer: Python's math raises where C returns ±inf or NaN."""
    try:
        return f(v)
    except OverflowError:
        return math.inf
    except ValueError:
        return -math.inf if v == 0 else math.nan


def values(n: int = 20_000) -> np.ndarray:
    rng = np.random.default_rng(7)
    return np.concatenate([SPECIALS, rng.standard_normal(n) * 40, np.exp(rng.uniform(-700, 700, n))])


@pytest.mark.parametrize("name", ["exp", "log", "log10"])
def test_libm_is_math_element_by_element(name):
    x = values()
    got = getattr(libm, name)(x)
    want = np.array([_c(getattr(math, name), float(v)) for v in x])
    assert got.dtype == np.float64 and got.shape == x.shape
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint64), want[~nan].view(np.uint64))


def test_libm_keeps_shape():
    x = values(50).reshape(-1)[:60].reshape(3, 4, 5)
    assert libm.exp(x).shape == (3, 4, 5) and libm.log10(x[:, ::2]).shape == (3, 2, 5)


@pytest.mark.parametrize("start, stop, num", [(1e-4, 0.9, 21), (1e-3, 1.0, 13), (0.1, 10.0, 400), (2.0, 2.0, 1)])
def test_geomspace_is_numpys_to_the_last_bit_with_exact_ends(start, stop, num):
    got, ref = libm.geomspace(start, stop, num), np.geomspace(start, stop, num)
    assert got[0] == start and got[-1] == (stop if num > 1 else start)
    assert np.all(np.abs(got.view(np.int64) - ref.view(np.int64)) <= 1), "within one ulp of NumPy's"
    assert np.all(np.diff(got) >= 0)


def test_host_math_is_glibc_bit_for_bit(host):
    x = values()
    for name in ("exp", "log"):
        got, want = getattr(host.math, name)(x), getattr(libm, name)(x)
        nan = np.isnan(want)  # C's log(-1) is −NaN, Python's NaN has no sign: NaN against NaN
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(got[~nan].view(np.uint64), want[~nan].view(np.uint64)), name
    strided = x[: 2 * 1000].reshape(1000, 2)[:, 1]
    assert np.array_equal(host.math.exp(strided), libm.exp(strided), equal_nan=True)


_RUN = """
import sys
import numpy as np
from repro.backends import get_backend
from repro.core import libm
from repro.core.contract import CONTRACTS, load
from repro.toy import Toy, run_toy
from repro.toy.designs import compile_subject

backend, contract = get_backend("host"), load(CONTRACTS)
subjects = [compile_subject(backend, contract.source(n), contract.slots, contract.controller(n).value("seed_lambda"))
            for n in ("original", "fixed", "ziegler")]
grid = {"actor_lr": np.array([1.0, 0.25]), "kl_ema_rate": np.array([0.01, 0.03]), "kl_target": np.array([0.5, 2.0])}
out = {}
for i, b in enumerate(run_toy(backend, subjects, Toy(), seeds=20, grid=grid)):
    for k in ("lambda_min", "lambda_final", "q_pi_agree_min", "log10_q_pi_agree_min", "q_pi_agree_final"):
        out[f"{i}_{k}"] = getattr(b, k)
x = np.random.default_rng(3).uniform(1e-30, 1e3, 4096)
out.update(log10=libm.log10(x), log=libm.log(x), exp=libm.exp(-x), geomspace=libm.geomspace(1e-4, 0.9, 21))
np.savez(sys.argv[1], **out)
"""


def _dispatched() -> list[str]:
    """The SIMD extensions NumPy dispatches to on this CPU (beyond its baseline)."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # NumPy 1.x
        from numpy.core import _multiarray_umath as umath
    return [f for f in umath.__cpu_dispatch__ if umath.__cpu_features__.get(f)]


@pytest.mark.slow  # about 5 s on 2 cores: two processes run the toy on 2 grid points × 20 seeds
def test_toy_and_summaries_give_the_same_bits_without_numpys_simd_dispatch(tmp_path):
    features = _dispatched()
    if not features:
        pytest.skip("NumPy dispatches no SIMD extension on this CPU: nothing to turn off")
    runs = {}
    for label, extra in (("dispatch", {}), ("baseline", {"NPY_DISABLE_CPU_FEATURES": " ".join(features)})):
        path = tmp_path / f"{label}.npz"
        env = {**os.environ, **extra, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-c", _RUN, str(path)], env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        runs[label] = dict(np.load(path))
    a, b = runs["dispatch"], runs["baseline"]
    assert a.keys() == b.keys()
    differ = [k for k in a if not np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8))]
    assert not differ, f"bits differ with NumPy's SIMD dispatch off ({' '.join(features)}): {differ}"
