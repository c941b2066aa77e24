"""The two learning-loop studies run: the loop's traces gathered (:mod:`repro.learning`), then judged
(:mod:`analysis.judge.first_study`, :mod:`analysis.judge.second_study`), as one JSON per study.

Called by ``python -m analysis study`` and the report. Every result is deterministic: no timings, no absolute
paths; the parameters come from the pre-registered files, and the reduced studies change only the number of
steps, seeds, grid points and controllers. Every run takes the contract its controllers come from (the command's
``--contracts`` file, or the tracked one).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace

import numpy as np

from analysis.judge import first_study, second_study
from repro.backends.base import LEARN_OUTPUTS
from repro.core.contract import Contract
from repro.core.errors import SuiteError
from repro.learning import controllers as ctl
from repro.learning import prereg as first_prereg
from repro.learning import study2
from repro.learning.agent import run_loop
from repro.learning.env import make
from repro.learning.incident import incident
from repro.learning.prereg import MAX_TRACE_BYTES, Prereg, grid_columns, load_prereg, parse_seeds
from repro.learning.study2 import Prereg2, grid_points, load_prereg2, loop_grid, measure_of, signature_steps


def _tables(envs, prereg) -> dict:
    """Every environment made (and its name checked) before the first run starts."""
    return {env: make(env, prereg.learning.default_max_episode_steps)[1] for env in envs}


def _check_memory(need: int, extra: str = "") -> None:
    """``need``: bytes of one environment's traces, at most :data:`MAX_TRACE_BYTES`."""
    if need > MAX_TRACE_BYTES:
        raise SuiteError(f"the traces of one environment would take {need / 2**30:.1f} GiB{extra}: "
                         "fewer steps, seeds or controllers")


def run_first(backend, contract: Contract, envs, names, seeds: np.ndarray, prereg: Prereg, grid: dict | None = None,
              steps: int | None = None, sources: dict | None = None) -> dict:
    """The first study's JSON. ``sources`` puts a kernel source in a contract name's place (a candidate under
    "fixed")."""
    if steps is not None:
        prereg = replace(prereg, learning=replace(prereg.learning, steps=steps))
    names = ctl.expand(names, contract)
    tables = _tables(envs, prereg)
    points = grid_columns(grid or prereg.grid)
    n_runs = len(seeds) * len(points["pi_view"])
    per_evaluation_and_run = sum(np.dtype(d).itemsize for d in LEARN_OUTPUTS.values())
    _check_memory(per_evaluation_and_run * (prereg.learning.steps // prereg.learning.eval_every) * n_runs * len(names),
                  f" (at most {MAX_TRACE_BYTES / 2**30:.0f})")
    result = {"preregistration": prereg.path, "backend": backend.name,
              "parameters": {"learning": asdict(prereg.learning), "grid": {k: list(v) for k, v in (grid or prereg.grid).items()},
                             "collapse": asdict(prereg.collapse)},
              "as_preregistered": steps is None and grid is None,
              "seeds": [int(seeds[0]), int(seeds[-1]) + 1], "controllers": names,
              "run_order": "per controller: grid point-major, then seed",
              "kernels": {n: src.origin for n, src in (sources or {}).items() if n in names},
              "envs": {}}
    groups = [ctl.group(backend, n, contract, (sources or {}).get(n)) for n in names]
    for env in envs:
        traces = run_loop(backend, tables[env], groups, prereg.learning, seeds, points)
        result["envs"][env] = first_study.env_block(tables[env], names, [g.seed_lambda for g in groups], points,
                                                    traces, len(seeds), prereg.collapse)
    return result


def reduced_first(backend, contract: Contract, prereg: Prereg | None = None, sources: dict | None = None) -> dict:
    """The reduced first study's JSON (:data:`repro.learning.prereg.REDUCED`: seconds on a CPU)."""
    r = first_prereg.REDUCED
    return run_first(backend, contract, r["envs"], r["controllers"], parse_seeds(r["seeds"]), prereg or load_prereg(),
                     grid=r["grid"], steps=r["steps"], sources=sources)


def preregistered_first(backend, contract: Contract, sources: dict | None = None) -> dict:
    """The first study exactly as pre-registered (its environments, seeds, controllers, grid and steps)."""
    prereg = load_prereg()
    return run_first(backend, contract, prereg.envs, prereg.controllers, parse_seeds(prereg.seeds), prereg, sources=sources)


def run_second(backend, contract: Contract, prereg: Prereg2, envs=None, names=None, seeds=None, grid=None, steps=None,
               progress=None, incident_steps: int | None = None, with_incident: bool = True) -> dict:
    """The second study's JSON; arguments left None are as pre-registered. ``progress`` (a callable taking one
    line) hears when each environment starts and when it is done, with its wall time (s); ``incident_steps``: the
    incident figure's run length (steps; default pre-registered); ``with_incident=False`` runs no incident."""
    as_prereg = all(x is None for x in (envs, names, seeds, grid, steps))
    envs = list(envs or prereg.envs)
    names = ctl.expand(names or prereg.controllers, contract)
    seeds = parse_seeds(prereg.seeds) if seeds is None else seeds
    if steps is not None:
        prereg = replace(prereg, learning=replace(prereg.learning, steps=steps))
    if grid is not None:
        prereg = replace(prereg, grid={**prereg.grid, **grid})
    say = progress or (lambda _line: None)
    c = prereg.criteria
    if c.baseline not in names:
        raise SuiteError(f"the relative criterion needs its baseline {c.baseline} among the controllers")
    points = grid_points(prereg.grid)
    tables = _tables(envs, prereg)
    n_runs = len(seeds) * len(points)
    _check_memory(13 * 8 * (prereg.learning.steps // prereg.learning.eval_every) * n_runs * len(names))
    result = {"preregistration": prereg.path, "learning_from": prereg.learning_from, "backend": backend.name,
              "parameters": {"learning": asdict(prereg.learning), "features": prereg.features,
                             "replay_capacity": prereg.replay_capacity, "replay_sample": prereg.replay_sample,
                             "grid": {k: list(v) for k, v in prereg.grid.items()}, "criteria": asdict(c),
                             "signature": {**asdict(measure_of(prereg, contract)),
                                           "steps": signature_steps(prereg, contract)}},
              "as_preregistered": as_prereg, "seeds": [int(seeds[0]), int(seeds[-1]) + 1], "controllers": names,
              "run_order": "per controller: grid point-major (regime, policy, aux), then seed", "envs": {}}
    with ThreadPoolExecutor(min(8, len(names))) as pool:  # every controller compiled at once (cached below)
        groups = list(pool.map(lambda n: ctl.group(backend, n, contract), names))
    for env in envs:
        start = time.perf_counter()
        what = f"{env}: {len(names)} controllers × {n_runs} runs × {prereg.learning.steps} steps"
        say(f"{what} …")  # the first line a user sees, before the minutes of the first task
        traces = run_loop(backend, tables[env], groups, prereg.learning, seeds, loop_grid(points, prereg.features),
                          measure_of(prereg, contract))
        result["envs"][env] = second_study.env_block(tables[env], names, [g.seed_lambda for g in groups], points,
                                                     traces, len(seeds), c, signature_steps(prereg, contract))
        say(f"{what} in {time.perf_counter() - start:.1f} s")
    if with_incident and prereg.incident["env"] in result["envs"] and {"original", "fixed"} <= set(names):
        seed = second_study.incident_seed(result, prereg.incident, seeds)
        result["incident"] = incident(backend, contract, prereg, seed, steps=incident_steps)
    return result


def reduced_second(backend, contract: Contract, prereg: Prereg2 | None = None) -> dict:
    """The reduced second study's JSON (:data:`repro.learning.study2.REDUCED`)."""
    r = study2.REDUCED
    return run_second(backend, contract, prereg or load_prereg2(), envs=r["envs"], names=r["controllers"],
                      seeds=parse_seeds(r["seeds"]), grid=r["grid"], steps=r["steps"], incident_steps=2000)


def exploratory_target(backend, contract: Contract, prereg: Prereg2 | None = None, progress=None) -> dict:
    """The exploratory run :data:`repro.learning.study2.EXPLORATORY_TARGET` (the KL target at 1.0; not
    pre-registered): the second study's JSON of it, marked ``exploratory``, without an incident figure."""
    x = study2.EXPLORATORY_TARGET
    prereg = prereg or load_prereg2()
    prereg = replace(prereg, learning=replace(prereg.learning, kl_target=x["kl_target"]))
    result = run_second(backend, contract, prereg, envs=x["envs"], names=x["controllers"], seeds=parse_seeds(x["seeds"]),
                        grid=x["grid"], progress=progress, with_incident=False)
    result["exploratory"] = (f"not pre-registered: the KL target {x['kl_target']:g} instead of the learners' "
                             f"{load_prereg2().learning.kl_target:g}, declared after the study's result")
    return result


def exploratory_cold_start(backend, contract: Contract, prereg: Prereg2 | None = None, progress=None) -> dict:
    """The exploratory check :data:`repro.learning.study2.EXPLORATORY_COLD_START` (not pre-registered): the
    pre-registered grid and seeds for the first evaluation window, and per controller and regime the fraction of
    runs whose signature λ side is met there."""
    x = study2.EXPLORATORY_COLD_START
    prereg = prereg or load_prereg2()
    window = replace(prereg.learning, steps=prereg.learning.eval_every * x["windows"])
    seeds, points = parse_seeds(prereg.seeds), grid_points(prereg.grid)
    groups = [ctl.group(backend, n, contract) for n in x["controllers"]]
    out = {"exploratory": "not pre-registered: the signature's λ side within the first evaluation window, "
                          "declared after the study's result", "backend": backend.name, "preregistration": prereg.path,
           "seeds": [int(seeds[0]), int(seeds[-1]) + 1], "steps": window.steps, "controllers": list(x["controllers"]),
           "signature": {**asdict(measure_of(prereg, contract)), "steps": signature_steps(prereg, contract)},
           "envs": {}}
    for env in prereg.envs:
        _, tables = make(env, prereg.learning.default_max_episode_steps)
        traces = run_loop(backend, tables, groups, window, seeds, loop_grid(points, prereg.features),
                          measure_of(prereg, contract))
        out["envs"][env] = second_study.cold_start_block(list(x["controllers"]), points, traces, len(seeds),
                                                         signature_steps(prereg, contract))
        if progress:
            progress(f"cold start {env}: done")
    return out


def remake_incident(backend, contract: Contract, result: dict, prereg: Prereg2 | None = None) -> dict:
    """``result`` (a second study's JSON) with its incident run again on ``backend`` (same seed and steps), now
    holding every series of :data:`repro.learning.incident.INCIDENT_SERIES`. Refused (:class:`SuiteError`) unless
    every series the old incident held comes back bit for bit: the new series are then the same run's."""
    old = result["incident"]
    new = incident(backend, contract, prereg or load_prereg2(), old["seed"], steps=len(old["steps"]))
    differ = [f"{arm}.{key}" for arm, series in old["series"].items() for key, values in series.items()
              if new["series"][arm][key] != values]
    if differ or new["steps"] != old["steps"]:
        raise SuiteError(f"the incident run again on {backend.name} differs from the committed one in "
                         f"{', '.join(differ) or 'its steps'}: not the same run")
    return {**result, "incident": {**new, "remade_on": backend.name}}


def calibrate(backend, contract: Contract, prereg: Prereg2, seeds: np.ndarray, candidates=(1, 2, 3, 5, 8, 13),
              false_alarm: float = 0.05, progress=None) -> dict:
    """The calibration's JSON (constant λ only, its own seeds): :data:`analysis.judge.second_study.CALIBRATION_RULE`;
    the K chosen is the smallest with λ = 1's rate there at most ``false_alarm``, pooled over both tasks. Also: how
    many states keep a unique greedy action, λ = 0's level."""
    names = ["const:0", "const:0.001", "const:1"]
    points = grid_points(prereg.grid)
    out = {"seeds": [int(seeds[0]), int(seeds[-1]) + 1], "controllers": names, "candidates": list(candidates),
           "false_alarm": false_alarm, "rule": second_study.CALIBRATION_RULE, "envs": {}}
    trips = []
    for env in prereg.envs:
        start = time.perf_counter()
        _, tables = make(env, prereg.learning.default_max_episode_steps)
        groups = [ctl.group(backend, n, contract) for n in names]
        traces = run_loop(backend, tables, groups, prereg.learning, seeds, loop_grid(points, prereg.features),
                          measure_of(prereg, contract))
        out["envs"][env], env_trips = second_study.calibration_block(tables, names, points, traces, len(seeds),
                                                                     prereg.criteria, signature_steps(prereg, contract),
                                                                     candidates)
        trips.append(env_trips)
        if progress:
            progress(f"calibration {env}: {time.perf_counter() - start:.1f} s")
    out["pooled_effective_points"], out["chosen_consecutive"] = second_study.calibration_pooled(trips, false_alarm)
    return out
