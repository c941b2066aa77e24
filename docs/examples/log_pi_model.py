"""The spec model of docs/examples/log_pi.cu, named by docs/examples/log_pi.toml (``model = …``).

A PI controller on log λ, written from its equations (not from the kernel):

    e = ln(KL / target)                      (in double, rounded once to float32)
    I = clamp(I + k_i·e, i_min, i_max)       (the anti-windup: the integral is bounded)
    λ = clamp(seed_lambda·exp(k_p·e + I), floor, ceiling)

KL or target not > 0 or not finite, or λ not > 0, leave λ and I alone. Every other operation is one float32
operation, as the kernel's; the contract's values are rounded to float32 as the kernel's ``f`` literals are.
The gate compares the kernel with this bit for bit (its ``spec_agreement`` row).
"""

import numpy as np

from repro.core import libm  # glibc's exp and log on float64, as the host build's (NumPy's may differ in the last bit)

F32 = np.float32

#: The state slots the rule keeps: the contract's entry declares each as [log_pi.state.KEY] (slot, start, ...).
STATE = ("integral",)
#: The documented properties the step reads beside seed_lambda, floor and ceiling: each required of the entry.
PARAMS = ("k_p", "k_i", "i_min", "i_max")


def step(p, lam, state, kl, target):
    """One step for every run: λ and the state after it (float32 [n_runs] each), as the kernel leaves them."""
    ok = (kl > 0) & (target > 0) & np.isfinite(kl) & np.isfinite(target) & (lam > 0)
    ratio = np.where(ok, kl.astype(np.float64) / np.where(ok, target, 1).astype(np.float64), 1.0)
    e = libm.log(ratio).astype(F32)
    integral = (state["integral"] + (F32(p["k_i"]) * e).astype(F32)).astype(F32)
    integral = np.minimum(np.maximum(integral, F32(p["i_min"])), F32(p["i_max"])).astype(F32)
    arg = ((F32(p["k_p"]) * e).astype(F32) + integral).astype(F32)
    new = (F32(p["seed_lambda"]) * libm.exp(arg.astype(np.float64)).astype(F32)).astype(F32)
    new = np.minimum(np.maximum(new, F32(p["floor"])), F32(p["ceiling"])).astype(F32)
    return np.where(ok, new, lam).astype(F32), {"integral": np.where(ok, integral, state["integral"]).astype(F32)}
