"""The closed-loop toy (:mod:`.model`) and the study designs run on it (:mod:`.designs`).

``python -m analysis toy`` is its command line (:mod:`analysis.cli.toy`).
"""

from repro.toy.designs import FACTORS, GRID, ablation, compile_subject, one_run, robustness
from repro.toy.model import COLLAPSE, Batch, Subject, Toy, run_toy

__all__ = ["COLLAPSE", "FACTORS", "GRID", "Batch", "Subject", "Toy", "ablation", "compile_subject",
           "one_run", "robustness", "run_toy"]
