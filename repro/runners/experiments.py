"""Experiments behind the report's figures, beyond the gate's evidence (they run kernels, never judge)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from repro.backends.base import CompiledKernel
from repro.core.contract import Controller
from repro.core.f32 import F32, equal_bits
from repro.core.isv import new_isv
from repro.runners.scenarios import FAR, REF_TARGET


def noise_tolerance(kernel: CompiledKernel, controller: Controller, sigmas, samples: int = 20000,
                    seed: int = 0) -> pd.DataFrame:
    """Fraction of steps on which λ changes under log-normal KL noise, per σ.

    Each sample is one step from a mid-range λ (the geometric mean of floor and
    ceiling, so no clamp hides a change) with KL = target·exp(σ·N(0,1)); samples
    are independent, so the fraction estimates P(KL outside the band).
    Columns: sigma, changed_fraction, samples.
    """
    rng = np.random.default_rng(seed)
    lam0 = F32(math.sqrt(controller.value("floor") * controller.value("ceiling")))
    rows = []
    for sigma in sigmas:
        kl = (REF_TARGET * np.exp(sigma * rng.standard_normal(samples))).astype(F32)
        target = np.full(samples, REF_TARGET, dtype=F32)
        lam, _ = kernel.run_looped(new_isv(kernel.slots, lam0, samples), kl[None, :], target[None, :])
        changed = ~equal_bits(lam[0], lam0)
        rows.append({"sigma": float(sigma), "changed_fraction": float(changed.mean()), "samples": samples})
    return pd.DataFrame(rows)


def recovery(kernel: CompiledKernel, controller: Controller, stretches, horizon: int = 3000) -> pd.DataFrame:
    """Steps of high KL needed to win back the seed λ after an aligned stretch of n steps.

    Per stretch n: n steps of KL far below the band from the seed λ, then KL far
    above it until λ ≥ the seed again. Columns: stretch, lambda_after_stretch,
    recovery_steps (NaN when not recovered within ``horizon`` steps).
    """
    stretches = list(stretches)
    lam0 = F32(controller.value("seed_lambda"))
    steps = max(stretches) + horizon
    t = np.arange(steps)[:, None]
    kl = np.where(t < np.asarray(stretches)[None, :], REF_TARGET / FAR, REF_TARGET * FAR).astype(F32)
    target = np.full(kl.shape, REF_TARGET, dtype=F32)
    lam, _ = kernel.run_looped(new_isv(kernel.slots, lam0, len(stretches)), kl, target)
    rows = []
    for i, n in enumerate(stretches):
        after = lam[n - 1, i] if n else lam0
        back = np.flatnonzero(lam[n:, i] >= lam0)
        rows.append({"stretch": n, "lambda_after_stretch": float(after),
                     "recovery_steps": float(back[0] + 1) if back.size else float("nan")})
    return pd.DataFrame(rows)
