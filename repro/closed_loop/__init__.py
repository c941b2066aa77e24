"""The closed-loop toy (:mod:`.model`) and the study designs run on it (:mod:`.designs`).

``python -m repro.closed_loop`` is the command line (:mod:`.__main__`).
"""

from repro.closed_loop.designs import FACTORS, GRID, ablation, grid_points, group, one_run, robustness
from repro.closed_loop.model import COLLAPSE, Batch, Group, Toy, simulate

__all__ = ["COLLAPSE", "FACTORS", "GRID", "Batch", "Group", "Toy", "ablation", "grid_points", "group", "one_run",
           "robustness", "simulate"]
