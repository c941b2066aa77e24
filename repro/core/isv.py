"""The ISV as the harness lays it out: sentinel-filled float32 rows, one per run.

Every slot starts as the contract's sentinel bit pattern, so a write to any
slot other than λ's shows up as changed bits (compare as uint32: the sentinel
is a NaN, and NaN != NaN as a float).

A *window* surrounds the rows with ``pad`` sentinel-filled floats (canaries) on
each side, so that a write just outside the ISV (``isv[-1]``, ``isv[600]``) is
seen with its offset instead of landing in someone else's memory; the host
backend also puts an inaccessible guard page beyond each end, so a write
farther out stops the run (a crash the isolation layer reports).
"""

from __future__ import annotations

import numpy as np

from repro.core.contract import Slots


def new_isv(slots: Slots, lambda0: np.ndarray | float, n_runs: int | None = None) -> np.ndarray:
    """A ``[n_runs, isv_len]`` float32 ISV (sentinel everywhere, λ slot = ``lambda0``)."""
    lam = np.atleast_1d(np.asarray(lambda0, dtype=np.float32))
    if n_runs is not None and lam.size == 1:
        lam = np.full(n_runs, lam[0], dtype=np.float32)
    isv = np.full((lam.size, slots.isv_len), slots.sentinel, dtype=np.uint32).view(np.float32)
    isv[:, slots.lambda_] = lam
    for slot, start in slots.state:  # a stateful controller's own slots start at its contract's values
        isv[:, slot] = np.float32(start)
    return isv


def stray_writes(slots: Slots, isv: np.ndarray, last_kl: np.ndarray, last_target: np.ndarray) -> list[tuple[int, int]]:
    """``(run, slot)`` pairs whose bits differ from what the harness put there.

    Expected: the sentinel everywhere except λ's slot (the controller's), the
    state slots the controller's entry declares (its own: any bits), and the KL
    and target slots, which hold the last values fed (``last_*``, one per run).
    """
    expected = np.full(isv.shape, slots.sentinel, dtype=np.uint32)
    expected[:, slots.kl] = np.asarray(last_kl, dtype=np.float32).view(np.uint32)
    expected[:, slots.target] = np.asarray(last_target, dtype=np.float32).view(np.uint32)
    differs = isv.view(np.uint32) != expected
    differs[:, slots.lambda_] = False
    for slot, _ in slots.state:
        differs[:, slot] = False
    return [(int(r), int(s)) for r, s in zip(*np.nonzero(differs), strict=True)]


#: Canary floats on each side of the ISV rows in a window (one 4 KiB page).
PAD = 1024


def new_window(slots: Slots, lambda0, n_runs: int | None = None, pad: int = PAD) -> np.ndarray:
    """A flat float32 window: ``pad`` sentinels, the ``[n_runs, isv_len]`` rows of :func:`new_isv`, ``pad`` sentinels."""
    rows = new_isv(slots, lambda0, n_runs)
    window = np.full(2 * pad + rows.size, slots.sentinel, dtype=np.uint32).view(np.float32)
    window[pad : pad + rows.size] = rows.reshape(-1)
    return window


def window_rows(slots: Slots, window: np.ndarray, pad: int = PAD) -> np.ndarray:
    """The ``[n_runs, isv_len]`` rows inside a window (a view)."""
    return window[pad : window.size - pad].reshape(-1, slots.isv_len)


def outside_writes(slots: Slots, window: np.ndarray, pad: int = PAD) -> list[int]:
    """Indices written outside the rows, relative to the nearest row's start.

    Before the first row: negative (``isv[-1]`` is -1); after the last row:
    ``isv_len`` and up, counted from the last row's start (``isv[600]`` is 600).
    """
    words = window.view(np.uint32)
    n = window.size - 2 * pad
    before = np.flatnonzero(words[:pad] != slots.sentinel) - pad
    after = np.flatnonzero(words[pad + n :] != slots.sentinel) + slots.isv_len
    return [int(i) for i in before] + [int(i) for i in after]
