"""Float32 as the kernels hold it: the type, its bit patterns, and comparison bit for bit."""

from __future__ import annotations

import numpy as np

F32 = np.float32


def bits(a) -> np.ndarray:
    """The uint32 bit patterns of ``a`` as float32."""
    return np.asarray(a, dtype=F32).view(np.uint32)


def equal_bits(a, b) -> np.ndarray:
    """Elementwise: whether ``a`` and ``b`` hold the same float32 bits (NaN payloads and −0 told apart)."""
    return bits(a) == bits(b)


def same(a, b) -> bool:
    """Whether float32 arrays (or scalars) are equal bit for bit, shapes included."""
    return bool(np.array_equal(bits(a), bits(b)))
