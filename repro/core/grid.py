"""A parameter grid (axis → values) as every combination of its values: the toy's and the first study's designs."""

from __future__ import annotations

import numpy as np


def combinations(grid: dict[str, tuple]) -> dict[str, np.ndarray]:
    """Every combination of the grid's values (the first axis slowest), as equal-length float arrays by axis."""
    mesh = np.meshgrid(*(np.asarray(v, float) for v in grid.values()), indexing="ij")
    return {k: m.ravel() for k, m in zip(grid, mesh, strict=True)}
