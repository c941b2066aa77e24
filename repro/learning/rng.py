"""Counter-based uniforms: ``u(seed, step, stream)`` from a SplitMix64 hash.

Every run's random numbers depend only on its seed, the step and the stream (what they drive), never on
which other runs share the batch or on the backend: integer arithmetic is exact on NumPy and CuPy alike,
so both draw the same bits, and runs of different controllers see common random numbers.
"""

from __future__ import annotations

import numpy as np

#: Streams: one per use, so that no two uses share a draw.
ACTION, ENV, RESET, AUX, REPLAY, FEATURE = 0, 1, 2, 3, 4, 5
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def random_bits(xp, seeds, step: int, stream: int):
    """Uniform uint64 per seed (``seeds``: uint64 array on the device) for one step and stream."""
    key = _mix(seeds * _GOLDEN + np.uint64(stream + 1)) + np.uint64((step * int(_GOLDEN)) % (1 << 64))
    return _mix(key)


def uniform(xp, seeds, step: int, stream: int):
    """Float64 uniforms in [0, 1) (53 random bits each), one per seed."""
    return (random_bits(xp, seeds, step, stream) >> np.uint64(11)).astype(xp.float64) * (1.0 / (1 << 53))


def uniforms(xp, seeds, draws: list[tuple[int, int]]):
    """``[N, len(draws)]`` uniforms, a column per ``(step, stream)`` pair (the bits :func:`uniform` gives)."""
    return xp.stack([uniform(xp, seeds, step, stream) for step, stream in draws], 1)
