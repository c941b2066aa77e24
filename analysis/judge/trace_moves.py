"""What each controller did to λ over a replayed trace: where it started and ended, its range, and how many
steps raised, lowered or held it (pure: a function of λ's steps)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Moves:
    controller: str
    start: float  # λ before step 1
    end: float  # λ after the last step
    low: float  # least λ (NaN ignored)
    high: float  # greatest λ (NaN ignored)
    steps: int  # steps replayed
    up: int  # steps that raised λ
    down: int  # steps that lowered λ

    @property
    def unchanged(self) -> int:
        """Steps that left λ where it was (or made it NaN, which compares neither way)."""
        return self.steps - self.up - self.down


def moves_of(controller: str, lambda0: float, lam: np.ndarray) -> Moves:
    """The :class:`Moves` of one replay: λ before step 1 and λ after each step (``[T]``)."""
    lam = np.concatenate([[lambda0], lam]).astype(np.float32)
    return Moves(controller=controller, start=float(lam[0]), end=float(lam[-1]), low=float(np.nanmin(lam)),
                 high=float(np.nanmax(lam)), steps=len(lam) - 1, up=int((lam[1:] > lam[:-1]).sum()),
                 down=int((lam[1:] < lam[:-1]).sum()))
