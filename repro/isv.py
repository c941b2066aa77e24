"""The ISV as the harness lays it out: sentinel-filled float32 rows, one per run.

Every slot starts as the contract's sentinel bit pattern, so a write to any
slot other than λ's shows up as changed bits (compare as uint32: the sentinel
is a NaN, and NaN != NaN as a float).
"""

from __future__ import annotations

import numpy as np

from repro.contract import Slots


def new_isv(slots: Slots, lambda0: np.ndarray | float, n_runs: int | None = None) -> np.ndarray:
    """A ``[n_runs, isv_len]`` float32 ISV (sentinel everywhere, λ slot = ``lambda0``)."""
    lam = np.atleast_1d(np.asarray(lambda0, dtype=np.float32))
    if n_runs is not None and lam.size == 1:
        lam = np.full(n_runs, lam[0], dtype=np.float32)
    isv = np.full((lam.size, slots.isv_len), slots.sentinel, dtype=np.uint32).view(np.float32)
    isv[:, slots.lambda_] = lam
    return isv


def stray_writes(slots: Slots, isv: np.ndarray, last_kl: np.ndarray, last_target: np.ndarray) -> list[tuple[int, int]]:
    """``(run, slot)`` pairs whose bits differ from what the harness put there.

    Expected: the sentinel everywhere except λ's slot (the controller's), and
    the KL and target slots, which hold the last values fed (``last_*``, one per run).
    """
    expected = np.full(isv.shape, slots.sentinel, dtype=np.uint32)
    expected[:, slots.kl] = np.asarray(last_kl, dtype=np.float32).view(np.uint32)
    expected[:, slots.target] = np.asarray(last_target, dtype=np.float32).view(np.uint32)
    differs = isv.view(np.uint32) != expected
    differs[:, slots.lambda_] = False
    return [(int(r), int(s)) for r, s in zip(*np.nonzero(differs), strict=True)]
