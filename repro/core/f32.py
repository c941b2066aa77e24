"""Float32 as the kernels hold it: the type, its bit patterns, comparison bit for bit, and traces as columns."""

from __future__ import annotations

import numpy as np

F32 = np.float32


def bits(a) -> np.ndarray:
    """The uint32 bit patterns of ``a`` as float32."""
    return np.asarray(a, dtype=F32).view(np.uint32)


def equal_bits(a, b) -> np.ndarray:
    """Elementwise: whether ``a`` and ``b`` hold the same float32 bits (NaN payloads and −0 told apart)."""
    return bits(a) == bits(b)


def differs_beyond_nan(a, b) -> np.ndarray:
    """Elementwise: where float32 arrays differ in their bits, a NaN against a NaN excepted: arithmetic on a NaN
    returns the GPU's canonical NaN but the CPU's input NaN (the peers' λ·2 with λ = NaN), and neither is the
    rule's choice."""
    a, b = np.asarray(a, dtype=F32), np.asarray(b, dtype=F32)
    return ~equal_bits(a, b) & ~(np.isnan(a) & np.isnan(b))


def same(a, b) -> bool:
    """Whether float32 arrays (or scalars) are equal bit for bit, shapes included."""
    return bool(np.array_equal(bits(a), bits(b)))


def columns(traces: list[np.ndarray]) -> np.ndarray:
    """Float32 ``[T, S]`` with trace j (``[T_j]``) in column j, each padded to the longest with its own last
    value: the step-major layout of many runs at once, whose steps past ``T_j`` are then dropped (an empty
    trace's column is left unwritten)."""
    out = np.empty((max(len(t) for t in traces), len(traces)), dtype=F32)
    for j, t in enumerate(traces):
        out[: len(t), j] = t
        if len(t):
            out[len(t) :, j] = t[-1]
    return out
