"""The closed-loop toy (repro/closed_loop.py) with each peer controller in the loop: collapse fractions.

Calls only the toy's public ``simulate``. A rule with no floor is given 0 as its
"floor" λ, which the toy uses only to count the first step at which λ equals it
(for such a rule: the step λ reaches exactly 0).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from repro.closed_loop import GRID, Toy, grid_points, simulate
from repro.contract import Contract
from repro.kernel_source import load_kernel


def collapse_fractions(backend, contract: Contract, names: tuple[str, ...], toy: Toy | None = None, seeds: int = 20,
                       grid: dict[str, tuple] = GRID, seed: int = 0) -> pd.DataFrame:
    """Per controller and grid point, over ``seeds`` runs from the controller's seed λ: the collapse fraction
    (q_pi_agree below the toy's threshold), the diverged fraction (λ reached +inf or the toy's state turned
    NaN: a rule with no ceiling can ramp without bound) and the median lowest λ."""
    toy = toy or Toy()
    groups = []
    for name in names:
        entry = contract.controller(name)
        kernel = backend.compile(load_kernel(entry.kernel, entry.symbol), contract.slots)
        floor = entry.bound("floor")
        groups.append((kernel, entry.value("seed_lambda"), 0.0 if floor is None else floor))
    points = grid_points(grid)
    with np.errstate(over="ignore", invalid="ignore"):  # λ → inf drives the toy's logits to NaN: counted below
        batches = simulate(backend, groups, toy, seeds=seeds, seed=seed, grid=points)
    rows = []
    for name, b in zip(names, batches):
        collapsed = b.collapsed.reshape(-1, seeds)
        lam_min = b.lambda_min.reshape(-1, seeds)
        # λ overflowed to +inf, or the toy's state became NaN (which the collapse test cannot see)
        diverged = (np.isinf(b.lambda_max) | np.isnan(b.q_pi_agree_final)).reshape(-1, seeds)
        for i in range(collapsed.shape[0]):
            rows.append({"controller": name, **{k: float(v[i]) for k, v in points.items()},
                         "collapse_fraction": float(collapsed[i].mean()),
                         "diverged_fraction": float(diverged[i].mean()),
                         "median_lambda_min": float(np.median(lam_min[i])), "seeds": seeds})
    return pd.DataFrame(rows)
