"""The closed-loop toy (:mod:`.model`) and the study designs run on it (:mod:`.designs`).

``python -m analysis toy`` is its command line (:mod:`analysis.cli.toy`).
"""

from repro.toy.designs import FACTORS, GRID, ablation, grid_points, group, one_run, robustness
from repro.toy.model import COLLAPSE, Batch, Group, Toy, simulate

__all__ = ["COLLAPSE", "FACTORS", "GRID", "Batch", "Group", "Toy", "ablation", "grid_points", "group", "one_run",
           "robustness", "simulate"]
