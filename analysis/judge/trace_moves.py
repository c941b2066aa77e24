"""What each controller did to λ over a replayed trace: where it started and ended, its range, and how many
steps raised, lowered or held it (pure: a function of the replay's tidy frame)."""

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


def moves(frame) -> list[Moves]:
    """One :class:`Moves` per controller of ``frame`` (columns controller, lambda0, lambda), in frame order."""
    out = []
    for name, part in frame.groupby("controller", sort=False):
        lam = np.concatenate([[part.lambda0.iloc[0]], part["lambda"].to_numpy()]).astype(np.float32)
        out.append(Moves(controller=name, start=float(lam[0]), end=float(lam[-1]), low=float(np.nanmin(lam)),
                         high=float(np.nanmax(lam)), steps=len(part), up=int((lam[1:] > lam[:-1]).sum()),
                         down=int((lam[1:] < lam[:-1]).sum())))
    return out
