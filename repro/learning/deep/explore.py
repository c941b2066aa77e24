"""The fourth study's exploratory regime search (studies/exploration_4.toml): the collapse map's runs.

Gathering only (the judgement and the selection rule are ``analysis/judge/explore_study.py``). The grid is cut into
GROUPS — (task, τ, aux, π lr) — of 10 cells (target × site) × arms original and fixed, plus the constant-λ arms
once per group, all on the group's 16 seeds. Groups run in CHUNKS: whole groups of one task, as many as
``chunk_rows`` rows allow, one batched loop per chunk, rows arm-major (every controller's rows contiguous, so that
each kernel launches once per step for the chunk). Every run's random numbers come from its key alone
(:func:`run_key`, the loop's counter RNG), so a run's result does not depend on the chunk it ran in; a shard
``I/N`` runs the chunks ``k`` with ``k % N == I − 1``.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from repro.core.contract import Contract
from repro.core.errors import SuiteError
from repro.core.paths import ROOT
from repro.core.toml_file import read_toml
from repro.learning.controllers import canonical, source_and_seed

DECLARATION = ROOT / "studies" / "exploration_4.toml"
ARMS = ("original", "fixed")
#: Per-run measures the JSON holds (studies/exploration_4.toml [measures]).
MEASURES = ("precondition", "at_floor", "r_geo_avg", "r_geo_min", "geo_avg", "geo_min", "p01_avg", "match_avg",
            "r_match_avg", "ret_avg", "lambda_final", "kl_ema_avg")
GRID_AXES = ("kl_target", "tau", "kl_site", "aux_reward", "pi_lr")
LOOP_KEYS = ("steps", "eval_every", "warmup", "replay", "batch", "probe", "hidden", "pi_hidden", "gamma", "lr",
             "polyak", "ema_alpha", "aux_action")


@dataclass(frozen=True)
class Task:
    env: str
    region_obs: int
    region_threshold: float
    tau_unit: float | None
    beta: float | None
    calibration: str | None


@dataclass(frozen=True)
class Group:
    index: int        # position in the declaration's order (task, τ, aux, lr)
    task: str
    tau: float        # × the task's tau_unit
    aux: float
    pi_lr: float


@dataclass(frozen=True)
class Explore:
    path: str
    seed: int
    loop: dict
    matmul: str
    tasks: dict
    targets: tuple
    taus: tuple
    sites: tuple
    auxes: tuple
    lrs: tuple
    arms: tuple
    constants: tuple
    seeds: int
    selection: dict
    reduced: bool

    @property
    def groups(self) -> list[Group]:
        out = []
        for task in self.tasks:
            for tau in self.taus:
                for aux in self.auxes:
                    for lr in self.lrs:
                        out.append(Group(len(out), task, tau, aux, lr))
        return out

    @property
    def cells(self) -> list[tuple[float, str]]:
        """A group's cells, (target, site), in the declaration's order."""
        return [(t, s) for t in self.targets for s in self.sites]

    @property
    def const_arms(self) -> list[str]:
        return [canonical(f"const:{c}") for c in self.constants]

    @property
    def rows_per_group(self) -> int:
        return (len(self.cells) * len(self.arms) + len(self.constants)) * self.seeds

    def loop_config(self, task: str):
        from repro.learning.deep.loop import LoopConfig

        t = self.tasks[task]
        return LoopConfig(env=task, region_obs=t.region_obs, region_threshold=t.region_threshold,
                          **{k: self.loop[k] for k in LOOP_KEYS})


def load(path: Path | str = DECLARATION, reduced: bool = False) -> Explore:
    """The declaration as typed data (``reduced``: its ``[reduced]`` form: fewer axes, seeds and steps)."""
    path = Path(path)
    data = read_toml(path, "declaration")
    try:
        if not data["study"].get("exploratory"):
            raise SuiteError(f"{path}: [study] exploratory = true is required (the search is declared exploratory)")
        grid, loop, red = dict(data["grid"]), dict(data["loop"]), dict(data.get("reduced", {}))
        if reduced:
            if not red:
                raise SuiteError(f"{path}: no [reduced] form")
            grid.update({k: red[k] for k in ("tasks", *GRID_AXES) if k in red})
            grid["seeds"] = red["seeds"]
            loop.update({k: red[k] for k in ("steps", "warmup", "eval_every", "replay") if k in red})
        if loop["kl_direction"] != "reverse" or loop["ema_start"] != "zero":
            raise SuiteError(f"{path}: the search runs the reverse KL with the EMA from zero")
        if loop["matmul"] not in ("highest", "high"):
            raise SuiteError(f"{path}: [loop] matmul must be highest or high")
        from repro.learning.deep.loop import SITES

        if any(s not in SITES for s in grid["kl_site"]):
            raise SuiteError(f"{path}: kl_site must be among {', '.join(SITES)}")
        tasks = {}
        acro = data["tasks"].get("Acrobot-v1", {})
        for name in grid["tasks"]:
            t = data["tasks"][name]
            tau_unit, beta = t.get("tau_unit"), t.get("beta")
            if reduced and tau_unit is None:  # the CPU smoke form borrows Acrobot's calibration
                tau_unit, beta = acro["tau_unit"], acro["beta"]
            tasks[name] = Task(name, int(t["region_obs"]), float(t["region_threshold"]), tau_unit, beta,
                               t.get("calibration"))
        for k in LOOP_KEYS:
            loop[k]  # noqa: B018 — every loop parameter is declared
        if loop["steps"] % loop["eval_every"] or loop["warmup"] >= loop["steps"]:
            raise SuiteError(f"{path}: steps must be a multiple of eval_every above the warm-up")
        sel = data["selection"]
        return Explore(path.resolve().relative_to(ROOT).as_posix() if path.resolve().is_relative_to(ROOT) else str(path),
                       int(data["study"]["seed"]), loop, loop["matmul"], tasks, tuple(grid["kl_target"]),
                       tuple(grid["tau"]), tuple(grid["kl_site"]), tuple(grid["aux_reward"]), tuple(grid["pi_lr"]),
                       tuple(grid["arms"]), tuple(grid["constants"]), int(grid["seeds"]),
                       {k: sel[k] for k in ("min_precondition", "min_separation", "min_separated_seeds", "forward")},
                       reduced)
    except KeyError as err:
        raise SuiteError(f"{path}: missing key {err}") from None
    except (TypeError, ValueError) as err:
        raise SuiteError(f"{path}: {err}") from None


def calibrated(decl: Explore) -> Explore:
    """Every task's tau_unit and beta: a task without them reads its calibration file (one line where it is
    missing: run the λ = 0 pilot the declaration names)."""
    import json

    tasks = {}
    for name, t in decl.tasks.items():
        if t.tau_unit is None or t.beta is None:
            where = ROOT / (t.calibration or "")
            if not t.calibration or not where.is_file():
                raise SuiteError(f"{name}: no calibration ({t.calibration}): run `python -m repro.learning.deep."
                                 f"calibration {t.calibration} --env {name} --backend cupy --seeds 32 --steps 20000` "
                                 "and commit it first")
            try:
                cal = json.loads(where.read_text(encoding="utf-8"))
                t = replace(t, tau_unit=float(cal["tau_unit"]), beta=float(cal["beta"]))
            except (OSError, ValueError, KeyError) as err:
                raise SuiteError(f"{t.calibration}: not a calibration JSON ({err})") from None
            if cal.get("env", "Acrobot-v1") != name:
                raise SuiteError(f"{t.calibration}: calibrates {cal.get('env')}, not {name}")
        tasks[name] = t
    return replace(decl, tasks=tasks)


def run_key(seed: int, group: Group, i: int) -> int:
    """A run's int32 key: a hash of the study seed, the group's task and index and the seed index (a group's seeds
    are its own; every arm and cell of a group shares them)."""
    digest = hashlib.sha256(f"{seed}|{group.task}|{group.index}|{i}".encode()).digest()
    return int.from_bytes(digest[:4], "little", signed=True)


def chunks(decl: Explore, chunk_rows: int) -> list[list[Group]]:
    """Whole groups of one task, in order, at most ``chunk_rows`` rows each (at least one group)."""
    per = max(1, chunk_rows // decl.rows_per_group)
    out = []
    for task in decl.tasks:
        gs = [g for g in decl.groups if g.task == task]
        out += [gs[k:k + per] for k in range(0, len(gs), per)]
    return out


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise SuiteError(f"--shard {text!r}: give I/N, 1 ≤ I ≤ N") from None
    if not 1 <= i <= n:
        raise SuiteError(f"--shard {text!r}: give I/N, 1 ≤ I ≤ N")
    return i, n


def layout(decl: Explore, groups: list[Group]) -> list[tuple]:
    """The chunk's rows ``[(arm, group, cell or None, seed index)]``, arm-major: original (every group's every
    cell's seeds), fixed, then each constant (every group's seeds)."""
    entries = []
    for arm in decl.arms:
        for g in groups:
            for cell in decl.cells:
                entries += [(arm, g, cell, i) for i in range(decl.seeds)]
    for arm in decl.const_arms:
        for g in groups:
            entries += [(arm, g, None, i) for i in range(decl.seeds)]
    return entries


def build_rows(decl: Explore, groups: list[Group], backend, contract: Contract, limit: int | None = None):
    """The :class:`Rows` of one chunk and its entries, each arm's kernel, seed λ, floor and tolerance from
    ``contract`` (``limit``: the first rows only, for the benchmark)."""
    from repro.learning.deep.controller import ArmRows
    from repro.learning.deep.loop import SITES, Rows

    entries = layout(decl, groups)[:limit]
    task = decl.tasks[groups[0].task]
    arm_rows, names = [], list(dict.fromkeys(e[0] for e in entries))
    for arm in names:
        idx = [k for k, e in enumerate(entries) if e[0] == arm]
        source, seed_lambda = source_and_seed(arm, contract)
        arm_rows.append(ArmRows(arm, backend.compile(source, contract.slots), idx[0], idx[-1] + 1, seed_lambda))
    R = len(entries)
    floor, edge = np.full(R, np.nan), np.full(R, np.nan)
    target, site = np.full(R, decl.targets[0]), np.zeros(R, int)
    for k, (arm, _g, cell, _i) in enumerate(entries):
        if cell is not None:
            target[k], site[k] = cell[0], SITES.index(cell[1])
        if arm in ARMS:
            c = contract.controller(arm)
            floor[k] = np.float32(c.value("floor"))
            edge[k] = cell[0] / c.value("tolerance")
    key = np.array([run_key(decl.seed, g, i) for _a, g, _c, i in entries], dtype=np.int64)
    rows = Rows(u=np.array([g.index * decl.seeds + i for _a, g, _c, i in entries]),
                tau=np.array([g.tau * task.tau_unit for _a, g, _c, _i in entries]),
                aux=np.array([g.aux for _a, g, _c, _i in entries]), beta=np.full(R, task.beta), target=target,
                forward=np.zeros(R, bool), site=site, ema_first=np.zeros(R, bool), resume=np.full(R, -1),
                arms=arm_rows, key=key, pi_lr=np.array([g.pi_lr for _a, g, _c, _i in entries]), floor=floor,
                lower_edge=edge)
    return rows, entries


def per_run(out: dict, cfg) -> dict[str, np.ndarray]:
    """The declared per-run measures ``[R]`` from one loop's output."""
    import warnings

    steps = np.asarray(out["eval_steps"])
    after = steps > cfg.warmup
    judged_steps = cfg.steps - cfg.warmup
    with warnings.catch_warnings():  # a run without an in-R probe state is NaN (null), as declared
        warnings.simplefilter("ignore", RuntimeWarning)
        a = lambda k: out[k][after]
        return {"precondition": out["n_pre"] / judged_steps, "at_floor": out["n_floor"] / judged_steps,
                "r_geo_avg": np.nanmean(a("probe_r_log10_geo"), 0), "r_geo_min": np.nanmin(a("probe_r_log10_geo"), 0),
                "geo_avg": np.nanmean(a("probe_log10_geo"), 0), "geo_min": np.nanmin(a("probe_log10_geo"), 0),
                "p01_avg": np.nanmean(a("probe_log10_p01"), 0), "match_avg": np.nanmean(a("probe_match"), 0),
                "r_match_avg": np.nanmean(a("probe_r_match"), 0), "ret_avg": np.nanmean(a("ret"), 0),
                "lambda_final": out["lambda"][-1], "kl_ema_avg": np.nanmean(a("kl_ema"), 0)}


def _num(x) -> float | None:
    """A JSON number: the value as float32, written as its shortest decimal (deterministic), NaN as null."""
    x = np.float32(x)
    return float(str(x)) if math.isfinite(x) else None


def run_chunk(decl: Explore, groups: list[Group], backend, contract: Contract, device="cpu", graph=False,
              progress=None) -> tuple[list, float]:
    """One batched loop over ``groups`` (arms from ``contract``); returns each group's record (see
    :func:`group_record`) and the loop's seconds."""
    import torch

    from repro.learning.deep.loop import DeepLoop

    rows, entries = build_rows(decl, groups, backend, contract)
    cfg = decl.loop_config(groups[0].task)
    torch.backends.cuda.matmul.allow_tf32 = decl.matmul == "high"
    torch.set_float32_matmul_precision(decl.matmul)
    loop = DeepLoop(cfg, rows, backend, contract.slots, device=device, minibatch_stats=False)  # no mb_* measure
    out = loop.run(graph=graph, progress=progress)
    got = per_run(out, cfg)
    where: dict[tuple, list[int]] = {}
    for k, (arm, g, cell, _i) in enumerate(entries):  # seeds in order within each (arm, group, cell)
        where.setdefault((arm, g.index, cell), []).append(k)
    records = []
    for g in groups:
        rec = {"index": g.index, "task": g.task, "tau": g.tau, "aux_reward": g.aux, "pi_lr": g.pi_lr,
               "keys": [run_key(decl.seed, g, i) for i in range(decl.seeds)], "constants": {}, "cells": []}
        pick = lambda arm, cell, g=g: where[(arm, g.index, cell)]
        measures = lambda ks: {m: [_num(got[m][k]) for k in ks] for m in MEASURES}
        for arm in decl.const_arms:
            rec["constants"][arm] = measures(pick(arm, None))
        for cell in decl.cells:
            rec["cells"].append({"kl_target": cell[0], "kl_site": cell[1],
                                 "arms": {arm: measures(pick(arm, cell)) for arm in decl.arms}})
        records.append(rec)
    return records, float(out["seconds"])


def header(decl: Explore, backend_name: str, device: str, torch_version: str) -> dict:
    """What every shard of one search shares (the merge checks it): the declaration, its grid, the machine."""
    return {"study": "exploration_4", "exploratory": True, "declaration": decl.path, "reduced": decl.reduced,
            "backend": backend_name, "device": device, "torch": torch_version, "seed": decl.seed,
            "loop": {k: decl.loop[k] for k in LOOP_KEYS}, "matmul": decl.matmul,
            "tasks": {k: {"region_obs": t.region_obs, "region_threshold": t.region_threshold, "tau_unit": t.tau_unit,
                          "beta": t.beta} for k, t in decl.tasks.items()},
            "grid": {"kl_target": list(decl.targets), "tau": list(decl.taus), "kl_site": list(decl.sites),
                     "aux_reward": list(decl.auxes), "pi_lr": list(decl.lrs), "arms": list(decl.arms),
                     "constants": decl.const_arms, "seeds": decl.seeds},
            "selection": decl.selection, "groups_total": len(decl.groups)}


def run_search(decl: Explore, backend, contract: Contract, device="cpu", graph=False, chunk_rows=16384, shard=None,
               progress=None, deadline=None, on_chunk=None) -> dict:
    """The search (or shard ``(I, N)`` of it), its arms from ``contract``: ``{"groups": [...], "not_run": [group
    indices]}`` plus the loop
    seconds and run-steps; a chunk that would start after ``deadline`` (time.perf_counter seconds) is not run.
    ``on_chunk(groups, not_run)`` after each chunk: what is done so far (a run cut off keeps it)."""
    plan = chunks(decl, chunk_rows)
    mine = [k for k in range(len(plan)) if shard is None or k % shard[1] == shard[0] - 1]
    groups, not_run, seconds, run_steps = [], [], 0.0, 0
    for n, k in enumerate(mine):
        gs = plan[k]
        if deadline is not None and time.perf_counter() > deadline:
            not_run += [g.index for g in gs]
            continue
        R = len(gs) * decl.rows_per_group
        if progress:
            progress(f"[{n + 1}/{len(mine)}] {gs[0].task} groups {gs[0].index}–{gs[-1].index}: {R} runs × "
                     f"{decl.loop['steps']} steps …")
        records, secs = run_chunk(decl, gs, backend, contract, device=device, graph=graph, progress=progress)
        groups += records
        if on_chunk:
            done = {g["index"] for g in groups}
            on_chunk(sorted(groups, key=lambda g: g["index"]),
                     sorted(g.index for k2 in mine for g in plan[k2] if g.index not in done))
        seconds += secs
        run_steps += R * decl.loop["steps"]
        if progress:
            progress(f"[{n + 1}/{len(mine)}] done in {secs:.1f} s ({R * decl.loop['steps'] / secs / 1e6:.3f} M "
                     "run-steps/s)")
    return {"groups": sorted(groups, key=lambda g: g["index"]), "not_run": sorted(not_run), "seconds": seconds,
            "run_steps": run_steps}


def merge(parts: list[dict]) -> dict:
    """Shards' JSONs → the unsharded JSON (same header, every group once, in order)."""
    if not parts:
        raise SuiteError("--merge needs at least one shard JSON")
    head = {k: v for k, v in parts[0].items() if k not in ("groups", "not_run", "shard")}
    for p in parts[1:]:
        other = {k: v for k, v in p.items() if k not in ("groups", "not_run", "shard")}
        if other != head:
            diff = sorted(k for k in set(head) | set(other) if head.get(k) != other.get(k))
            raise SuiteError(f"the shards differ in {', '.join(diff)}: not one search")
    groups = [g for p in parts for g in p["groups"]]
    seen = [g["index"] for g in groups]
    if len(set(seen)) != len(seen):
        raise SuiteError("a group appears in two shards")
    not_run = sorted(set(i for p in parts for i in p.get("not_run", [])) | (set(range(head["groups_total"])) - set(seen)))
    return {**head, "shard": None, "groups": sorted(groups, key=lambda g: g["index"]), "not_run": not_run}
