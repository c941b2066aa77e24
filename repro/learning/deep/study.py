"""Running the third study: cells × arms × seeds as one batched loop per task (gathering only; the judgement is
``analysis/judge/deep_study.py``).

Rows are laid out arm-major (every cell's runs of one controller are contiguous), so that the controller runs
once per arm for all cells. Seeds are fresh in every cell (seed index ``u`` = cell's block + i) and shared by the
arms of a cell: the runs of one seed differ only in λ.
"""

from __future__ import annotations

import numpy as np

from repro.core.contract import load as load_contract
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


def build_rows(backend, cells, seeds: int, arms_of, beta: float, tau_unit: float, steps: int,
               candidate=None, contract=None) -> tuple[Rows, list]:
    """The :class:`Rows` of the batch and its entries; ``candidate`` (a KernelSource) runs as arm ``candidate``
    seeded with the fixed kernel's λ."""
    contract = contract or load_contract()
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


def run(backend, cfg: LoopConfig, cells, seeds: int, arms_of, beta: float, tau_unit: float, seed: int,
        device="cpu", mode="batched", graph=False, candidate=None, trace_of=None, progress=None) -> dict:
    """One batched loop over ``cells`` (all of one task and π width); returns its entries and per-run series.

    ``trace_of(arm, cell, i)`` picks the runs whose λ and KL EMA are kept at every step.
    """
    rows, entries = build_rows(backend, cells, seeds, arms_of, beta, tau_unit, cfg.steps, candidate)
    trace_rows = None
    if trace_of is not None:
        trace_rows = np.array([k for k, (arm, cell, _, i) in enumerate(entries) if trace_of(arm, cell, i)], dtype=int)
        trace_rows = trace_rows if trace_rows.size else None
    loop = DeepLoop(cfg, rows, backend, backend_slots(), device=device, mode=mode, seed=seed, trace_rows=trace_rows)
    out = loop.run(graph=graph, progress=progress)
    series = {k: out[k] for k in KEPT if k in out}
    return {"entries": [(arm, cell.name, u, i) for arm, cell, u, i in entries], "series": series,
            "eval_steps": out["eval_steps"], "seconds": float(out["seconds"]),
            "trace_rows": trace_rows, "trace_kl": out.get("trace_kl"), "trace_lambda": out.get("trace_lambda"),
            "cfg": cfg}


def run_study(backend, prereg, device="cpu", graph=False, reduced=False, candidate=None, cells=None,
              seeds=None, steps=None, mode="batched", trace_of=None, progress=None, deadline=None) -> dict:
    """The pre-registered study (or its ``reduced`` form; or ``candidate`` beside the fixed kernel): one loop per
    ``task/π width`` in the pre-registered order. ``deadline`` (time.perf_counter seconds): a loop that would start
    after it is not run (reported as such). Returns ``{loop key: run() result}`` and the loops not run."""
    import time

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
    if candidate is not None:
        arms_of = lambda cell: ("candidate", "fixed")
    elif red:
        arms_of = lambda cell: tuple(a for a in (*cell.arms, *cell.exploratory_arms) if a in red["arms"])
    else:
        arms_of = lambda cell: (*cell.arms, *cell.exploratory_arms)
    n_seeds = seeds or red.get("seeds") or prereg.endpoint.seeds
    changes = {k: red[k] for k in ("steps", "warmup", "replay") if k in red}
    if steps:
        changes["steps"] = steps
    loops, skipped = {}, []
    order = [k for k in prereg.trim_order if any(c.loop_key == k for c in chosen)]
    for n, key in enumerate(order):
        group = [c for c in chosen if c.loop_key == key]
        if deadline is not None and time.perf_counter() > deadline:
            skipped.append(key)
            continue
        cfg = prereg.loop_config(group[0], **changes)
        if progress:
            runs = sum(len(arms_of(c)) for c in group) * n_seeds
            progress(f"[{n + 1}/{len(order)}] {key}: {len(group)} cell(s), {runs} runs × {cfg.steps} steps on "
                     f"{backend.name} ({device}, {'graph' if graph else 'eager'}) …")
        loops[key] = run(backend, cfg, group, n_seeds, arms_of, prereg.beta, prereg.tau_unit,
                         prereg.seed + 7919 * prereg.trim_order.index(key), device=device, mode=mode, graph=graph,
                         candidate=candidate, trace_of=trace_of, progress=progress)
        if progress:
            progress(f"[{n + 1}/{len(order)}] {key} done in {loops[key]['seconds']:.1f} s")
    return {"loops": loops, "not_run": skipped, "seeds": n_seeds}


def backend_slots():
    return load_contract().slots


def small_loop(backend, names, seeds: int, cfg: LoopConfig, device="cpu", mode="batched", seed: int = 0,
               tau: float = 0.05, aux: float = 1.0, beta: float = 1e-3, target: float = 0.1, resume: int = -1,
               trace: bool = True, sources=None) -> DeepLoop:
    """A loop of ``names`` × ``seeds`` runs with the primary cell's kind of settings (tests, benchmark, traces);
    ``sources`` maps a name to a KernelSource run under it (a candidate), seeded with the fixed kernel's λ."""
    contract = load_contract()
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
