"""Study designs on the closed-loop toy: one traced run, the robustness grid, the ablation of the fix.

Every design takes compiled controllers (:class:`Subject`) or sources from its
caller; nothing here loads a kernel by name, so a candidate handed to the
report is the kernel these designs run.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from repro.backends.base import Backend
from repro.core.ablation import FACTORS, variant
from repro.core.contract import Controller, Slots
from repro.core.errors import SuiteError
from repro.core.grid import combinations
from repro.core.kernel_source import KernelSource
from repro.runners.probes import settled_floor
from repro.runners.scenarios import FAR
from repro.toy.model import TRACED, Subject, Toy, run_toy

#: The robustness grid: π's own signal strength, the KL EMA rate, the KL target (each × seeds).
GRID = {"actor_lr": (0.25, 0.5, 1.0), "kl_ema_rate": (0.003, 0.01, 0.03), "kl_target": (0.5, 1.0, 2.0)}
def compile_subject(backend: Backend, source: KernelSource, slots: Slots, seed_lambda: float) -> Subject:
    """Compile ``source`` and measure the floor it settles at under aligned KL (λ; the label of the outcome)."""
    kernel = backend.compile(source, slots)
    floor = settled_floor(kernel, seed_lambda, 1.0 / FAR)
    return Subject(kernel, seed_lambda, float("nan") if floor is None else floor)


def one_run(backend: Backend, name: str, subject: Subject, toy: Toy | None = None, seed: int = 0,
            progress=None) -> dict:
    """One controller, one seed, with its per-step trace: the fields of the CLI's JSON and figure 8.

    ``progress(steps_done)`` is called after each tenth of the steps (see :func:`run_toy`).
    """
    toy = toy or Toy()
    start = time.perf_counter()
    batch = run_toy(backend, [subject], toy, seeds=1, seed=seed, trace=True, progress=progress)[0]
    steps_to_floor = int(batch.steps_to_lambda_floor[0])
    return {
        "controller": name,
        "kernel": subject.kernel.source.origin,
        "backend": backend.name,
        "device": backend.describe(),
        "seed": seed,
        "lambda_min": float(batch.lambda_min[0]),
        "lambda_max": float(batch.lambda_max[0]),
        "lambda_final": float(batch.lambda_final[0]),
        "settled_floor": None if np.isnan(subject.floor) else subject.floor,
        "q_pi_agree_min": float(batch.q_pi_agree_min[0]),
        "log10_q_pi_agree_min": float(batch.log10_q_pi_agree_min[0]),
        "q_pi_agree_min_after_warmup": float(batch.q_pi_agree_min_after_warmup[0]),
        "q_pi_agree_final": float(batch.q_pi_agree_final[0]),
        "steps_to_lambda_floor": steps_to_floor if steps_to_floor > 0 else None,
        "collapsed": bool(batch.collapsed[0]),
        "parameters": asdict(toy),
        "seconds": round(time.perf_counter() - start, 2),
        "trace": batch.trace,
    }


#: :func:`one_run`'s fields in order, each with the types its value may take; None: an input of the run (its
#: caller's own value). A confined toy's child hands the result back as plain data (:func:`read_run`).
FIELDS = {"controller": None, "kernel": None, "backend": None, "device": None, "seed": None,
          "lambda_min": (float,), "lambda_max": (float,), "lambda_final": (float,), "settled_floor": (float, type(None)),
          "q_pi_agree_min": (float,), "log10_q_pi_agree_min": (float,), "q_pi_agree_min_after_warmup": (float,),
          "q_pi_agree_final": (float,), "steps_to_lambda_floor": (int, type(None)), "collapsed": (bool,),
          "parameters": None, "seconds": (float,), "trace": (dict,)}


def read_run(path: Path, inputs: dict) -> dict:
    """:func:`one_run`'s result as a confined child wrote it at ``path`` (plain data), read against ``inputs`` (the
    run's inputs as this process knows them: every None field of :data:`FIELDS`): each field of its type, the
    trace :data:`~repro.toy.model.TRACED` with a float per step. SuiteError naming what differs."""
    from repro.runners import plain

    steps = inputs["parameters"]["steps"]
    try:
        got = plain.read(path, limit=64 * len(TRACED) * steps + (1 << 20))  # a float's text: 25 characters at most
    except plain.Forged as err:
        raise SuiteError(f"the candidate's toy run is no plain data ({err}): not read") from None
    if not isinstance(got, dict) or set(got) != set(FIELDS):
        raise SuiteError("the candidate's toy run holds other fields than a run's: not read")
    for name, kinds in FIELDS.items():
        if got[name] != inputs[name] if kinds is None else type(got[name]) not in kinds:
            raise SuiteError(f"the candidate's toy run holds another {name}: not read")
    trace = got["trace"]
    if set(trace) != set(TRACED) or not all(isinstance(v, list) and len(v) == steps and all(type(x) is float for x in v)
                                            for v in trace.values()):
        raise SuiteError(f"the candidate's toy run holds no trace of {steps} steps: not read")
    return {name: got[name] for name in FIELDS}


def robustness(backend: Backend, subjects: dict[str, Subject], toy: Toy | None = None, seeds: int = 20,
               grid: dict[str, tuple] = GRID) -> pd.DataFrame:
    """Per controller and grid point, every controller on the same noise: the collapse fraction (q_pi_agree
    below the toy's threshold), the diverged fraction (λ reached +inf or the toy's state turned NaN, which
    the collapse test cannot see: a rule with no ceiling can ramp without bound) and the median lowest λ."""
    toy = toy or Toy()
    points = combinations(grid)
    batches = run_toy(backend, list(subjects.values()), toy, seeds=seeds, grid=points)
    rows = []
    for name, b in zip(subjects, batches, strict=True):
        collapsed = b.collapsed.reshape(-1, seeds)
        lam_min = b.lambda_min.reshape(-1, seeds)
        diverged = (np.isinf(b.lambda_max) | np.isnan(b.q_pi_agree_final)).reshape(-1, seeds)
        for i in range(collapsed.shape[0]):
            rows.append({"controller": name, **{k: float(v[i]) for k, v in points.items()},
                         "collapse_fraction": float(collapsed[i].mean()),
                         "diverged_fraction": float(diverged[i].mean()),
                         "median_lambda_min": float(np.median(lam_min[i])), "seeds": seeds})
    return pd.DataFrame(rows)


def ablation(backend: Backend, original: KernelSource, slots: Slots, before: Controller, after: Controller,
             toy: Toy | None = None, seeds: int = 20, grid: dict[str, tuple] = GRID,
             extra: dict[str, Subject] | None = None) -> pd.DataFrame:
    """All 16 combinations of the fix's four changes applied to the original, each over the grid × seeds.

    Variants are ``original``'s source with #defines overridden to ``after``'s
    documented values (``before`` documents the original's seed λ). ``extra``
    adds whole kernels as further rows (a candidate in the fixed controller's
    place). One row per variant: the fixes applied, runs, collapse fraction,
    median log10 q_pi_agree_min, median λ min and max.
    """
    toy = toy or Toy()
    labels, subjects = [], []
    for combo in itertools.product((False, True), repeat=len(FACTORS)):
        fixes = list(itertools.compress(FACTORS, combo))
        source, seed_lambda = variant(original, before, after, fixes)
        subjects.append(compile_subject(backend, source, slots, seed_lambda))
        labels.append(("fixed (all four)" if all(combo) else "+".join(fixes) or "original", {f: f in fixes for f in FACTORS}))
    subjects += (extra or {}).values()
    labels += [(name, dict.fromkeys(FACTORS)) for name in (extra or {})]
    batches = run_toy(backend, subjects, toy, seeds=seeds, grid=combinations(grid))
    rows = []
    for (label, on), b in zip(labels, batches, strict=True):
        rows.append({"variant": label, **on, "runs": len(b.collapsed), "collapse_fraction": float(b.collapsed.mean()),
                     "median_log10_q_pi_agree_min": float(np.median(b.log10_q_pi_agree_min)),
                     "median_lambda_min": float(np.median(b.lambda_min)),
                     "median_lambda_max": float(np.median(b.lambda_max))})
    return pd.DataFrame(rows)
