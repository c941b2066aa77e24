"""The closed-loop toy (repro/closed_loop) with each peer controller in the loop: collapse and divergence.

Uses only the toy's public ``group``/``simulate``: every controller runs on the
same noise as the robustness study's, from its own documented seed λ.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from repro.closed_loop import GRID, Toy, grid_points, group, simulate
from repro.contract import Contract
from repro.kernel_source import KernelSource


def collapse_fractions(backend, contract: Contract, sources: dict[str, KernelSource], toy: Toy | None = None,
                       seeds: int = 20, grid: dict[str, tuple] = GRID, seed: int = 0) -> pd.DataFrame:
    """Per controller (``sources``: contract name → kernel source) and grid point, over ``seeds`` runs: the
    collapse fraction (q_pi_agree below the toy's threshold), the diverged fraction (λ reached +inf or the
    toy's state turned NaN: a rule with no ceiling can ramp without bound) and the median lowest λ."""
    toy = toy or Toy()
    groups = [group(backend, src, contract.slots, contract.controller(n).value("seed_lambda"))
              for n, src in sources.items()]
    points = grid_points(grid)
    with np.errstate(over="ignore", invalid="ignore"):  # λ → inf drives the toy's logits to NaN: counted below
        batches = simulate(backend, groups, toy, seeds=seeds, seed=seed, grid=points)
    rows = []
    for name, b in zip(sources, batches, strict=True):
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
