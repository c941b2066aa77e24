"""The fix of commit 96abc364b5 as four separable factors, and the original with any of them applied.

The toy's ablation (:mod:`repro.toy.designs`) and the learning study's ablation controllers
(:mod:`repro.learning.controllers`) build their variants here, so both ablate the same kernels.
"""

from __future__ import annotations

from repro.core.contract import Controller
from repro.core.kernel_source import KernelSource

#: The ablation's four factors: the #define (or the seed λ) changed from the original's value to the fix's,
#: and the contract property that documents the fix's value.
FACTORS = {"floor": ("MIN_LAMBDA", "floor"), "asymmetric": ("LAMBDA_DECAY_RATE", "decay"),
           "tolerance": ("KL_TOLERANCE", "tolerance"), "seed": (None, "seed_lambda")}


def variant(original: KernelSource, before: Controller, after: Controller, fixes) -> tuple[KernelSource, float]:
    """The original with the named fixes (keys of :data:`FACTORS`) applied: its source, #defines set to
    ``after``'s documented values, and its seed λ (``after``'s with the seed fix, else ``before``'s)."""
    defines = {FACTORS[f][0]: float(after.value(FACTORS[f][1])) for f in fixes if FACTORS[f][0]}
    source = original.with_defines(**defines) if defines else original
    return source, after.value("seed_lambda") if "seed" in fixes else before.value("seed_lambda")
