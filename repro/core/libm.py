"""glibc's exp, log, log10 and pow on float64 arrays, one element at a time: the same bits on every x86-64 machine.

NumPy's own float64 ``exp``/``log``/``log10``/``power`` are SIMD code where the CPU has AVX-512 (derived from
Intel's SVML) and glibc's scalar functions elsewhere. The two differ in the last bit for part of the inputs
(measured on an AVX-512 Xeon, 10⁶ values: log10 19 %, exp 4.6 %, log 0.2 %), so a float64 result kept as
evidence (a study's JSON, the report's data) made on one CI machine did not reproduce bit for bit on another.
These go through Python's ``math``, which is glibc's. For summaries and small arrays: a Python call per element.
"""

from __future__ import annotations

import math

import numpy as np


def _exp(v: float) -> float:
    try:
        return math.exp(v)
    except OverflowError:  # C's exp gives +inf past the largest double
        return math.inf


def _log(v: float) -> float:
    # C's log: -inf at 0, NaN below 0 (and for NaN); Python's math raises at 0 and below
    return math.log(v) if v > 0 else -math.inf if v == 0 else math.nan


def _log10(v: float) -> float:
    return math.log10(v) if v > 0 else -math.inf if v == 0 else math.nan


def _each(f, x) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    return np.fromiter((f(float(v)) for v in a.ravel()), dtype=np.float64, count=a.size).reshape(a.shape)


def exp(x) -> np.ndarray:
    """e**x per element, float64 (+inf past the largest double, as C's exp)."""
    return _each(_exp, x)


def log(x) -> np.ndarray:
    """Natural log per element, float64 (−inf at 0, NaN below 0, as C's log)."""
    return _each(_log, x)


def log10(x) -> np.ndarray:
    """Base-10 log per element, float64 (−inf at 0, NaN below 0, as C's log10)."""
    return _each(_log10, x)


def geomspace(start: float, stop: float, num: int) -> np.ndarray:
    """``np.geomspace(start, stop, num)`` (float64, both ends included and exact) with glibc's log10 and pow in
    place of NumPy's: NumPy's own arithmetic, 10 ** linspace(log10 start, log10 stop)."""
    out = np.array([math.pow(10.0, v) for v in np.linspace(math.log10(start), math.log10(stop), num)])
    if num > 0:
        out[0] = start
    if num > 1:
        out[-1] = stop
    return out
