"""Closed-loop reproduction of the q_pi_agree collapse, with the real controller kernel in the loop.

    python -m repro.closed_loop --controller NAME [--backend auto|host|cupy] [--steps N] [--seed S]
                                [--json PATH] [--plot PATH]

The toy (one state, K actions — a bandit, so that only the coupling matters):

- Q learns action values from noisy rewards; its Boltzmann policy is
  ``p_Q = softmax(Q / q_temperature)``.
- π's logits follow their own learning signal — an actor with its own
  objective, which prefers one action that is not Q's best by ``conflict``
  reward units — as a non-saturating push of ``actor_lr`` times its own
  advantage per step, plus the distillation gradient ``distill_lr · λ · (p_Q − π)``
  (cross-entropy toward Q's Boltzmann policy).
- Each step the KL(p_Q ‖ π), smoothed as an EMA, goes into ISV slot 488, the
  target into slot 491, and the compiled controller kernel (never a Python
  stand-in) updates λ in slot 486, which the next step uses.
- ``q_pi_agree`` = π's probability of Q's greedy action.

The push and the pull make a critical λ of about actor_lr·conflict / (2·distill_lr)
(0.1 with the defaults): below it π's logit for Q's best action falls without
bound and agreement decays exponentially; above it the pull holds π near p_Q.
The defaults were set for that property and the incident's KL scale (target
1 nat) — they were tuned on this toy, which is why the robustness grid exists.

Every run of a batch advances at once: the model's arrays are ``[runs, K]``
(NumPy on the CPU, CuPy on the GPU, all state on the device), and one batched
harness call steps every run's ISV (bit-identical to per-run launches; tested).
Runs draw rewards from one seeded stream that does not depend on which kernel
variant they use, so variants are compared on identical noise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from repro.backends import NAMES, get_backend
from repro.backends.base import CompiledKernel
from repro.contract import load
from repro.errors import SuiteError
from repro.isv import new_isv
from repro.kernel_source import KernelSource, load_kernel

COLLAPSE = 1e-6  # q_pi_agree below this at any step counts as a collapse (the incident reached 1e-22)


@dataclass(frozen=True)
class Toy:
    """The toy's parameters: each has a default and a sentence on what it models."""

    n_actions: int = 8  # K actions of the one-state task
    reward_noise: float = 0.3  # std of the noise on each reward Q learns from (reward units)
    q_lr: float = 0.02  # learning rate of Q (and of the actor's own value estimates) toward sampled rewards
    q_temperature: float = 0.1  # temperature of Q's Boltzmann policy (reward units)
    actor_lr: float = 0.5  # strength of π's own signal: logit push per step per unit of its own advantage
    conflict: float = 1.0  # how far π's own objective prefers a non-best action over Q's best (reward units)
    distill_lr: float = 2.5  # step size of the distillation gradient λ·(p_Q − π) on π's logits
    kl_ema_rate: float = 0.01  # EMA rate of the KL written to slot 488 (≈ 1/horizon in steps)
    kl_target: float = 1.0  # KL target written to slot 491 (nats)
    steps: int = 2000  # training steps (controller launches)
    warmup: int = 500  # steps after which the fixed controller's agreement is judged


@dataclass
class Batch:
    """Per-run outcomes of a batch (NumPy arrays, one entry per run)."""

    lambda_min: np.ndarray
    lambda_max: np.ndarray
    lambda_final: np.ndarray
    q_pi_agree_min: np.ndarray
    log10_q_pi_agree_min: np.ndarray  # the magnitude reached, also where the probability underflows to 0
    q_pi_agree_min_after_warmup: np.ndarray
    q_pi_agree_final: np.ndarray
    steps_to_lambda_floor: np.ndarray  # first step λ equals the floor (−1: never)
    trace: dict | None = None  # λ, q_pi_agree, KL EMA per step for run 0 (when asked)

    @property
    def collapsed(self) -> np.ndarray:
        return self.log10_q_pi_agree_min < np.log10(COLLAPSE)


def _softmax_parts(xp, logits):
    z = logits - logits.max(axis=1, keepdims=True)
    log_norm = xp.log(xp.exp(z).sum(axis=1, keepdims=True))
    return xp.exp(z - log_norm), z - log_norm


def simulate(backend, groups: list[tuple[CompiledKernel, float, float]], toy: Toy, seeds: int, seed: int = 0,
             grid: dict[str, np.ndarray] | None = None, trace: bool = False, stepper: str = "batched") -> list[Batch]:
    """Run ``seeds`` × grid points per group, every group on the same noise; one :class:`Batch` per group.

    ``groups``: (compiled kernel, seed λ, floor λ) per variant. ``grid``: per-base-run
    values of ``actor_lr``, ``kl_ema_rate``, ``kl_target`` (equal-length arrays);
    the base runs are those values × ``seeds``. ``stepper`` = ``per_step`` launches
    the kernel once per run per step instead of one batched call (for the tests).
    """
    xp = backend.xp
    grid = grid or {}
    n_points = len(next(iter(grid.values()))) if grid else 1
    base = n_points * seeds
    per_run = {k: xp.asarray(np.repeat(np.asarray(grid.get(k, [getattr(toy, k)] * n_points), float), seeds))[:, None]
               for k in ("actor_lr", "kl_ema_rate", "kl_target")}
    K, G = toy.n_actions, len(groups)
    rng = np.random.default_rng(seed)
    true = rng.standard_normal((base, K))
    best = true.argmax(axis=1)
    favoured = (best + 1 + rng.integers(0, K - 1, base)) % K  # π's own objective's favourite, never Q's best
    own = true.copy()
    own[np.arange(base), favoured] = true[np.arange(base), best] + toy.conflict
    own_d = xp.asarray(np.tile(own, (G, 1)))
    true_d = xp.asarray(np.tile(true, (G, 1)))
    tile = lambda a: xp.tile(a, (G, 1))  # noqa: E731 - same per-run parameters for every group
    actor_lr, ema_rate, target = (tile(per_run[k]) for k in ("actor_lr", "kl_ema_rate", "kl_target"))
    n = G * base
    slots = groups[0][0].slots
    isv = xp.asarray(new_isv(slots, np.repeat([g[1] for g in groups], base)))
    floors = xp.asarray(np.repeat(np.float32([g[2] for g in groups]), base))
    target32 = target[:, 0].astype(xp.float32)
    q = xp.zeros((n, K))
    own_est = xp.zeros((n, K))  # the actor's own value estimates, learned from the same rewards
    theta = xp.zeros((n, K))
    ema = xp.zeros(n)
    lam = isv[:, slots.lambda_].astype(xp.float64)
    inf = float("inf")
    lam_min, lam_max = xp.full(n, inf), xp.full(n, -inf)
    agree_min, agree_min_late, log_agree_min = xp.full(n, inf), xp.full(n, inf), xp.full(n, inf)
    floor_step = xp.full(n, -1, dtype=xp.int64)
    noise_rng = np.random.default_rng(seed + 1)
    rows = {"lambda": [], "q_pi_agree": [], "kl_ema": []} if trace else None
    for t in range(toy.steps):
        noise = xp.asarray(np.tile(noise_rng.standard_normal((base, K)), (G, 1)))
        q += toy.q_lr * (true_d + toy.reward_noise * noise - q)
        own_est += toy.q_lr * (own_d + toy.reward_noise * noise - own_est)
        p_q, log_p_q = _softmax_parts(xp, q / toy.q_temperature)
        pi, _ = _softmax_parts(xp, theta)
        advantage = own_est - own_est.mean(axis=1, keepdims=True)
        theta += actor_lr * advantage + toy.distill_lr * lam[:, None] * (p_q - pi)
        pi, log_pi = _softmax_parts(xp, theta)
        kl = (p_q * (log_p_q - log_pi)).sum(axis=1)
        ema = (1 - ema_rate[:, 0]) * ema + ema_rate[:, 0] * kl
        isv[:, slots.kl] = ema.astype(xp.float32)
        isv[:, slots.target] = target32
        if stepper == "batched":
            for g, (kernel, _, _) in enumerate(groups):
                kernel.batched_step(isv[g * base : (g + 1) * base])
        else:
            host = backend.xp.asnumpy(isv) if xp is not np else isv
            for r in range(n):
                _, row = groups[r // base][0].run_per_step(host[r], host[r : r + 1, slots.kl], host[r : r + 1, slots.target])
                host[r] = row
            isv[...] = xp.asarray(host)
        lam32 = isv[:, slots.lambda_]
        lam = lam32.astype(xp.float64)
        greedy = q.argmax(axis=1)
        agree = pi[xp.arange(n), greedy]
        log_agree_min = xp.minimum(log_agree_min, log_pi[xp.arange(n), greedy])
        lam_min, lam_max = xp.minimum(lam_min, lam), xp.maximum(lam_max, lam)
        agree_min = xp.minimum(agree_min, agree)
        if t >= toy.warmup:
            agree_min_late = xp.minimum(agree_min_late, agree)
        floor_step = xp.where((floor_step < 0) & (lam32 == floors), t + 1, floor_step)
        if trace:
            for key, value in (("lambda", lam[0]), ("q_pi_agree", agree[0]), ("kl_ema", ema[0])):
                rows[key].append(float(value))
    to_np = (lambda a: xp.asnumpy(a)) if xp is not np else (lambda a: a)
    out = []
    for g in range(G):
        s = slice(g * base, (g + 1) * base)
        out.append(Batch(to_np(lam_min[s]), to_np(lam_max[s]), to_np(lam[s]), to_np(agree_min[s]),
                         to_np(log_agree_min[s]) / np.log(10), to_np(agree_min_late[s]), to_np(agree[s]),
                         to_np(floor_step[s]),
                         rows if (trace and g == 0) else None))
    return out


def controller_group(backend, name: str, source: KernelSource | None = None, seed_lambda: float | None = None):
    """(compiled kernel, seed λ, floor λ) for a contract's controller (or a variant of its source)."""
    contract = load()
    entry = contract.controller(name)
    source = source or load_kernel(entry.kernel, entry.symbol)
    floor = float(source.defines().get("MIN_LAMBDA", str(entry.value("floor"))).rstrip("f"))
    seed = entry.value("seed_lambda") if seed_lambda is None else seed_lambda
    return backend.compile(source, contract.slots), seed, floor


#: The robustness grid: π's own signal strength, the KL EMA rate, the KL target (each × seeds).
GRID = {"actor_lr": (0.25, 0.5, 1.0), "kl_ema_rate": (0.003, 0.01, 0.03), "kl_target": (0.5, 1.0, 2.0)}
#: The ablation's four factors: #define (or seed λ) changed from the original's value to the fix's.
FACTORS = {"floor": ("MIN_LAMBDA", "floor"), "asymmetric": ("LAMBDA_DECAY_RATE", "decay"),
           "tolerance": ("KL_TOLERANCE", "tolerance"), "seed": (None, "seed_lambda")}


def grid_points(grid: dict[str, tuple] = GRID) -> dict[str, np.ndarray]:
    """Every combination of the grid's values, as equal-length arrays."""
    mesh = np.meshgrid(*grid.values(), indexing="ij")
    return {k: m.ravel() for k, m in zip(grid, mesh)}


def ablation(backend, toy: Toy = Toy(), seeds: int = 20, grid: dict[str, tuple] = GRID, seed: int = 0):
    """All 16 combinations of the fixes applied to the original, each over the grid × seeds.

    Returns one row per variant: the fixes applied, runs, collapse fraction,
    median log10 q_pi_agree_min, median λ min and max. Variants are the
    original's source with #defines overridden to the fixed contract's values.
    """
    import itertools

    import pandas as pd

    contract = load()
    orig, fixed = contract.controller("original"), contract.controller("fixed")
    source = load_kernel(orig.kernel, orig.symbol)
    combos = list(itertools.product((False, True), repeat=len(FACTORS)))
    groups = []
    for combo in combos:
        on = dict(zip(FACTORS, combo))
        defines = {FACTORS[f][0]: float(fixed.value(FACTORS[f][1])) for f in FACTORS if on[f] and FACTORS[f][0]}
        variant = source.with_defines(**defines) if defines else source
        seed_lam = fixed.value("seed_lambda") if on["seed"] else orig.value("seed_lambda")
        floor = fixed.value("floor") if on["floor"] else orig.value("floor")
        groups.append((backend.compile(variant, contract.slots), seed_lam, floor))
    batches = simulate(backend, groups, toy, seeds=seeds, seed=seed, grid=grid_points(grid))
    rows = []
    for combo, b in zip(combos, batches):
        on = dict(zip(FACTORS, combo))
        label = "+".join(f for f in FACTORS if on[f]) or "original"
        rows.append({"variant": "fixed (all four)" if all(combo) else label, **on, "runs": len(b.collapsed),
                     "collapse_fraction": float(b.collapsed.mean()),
                     "median_log10_q_pi_agree_min": float(np.median(b.log10_q_pi_agree_min)),
                     "median_lambda_min": float(np.median(b.lambda_min)),
                     "median_lambda_max": float(np.median(b.lambda_max))})
    return pd.DataFrame(rows)


def robustness(backend, toy: Toy = Toy(), seeds: int = 20, grid: dict[str, tuple] = GRID, seed: int = 0):
    """Collapse fraction per controller and grid point (``fixed`` and ``original`` as shipped)."""
    import pandas as pd

    points = grid_points(grid)
    batches = simulate(backend, [controller_group(backend, n) for n in ("original", "fixed")], toy, seeds=seeds,
                       seed=seed, grid=points)
    rows = []
    for name, b in zip(("original", "fixed"), batches):
        collapsed = b.collapsed.reshape(-1, seeds)
        for i in range(collapsed.shape[0]):
            rows.append({"controller": name, **{k: float(v[i]) for k, v in points.items()},
                         "collapse_fraction": float(collapsed[i].mean()), "seeds": seeds})
    return pd.DataFrame(rows)


def run_one(name: str, backend: str = "auto", toy: Toy = Toy(), seed: int = 0) -> dict:
    """The CLI's run: one controller, one seed; the JSON's fields."""
    be = get_backend(backend)
    start = time.perf_counter()
    batch = simulate(be, [controller_group(be, name)], toy, seeds=1, seed=seed, trace=True)[0]
    steps_to_floor = int(batch.steps_to_lambda_floor[0])
    return {
        "controller": name,
        "backend": be.name,
        "device": be.describe(),
        "seed": seed,
        "lambda_min": float(batch.lambda_min[0]),
        "lambda_max": float(batch.lambda_max[0]),
        "lambda_final": float(batch.lambda_final[0]),
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repro.closed_loop", description=__doc__.splitlines()[0])
    parser.add_argument("--controller", required=True, help="contract entry: fixed or original")
    parser.add_argument("--backend", default="auto", choices=NAMES)
    parser.add_argument("--steps", type=int, default=Toy.steps)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the outcome (and the per-step trace) here")
    parser.add_argument("--plot", type=Path, help="draw λ and q_pi_agree over steps into this PNG")
    args = parser.parse_args(argv)
    if args.steps < 1:
        print("closed_loop: error: --steps must be at least 1", file=sys.stderr)
        return 2
    try:
        result = run_one(args.controller, args.backend, replace(Toy(), steps=args.steps), args.seed)
    except SuiteError as err:
        print(f"closed_loop: error: {err}", file=sys.stderr)
        return 2
    summary = {k: v for k, v in result.items() if k not in ("trace", "parameters")}
    for key, value in summary.items():
        print(f"{key:28s} {value}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    if args.plot:
        from analysis import plots

        plots.save(plots.closed_loop({args.controller: result}), args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
