"""The second study's incident figure: one seed's run of the original and the fixed kernel, step by step.

Gathering only (the seed is chosen by :func:`analysis.judge.second_study.incident_seed`); units: steps are
environment steps, KL in nats, agreement a probability.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from repro.core.contract import Contract
from repro.core.json_values import finite_or_none
from repro.learning import controllers as ctl
from repro.learning.agent import run_loop
from repro.learning.env import make
from repro.learning.study2 import GRID_AXES_2, Prereg2, loop_grid, measure_of

#: The per-step series the incident holds per arm (:class:`repro.learning.agent.Traces` fields).
INCIDENT_SERIES = ("lam", "kl_ema", "agree_unique", "agree_odd", "log10_min_odd")


def incident(backend, contract: Contract, prereg: Prereg2, seed: int, steps: int | None = None) -> dict:
    """One seed's run of the original and the fixed kernel at the incident figure's grid point, evaluated every
    step (``steps`` of them; default pre-registered): λ, the KL the controller sees, agreement (ties excluded) on
    visited and odd states, and log10 of the lowest odd state's (the states the even-state KL never sees; the
    incident figure plots it: a mean hides one state's collapse). Both kernels are ``contract``'s."""
    inc = prereg.incident
    _, tables = make(inc["env"], prereg.learning.default_max_episode_steps)
    point = {k: inc[k] for k in GRID_AXES_2}
    learning = replace(prereg.learning, steps=steps or inc["steps"], eval_every=1)
    groups = [ctl.group(backend, n, contract) for n in ("original", "fixed")]
    measure = measure_of(prereg, contract)
    traces = run_loop(backend, tables, groups, learning, np.array([seed], np.uint64), loop_grid([point], prereg.features),
                      measure)
    series = {arm.name: {key: [finite_or_none(x) for x in getattr(traces, key)[:, g].astype(np.float64)]
                         for key in INCIDENT_SERIES} for g, arm in enumerate(groups)}
    return {"env": inc["env"], "point": point, "seed": int(seed), "every": 1, "steps": traces.steps.tolist(),
            "quiet_kl": measure.quiet_kl, "kl_target": prereg.learning.kl_target, "series": series}
