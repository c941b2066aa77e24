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
        device="cpu", mode="batched", graph=False, candidate=None, trace_per_arm: int = 0, progress=None) -> dict:
    """One batched loop over ``cells`` (all of one task); returns the entries and the per-run series."""
    envs = {c.env for c in cells}
    if len(envs) != 1:
        raise SuiteError("one loop runs one task: split the cells by env")
    cfg = LoopConfig(**{**cfg.__dict__, "env": envs.pop()})
    rows, entries = build_rows(backend, cells, seeds, arms_of, beta, tau_unit, cfg.steps, candidate)
    trace_rows = None
    if trace_per_arm:
        trace_rows = np.array([k for a in rows.arms for k in range(a.start, min(a.stop, a.start + trace_per_arm))])
    loop = DeepLoop(cfg, rows, backend, backend_slots(), device=device, mode=mode, seed=seed, trace_rows=trace_rows)
    out = loop.run(graph=graph, progress=progress)
    series = {k: out[k] for k in KEPT if k in out}
    return {"entries": entries, "series": series, "eval_steps": out["eval_steps"], "seconds": float(out["seconds"]),
            "trace_rows": trace_rows, "trace_kl": out.get("trace_kl"), "trace_lambda": out.get("trace_lambda"),
            "rows": rows}


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
