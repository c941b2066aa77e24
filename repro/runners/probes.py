"""Active measurements: experiments whose next input depends on the kernel's last answer.

Where does ramping begin? The smallest float32 KL that makes one step raise λ,
found by bisection over the bit patterns of the positive floats (ordered as
integers), for several targets at once through the looped harness. Which
threads act? The single-thread probe plays other (threadIdx, blockIdx) of a
grid and records which of them changed the ISV.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repro.backends.base import CompiledKernel
from repro.core.f32 import F32, equal_bits, same
from repro.core.isv import PAD, new_isv, new_window

_POS_MIN, _POS_INF = 1, 0x7F800000  # bit patterns: smallest subnormal, +inf


def _step_in_contract_layout(kernel: CompiledKernel, lambda0: float, kl: np.ndarray, target: np.ndarray) -> np.ndarray:
    # A window, so that a write just outside the ISV lands in canaries (the isolation property reports it).
    lam, _ = kernel.run_looped(new_window(kernel.slots, lambda0, len(kl)), kl[None, :], target[None, :], pad=PAD)
    return lam[0]


def onsets(kernel: CompiledKernel, targets: np.ndarray, lambda0: float,
           one_step=_step_in_contract_layout) -> dict[str, np.ndarray]:
    """Per target: ``ramp`` = least KL whose step raises λ, ``decay`` = greatest KL whose step lowers it.

    Both float32; NaN where no positive KL does it. Assumes the response is
    monotone in KL (a kernel that is not shows up as a wrong onset). ``one_step(kernel,
    λ0, kl, target)`` runs one step per (kl, target) pair (default: the contract's ISV layout).
    """
    targets = np.asarray(targets, dtype=F32)
    lam0 = F32(lambda0)

    def search(up: bool) -> np.ndarray:
        def moves(kl_bits: np.ndarray) -> np.ndarray:  # whether one step at these KL raises (up) or lowers λ
            lam = one_step(kernel, lam0, kl_bits.astype(np.uint32).view(F32), targets)
            return lam > lam0 if up else lam < lam0

        # Invariant: the onset lies in (lo, hi] (up: the KL that moves λ are above it) or [lo, hi) (down).
        lo = np.full(targets.shape, _POS_MIN, dtype=np.int64)
        hi = np.full(targets.shape, _POS_INF, dtype=np.int64)
        for _ in range(32):
            mid = (lo + hi) // 2
            below = moves(mid) == up  # the onset is at or below mid
            hi, lo = np.where(below, mid, hi), np.where(below, lo, mid)
        edge = hi if up else lo
        return np.where(moves(edge), edge.astype(np.uint32).view(F32), F32(np.nan))

    return {"ramp": search(True), "decay": search(False)}


#: Launch shape and the coordinates (threadIdx.x, blockIdx.x) the single-thread probe plays:
#: thread 0 of block 0 first, then threads of block 0, thread 0 of other blocks, and both.
GRID_DIMS = (256, 1, 1, 8, 1, 1)  # blockDim x, y, z, gridDim x, y, z
GRID_COORDS = ((0, 0), (1, 0), (31, 0), (255, 0), (0, 1), (0, 7), (17, 3))
#: Inputs that move λ from the seed in any controller on the contract (KL far above, far below the band).
GRID_REGIMES = ("high", "low")


@dataclass(frozen=True)
class ThreadProbe:
    """Which launch coordinates changed the ISV, per input regime (``changed[regime][i]`` for ``coords[i]``)."""

    coords: tuple[tuple[int, int], ...]  # (threadIdx.x, blockIdx.x)
    dims: tuple[int, ...]
    changed: dict[str, list[bool]]


def single_thread(kernel: CompiledKernel, lambda0: float, target: float) -> ThreadProbe:
    """Run one step as each of :data:`GRID_COORDS` in a :data:`GRID_DIMS` launch, on fresh ISVs."""
    s = kernel.slots
    coords = np.zeros((len(GRID_COORDS), 6), dtype=np.uint32)
    coords[:, [0, 3]] = GRID_COORDS  # threadIdx.x, blockIdx.x
    changed = {regime: [] for regime in GRID_REGIMES}
    for regime, factor in zip(GRID_REGIMES, (100.0, 0.01), strict=True):
        # One coordinate per call, each on its own window: a write outside the ISV is not another row's change.
        for i in range(len(GRID_COORDS)):
            window = new_window(s, lambda0)
            isv = window[PAD : PAD + s.isv_len]
            isv[s.kl] = F32(target * factor)
            isv[s.target] = F32(target)
            after = kernel.run_as_threads(window, coords[i : i + 1], GRID_DIMS, pad=PAD)
            changed[regime].append(not same(after[PAD : PAD + s.isv_len], isv))
    return ThreadProbe(GRID_COORDS, GRID_DIMS, changed)


def settled(lam: np.ndarray, window: int) -> np.ndarray:
    """Per run (columns of a step-major ``[T, R]`` λ trace): the final λ where the last ``window`` steps hold the
    same bits (where a kernel settled), else NaN."""
    tail = lam[-window:]
    return np.where(equal_bits(tail, tail[-1]).all(axis=0), lam[-1], F32(np.nan))


def settled_floor(kernel: CompiledKernel, lambda0: float, kl_over_target: float, steps: int = 20000) -> float | None:
    """The λ a kernel settles at under ``steps`` steps of sustained KL = ``kl_over_target``·target.

    Under KL far below the band this is the floor the kernel behaves as (λ),
    measured rather than read from its source; None when λ is still moving in
    the last tenth of the steps (no floor within ``steps``).
    """
    target = np.float32(1.0)
    kl = np.full((steps, 1), np.float32(kl_over_target) * target, dtype=F32)
    lam, _ = kernel.run_looped(new_isv(kernel.slots, lambda0, 1), kl, np.full_like(kl, target))
    value = settled(lam, steps // 10)[0]
    return None if np.isnan(value) else float(value)
