"""The third study's per-run endpoint rule, numpy alone and below both of its readers: the calibration that set its
threshold (:mod:`repro.learning.deep.calibration`, a gathering layer) and the study's judgement
(:mod:`analysis.judge.deep_study`, which may import no gathering layer)."""

from __future__ import annotations

import numpy as np


def runs_meeting(series: np.ndarray, steps: np.ndarray, warmup: int, threshold: float, consecutive: int) -> np.ndarray:
    """Per run: ``consecutive`` evaluations in a row after ``warmup`` (steps) with ``series`` below ``threshold``
    (``series`` ``[n_evals, R]``; NaN is not below). The primary endpoint is this rule on the probe batch's log10
    geometric agreement."""
    below = (series < threshold) & (np.asarray(steps) > warmup)[:, None]
    run = np.zeros(series.shape[1], dtype=int)
    best = np.zeros(series.shape[1], dtype=int)
    for row in below:
        run = np.where(row, run + 1, 0)
        best = np.maximum(best, run)
    return best >= consecutive
