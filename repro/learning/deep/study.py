"""Running the third study: cells × arms × seeds as one batched loop per task (gathering only; the judgement is
``analysis/judge/deep_study.py``).

Rows are laid out arm-major (every cell's runs of one controller are contiguous), so that the controller runs
once per arm for all cells. Seeds are fresh in every cell (seed index ``u`` = cell's block + i) and shared by the
arms of a cell: the runs of one seed differ only in λ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from repro.core.contract import Contract
from repro.core.errors import SuiteError
from repro.learning.controllers import canonical, source_and_seed
from repro.learning.deep.controller import ArmRows
from repro.learning.deep.loop import SITES, DeepLoop, LoopConfig, Rows

#: Per-run series the judgement reads (``[n_evals, R]``) and returns; the rest stays on the machine.
KEPT = ("lambda", "kl_ema", "kl", "ret", "mb_log10_geo", "mb_arith", "mb_match", "mb_log10_p01", "mb_ties",
        "probe_log10_geo", "probe_arith", "probe_match", "probe_log10_p01", "probe_ties", "probe_gap", "probe_in_r",
        "mb_in_r")


def layout(cells, seeds: int, arms_of, candidate=None):
    """Row table entries ``[(arm, cell, seed index u, i)]``, arm-major; ``arms_of(cell)`` the arms run in a cell."""
    arms = list(dict.fromkeys(a for c in cells for a in arms_of(c)))
    entries = []
    for arm in arms:
        for ci, cell in enumerate(cells):
            if arm in arms_of(cell):
                entries += [(arm, cell, ci * seeds + i, i) for i in range(seeds)]
    return arms, entries


def build_rows(backend, contract: Contract, cells, seeds: int, arms_of, beta: float, tau_unit: float, steps: int,
               candidate=None) -> tuple[Rows, list]:
    """The :class:`Rows` of the batch and its entries, each arm's kernel and seed λ from ``contract``; ``candidate``
    (a KernelSource) runs as arm ``candidate`` seeded with the fixed kernel's λ."""
    arms, entries = layout(cells, seeds, arms_of)
    arm_rows = []
    for arm in arms:
        idx = [k for k, e in enumerate(entries) if e[0] == arm]
        if arm == "candidate":
            source, seed_lambda = candidate, contract.controller("fixed").value("seed_lambda")
        else:
            source, seed_lambda = source_and_seed(canonical(arm), contract)
        arm_rows.append(ArmRows(arm, backend.compile(source, contract.slots), idx[0], idx[-1] + 1, seed_lambda))
    cell_of = [e[1] for e in entries]
    rows = Rows(u=np.array([e[2] for e in entries]), tau=np.array([c.tau * tau_unit for c in cell_of]),
                aux=np.array([c.aux_reward for c in cell_of]), beta=np.full(len(entries), beta),
                target=np.array([c.kl_target for c in cell_of]),
                forward=np.array([c.kl_direction == "forward" for c in cell_of]),
                site=np.array([SITES.index(c.kl_site) for c in cell_of]),
                ema_first=np.array([c.ema_start == "first" for c in cell_of]),
                resume=np.array([steps // 2 if c.resume else -1 for c in cell_of]), arms=arm_rows)
    return rows, entries


def run(backend, contract: Contract, cfg: LoopConfig, cells, seeds: int, arms_of, beta: float, tau_unit: float,
        seed: int, device="cpu", mode="batched", graph=False, candidate=None, trace_of=None, progress=None) -> dict:
    """One batched loop over ``cells`` (all of one task and π width), its arms from ``contract``; returns its
    entries and per-run series.

    ``trace_of(arm, cell, i)`` picks the runs whose λ and KL EMA are kept at every step.
    """
    rows, entries = build_rows(backend, contract, cells, seeds, arms_of, beta, tau_unit, cfg.steps, candidate)
    trace_rows = None
    if trace_of is not None:
        trace_rows = np.array([k for k, (arm, cell, _, i) in enumerate(entries) if trace_of(arm, cell, i)], dtype=int)
        trace_rows = trace_rows if trace_rows.size else None
    loop = DeepLoop(cfg, rows, backend, contract.slots, device=device, mode=mode, seed=seed, trace_rows=trace_rows)
    out = loop.run(graph=graph, progress=progress)
    series = {k: out[k] for k in KEPT if k in out}
    return {"entries": [(arm, cell.name, u, i) for arm, cell, u, i in entries], "series": series,
            "eval_steps": out["eval_steps"], "seconds": float(out["seconds"]),
            "trace_rows": trace_rows, "trace_kl": out.get("trace_kl"), "trace_lambda": out.get("trace_lambda"),
            "cfg": cfg}


@dataclass(frozen=True)
class Plan:
    """What a study runs, known before any loop runs: its loops in order (key → cells, config, seed), the arms of
    each cell, the seeds per cell. The judging process derives it from the same arguments as the measuring one,
    and reads what a loop measured against it (:func:`read_measured`)."""

    loops: dict[str, tuple[list, LoopConfig, int]]
    arms_of: Callable
    seeds: int

    def entries(self, key: str) -> list[tuple[str, str, int, int]]:
        """Loop ``key``'s row table ``[(arm, cell name, seed index u, i)]`` (:func:`layout`)."""
        return [(arm, cell.name, u, i) for arm, cell, u, i in layout(self.loops[key][0], self.seeds, self.arms_of)[1]]

    def trace_rows(self, key: str, trace_of) -> np.ndarray | None:
        """The rows of loop ``key`` whose λ and KL EMA are kept at every step (None: none)."""
        if trace_of is None:
            return None
        cells = {c.name: c for c in self.loops[key][0]}
        rows = np.array([k for k, (arm, cell, _, i) in enumerate(self.entries(key)) if trace_of(arm, cells[cell], i)],
                        dtype=int)
        return rows if rows.size else None


def plan(prereg, reduced=False, candidate=False, cells=None, seeds=None, steps=None) -> Plan:
    """The :class:`Plan` of the pre-registered study (or its ``reduced`` form; or a ``candidate`` beside the fixed
    kernel; ``cells``, ``seeds``, ``steps``: a part of it)."""
    chosen = list(prereg.cells)
    red = prereg.reduced if reduced else {}
    if red:
        chosen = [c for c in chosen if c.name in red["cells"]]
    if cells:
        unknown = set(cells) - {c.name for c in prereg.cells}
        if unknown:
            raise SuiteError(f"unknown cell(s) {', '.join(sorted(unknown))} (declared: "
                             f"{', '.join(c.name for c in prereg.cells)})")
        chosen = [c for c in chosen if c.name in cells]
    if candidate:
        arms_of = lambda cell: ("candidate", "fixed")
    elif red:
        arms_of = lambda cell: tuple(a for a in (*cell.arms, *cell.exploratory_arms) if a in red["arms"])
    else:
        arms_of = lambda cell: (*cell.arms, *cell.exploratory_arms)
    changes = {k: red[k] for k in ("steps", "warmup", "replay") if k in red}
    if steps:
        changes["steps"] = steps
    loops = {}
    for key in prereg.trim_order:
        group = [c for c in chosen if c.loop_key == key]
        if group:
            loops[key] = (group, prereg.loop_config(group[0], **changes), prereg.seed + 7919 * prereg.trim_order.index(key))
    return Plan(loops, arms_of, seeds or red.get("seeds") or prereg.endpoint.seeds)


def run_study(backend, contract: Contract, prereg, device="cpu", graph=False, reduced=False, candidate=None, cells=None,
              seeds=None, steps=None, mode="batched", trace_of=None, progress=None, deadline=None) -> dict:
    """The pre-registered study (or its ``reduced`` form; or ``candidate`` beside the fixed kernel): one loop per
    ``task/π width`` in the pre-registered order (:func:`plan`). ``deadline`` (time.perf_counter seconds): a loop
    that would start after it is not run (reported as such). The arms come from ``contract``. Returns ``{loop key:
    run() result}`` and the loops not run."""
    import time

    planned = plan(prereg, reduced, candidate is not None, cells, seeds, steps)
    loops, skipped = {}, []
    for n, (key, (group, cfg, seed)) in enumerate(planned.loops.items()):
        if deadline is not None and time.perf_counter() > deadline:
            skipped.append(key)
            continue
        if progress:
            runs = sum(len(planned.arms_of(c)) for c in group) * planned.seeds
            progress(f"[{n + 1}/{len(planned.loops)}] {key}: {len(group)} cell(s), {runs} runs × {cfg.steps} steps on "
                     f"{backend.name} ({device}, {'graph' if graph else 'eager'}) …")
        loops[key] = run(backend, contract, cfg, group, planned.seeds, planned.arms_of, prereg.beta, prereg.tau_unit, seed,
                         device=device, mode=mode, graph=graph, candidate=candidate, trace_of=trace_of,
                         progress=progress)
        if progress:
            progress(f"[{n + 1}/{len(planned.loops)}] {key} done in {loops[key]['seconds']:.1f} s")
    return {"loops": loops, "not_run": skipped, "seeds": planned.seeds}


#: What a confined study's child hands back (:func:`write_measured`): one plain-data file (repro.runners.plain).
MEASURED = "measured.json"
#: Per loop run, what it measured (the rest of a loop's result is the plan's, derived by the reader).
_MEASURED_LOOP = ("series", "trace_kl", "trace_lambda", "seconds")


def write_measured(path: Path, raw: dict) -> None:
    """What :func:`run_study` measured, as plain data: per loop run its series (:data:`KEPT`), its trace windows
    and its seconds; and the loops not run. Nothing the judging process could take from the plan instead."""
    from repro.runners import plain

    loops = {key: {name: loop[name] for name in _MEASURED_LOOP} for key, loop in raw["loops"].items()}
    path.write_bytes(plain.dumps({"loops": loops, "not_run": list(raw["not_run"])}))


def read_measured(path: Path, planned: Plan, trace_of=None) -> dict:
    """:func:`run_study`'s result from what a confined child wrote at ``path`` (:func:`write_measured`), read as
    plain data against ``planned`` (this process's own :class:`Plan`): every loop of the plan run or not run, in
    order; each run's series exactly :data:`KEPT`, float32 ``[evaluations, rows]``; its traces float32 ``[steps,
    traced rows]`` where the plan keeps them, else None; its seconds a finite float. The entries, the
    configuration, the evaluation steps and the traced rows are the plan's. SuiteError naming what differs."""
    from repro.runners import plain

    def refuse(why: str):
        raise SuiteError(f"the confined study's measurements {why}: not read (the candidate may have written them)")

    expected = 4 * sum(len(KEPT) * (cfg.steps // cfg.eval_every) * len(planned.entries(key)) + 2 * cfg.steps * len(
        planned.entries(key)) for key, (_, cfg, _) in planned.loops.items())
    try:
        tree = plain.read(path, limit=2 * expected + (1 << 20))  # base64 is 4/3 of the bytes
    except plain.Forged as err:
        refuse(f"are no plain data ({err})")
    if not isinstance(tree, dict) or set(tree) != {"loops", "not_run"}:
        refuse("are not a study's")
    loops, not_run = tree["loops"], tree["not_run"]
    if not (isinstance(loops, dict) and isinstance(not_run, list)) or \
            [*loops, *not_run] != [k for k in planned.loops if k in loops or k in not_run] or \
            sorted([*loops, *not_run]) != sorted(planned.loops):
        refuse("name other loops than the study's")
    out = {}
    for key, got in loops.items():
        _, cfg, _ = planned.loops[key]
        rows, evals = len(planned.entries(key)), cfg.steps // cfg.eval_every
        traced = planned.trace_rows(key, trace_of)
        if not isinstance(got, dict) or set(got) != set(_MEASURED_LOOP):
            refuse(f"of {key} are not a loop's")
        series = got["series"]
        if not isinstance(series, dict) or set(series) != set(KEPT) or not all(
                _is(a, (evals, rows)) for a in series.values()):
            refuse(f"of {key} hold other series than {len(KEPT)} float32 [{evals}, {rows}]")
        for name in ("trace_kl", "trace_lambda"):
            if not (got[name] is None if traced is None else _is(got[name], (cfg.steps, traced.size))):
                refuse(f"of {key} hold a {name} of another shape")
        seconds = got["seconds"]
        if not (isinstance(seconds, float) and np.isfinite(seconds) and seconds >= 0):
            refuse(f"of {key} hold no time")
        out[key] = {"entries": planned.entries(key), "series": series, "seconds": seconds, "cfg": cfg,
                    "eval_steps": cfg.eval_every * np.arange(1, evals + 1), "trace_rows": traced,
                    "trace_kl": got["trace_kl"], "trace_lambda": got["trace_lambda"]}
    return {"loops": out, "not_run": not_run, "seeds": planned.seeds}


def _is(a, shape: tuple[int, ...]) -> bool:
    """``a`` is a float32 array of ``shape``."""
    return isinstance(a, np.ndarray) and a.dtype == np.float32 and a.shape == shape


def small_loop(backend, contract: Contract, names, seeds: int, cfg: LoopConfig, device="cpu", mode="batched", seed: int = 0,
               tau: float = 0.05, aux: float = 1.0, beta: float = 1e-3, target: float = 0.1, resume: int = -1,
               trace: bool = True, sources=None) -> DeepLoop:
    """A loop of ``names`` × ``seeds`` runs with the primary cell's kind of settings (tests, benchmark, traces);
    ``sources`` maps a name to a KernelSource run under it (a candidate), seeded with the fixed kernel's λ; the
    rest are ``contract``'s."""
    arms, start = [], 0
    for name in names:
        if sources and name in sources:
            source, lam = sources[name], contract.controller("fixed").value("seed_lambda")
        else:
            source, lam = source_and_seed(canonical(name), contract)
        arms.append(ArmRows(name, backend.compile(source, contract.slots), start, start + seeds, lam))
        start += seeds
    R = start
    rows = Rows(u=np.tile(np.arange(seeds), len(names)), tau=np.full(R, tau), aux=np.full(R, aux),
                beta=np.full(R, beta), target=np.full(R, target), forward=np.zeros(R, bool), site=np.zeros(R, int),
                ema_first=np.zeros(R, bool), resume=np.full(R, resume), arms=arms)
    return DeepLoop(cfg, rows, backend, contract.slots, device=device, mode=mode, seed=seed,
                    trace_rows=np.arange(R) if trace else None)
