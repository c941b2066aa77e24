"""The closed-loop toy: a model of Q→π distillation with the real controller kernel in the loop.

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

import itertools
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from repro.backends.base import Backend, CompiledKernel
from repro.core.isv import new_isv
from repro.core.softmax import softmax

COLLAPSE = 1e-6  # q_pi_agree below this at any step counts as a collapse (the incident reached 1e-22)
#: What a traced run keeps per step (run 0): λ, q_pi_agree, the KL EMA.
TRACED = ("lambda", "q_pi_agree", "kl_ema")


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
        return self.log10_q_pi_agree_min < math.log10(COLLAPSE)


@dataclass(frozen=True)
class Subject:
    """One controller variant the toy drives: its compiled kernel, the λ it starts from, and its floor (λ).

    The floor only labels the outcome (the first step at which λ sits on it); it
    comes from the contract or from :func:`repro.runners.probes.settled_floor`, never
    from the source text.
    """

    kernel: CompiledKernel
    seed_lambda: float
    floor: float


def run_toy(backend: Backend, subjects: list[Subject], toy: Toy, seeds: int, seed: int = 0,
            grid: dict[str, np.ndarray] | None = None, trace: bool = False, stepper=None,
            progress=None) -> list[Batch]:
    """Run ``seeds`` × grid points per subject, every subject on the same noise; one :class:`Batch` per subject.

    ``grid``: per-base-run values of ``actor_lr``, ``kl_ema_rate``, ``kl_target``
    (equal-length arrays); the base runs are those values × ``seeds``. ``stepper(isv)``
    advances every run's ISV row by one controller step (default: one batched harness call per subject).
    ``progress(steps_done)``, when given, is called after each tenth of ``toy.steps``.

    On the host (NumPy) the subjects are split over threads, one share per core: each run's row is computed on its
    own (the noise is drawn per base run and tiled over subjects), so a subject's batch is the same bits in any
    share, and NumPy's loops, glibc's exp/log and the harness call all run without the GIL.
    """
    shares = _shares(len(subjects)) if backend.xp is np and stepper is None else 1
    if shares == 1:
        return _run_batch(backend, subjects, toy, seeds, seed, grid, trace, stepper, progress)
    cut = [len(subjects) * i // shares for i in range(shares + 1)]
    stop = threading.Event()  # set when this thread stops waiting (Ctrl-C): the shares end within one step
    with ThreadPoolExecutor(shares, thread_name_prefix="toy") as pool:
        parts = [pool.submit(_run_batch, backend, subjects[a:b], toy, seeds, seed, grid, trace and i == 0, None,
                             progress if i == 0 else None, stop) for i, (a, b) in enumerate(itertools.pairwise(cut))]
        try:
            return [batch for part in parts for batch in part.result()]
        except BaseException:
            stop.set()
            raise


def _shares(n_subjects: int) -> int:
    """How many threads :func:`run_toy` splits ``n_subjects`` over: one per core this process may run on."""
    return max(1, min(n_subjects, len(os.sched_getaffinity(0))))


def _run_batch(backend: Backend, subjects: list[Subject], toy: Toy, seeds: int, seed: int,
               grid: dict[str, np.ndarray] | None, trace: bool, stepper, progress,
               stop: threading.Event | None = None) -> list[Batch]:
    """:func:`run_toy` over ``subjects`` in one batch (every subject's runs as rows of the same arrays); ``stop``,
    once set, ends it before its next step (its result is then no batch: the caller is leaving)."""
    xp, fn = backend.xp, backend.math  # fn: exp and log (the host's are glibc's: the same bits on every CPU)
    grid = grid or {}
    n_points = len(next(iter(grid.values()))) if grid else 1
    base = n_points * seeds
    K, G = toy.n_actions, len(subjects)
    # per run, the same for every subject: the grid point's value (else the toy's), repeated over its seeds
    actor_lr, ema_rate, target = (
        xp.asarray(np.tile(np.repeat(np.asarray(grid.get(k, [getattr(toy, k)] * n_points), float), seeds), G))
        for k in ("actor_lr", "kl_ema_rate", "kl_target"))
    rng = np.random.default_rng(seed)
    true = rng.standard_normal((base, K))
    best = true.argmax(axis=1)
    favoured = (best + 1 + rng.integers(0, K - 1, base)) % K  # π's own objective's favourite, never Q's best
    own = true.copy()
    own[np.arange(base), favoured] = true[np.arange(base), best] + toy.conflict
    own_d = xp.asarray(np.tile(own, (G, 1)))
    true_d = xp.asarray(np.tile(true, (G, 1)))
    n = G * base
    slots = subjects[0].kernel.slots
    # each subject's rows seeded by its own layout: a stateful controller's slots start at its contract's values
    isv = xp.asarray(np.concatenate([new_isv(s.kernel.slots, np.full(base, s.seed_lambda, dtype=np.float32))
                                     for s in subjects]))
    floors = xp.asarray(np.repeat(np.float32([s.floor for s in subjects]), base))

    def batched_stepper(isv) -> None:
        """The production stepper: one batched harness call per subject per step, on the device ISV rows."""
        for g, subject in enumerate(subjects):
            subject.kernel.batched_step(isv[g * base : (g + 1) * base])

    stepper = stepper or batched_stepper
    target32 = target.astype(xp.float32)
    q = xp.zeros((n, K))
    own_est = xp.zeros((n, K))  # the actor's own value estimates, learned from the same rewards
    theta = xp.zeros((n, K))
    ema = xp.zeros(n)
    lam = isv[:, slots.lambda_].astype(xp.float64)
    lam_min, lam_max = xp.full(n, np.inf), xp.full(n, -np.inf)
    agree_min, agree_min_late, log_agree_min = xp.full(n, np.inf), xp.full(n, np.inf), xp.full(n, np.inf)
    floor_step = xp.full(n, -1, dtype=xp.int64)
    noise_rng = np.random.default_rng(seed + 1)
    rows = {key: [] for key in TRACED} if trace else None
    every = max(1, toy.steps // 10)
    # λ of a rule without a ceiling (rllib's) may overflow to inf and its Q/π arithmetic give NaN: such a run
    # is counted as diverged (Batch.lambda_max, q_pi_agree_final), not warned about on every step.
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(toy.steps):
            if stop is not None and stop.is_set():
                return []
            if progress and t and t % every == 0:
                progress(t)
            noise = xp.asarray(np.tile(noise_rng.standard_normal((base, K)), (G, 1)))
            q += toy.q_lr * (true_d + toy.reward_noise * noise - q)
            own_est += toy.q_lr * (own_d + toy.reward_noise * noise - own_est)
            p_q, log_p_q = softmax(fn, q / toy.q_temperature)
            pi, _ = softmax(fn, theta)
            advantage = own_est - own_est.mean(axis=1, keepdims=True)
            theta += actor_lr[:, None] * advantage + toy.distill_lr * lam[:, None] * (p_q - pi)
            pi, log_pi = softmax(fn, theta)
            kl = (p_q * (log_p_q - log_pi)).sum(axis=1)
            ema = (1 - ema_rate) * ema + ema_rate * kl
            isv[:, slots.kl] = ema.astype(xp.float32)
            isv[:, slots.target] = target32
            stepper(isv)
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
                for key, value in zip(TRACED, (lam[0], agree[0], ema[0]), strict=True):
                    rows[key].append(float(value))
    to_np = xp.asnumpy if xp is not np else (lambda a: a)
    out = []
    for g in range(G):
        s = slice(g * base, (g + 1) * base)
        out.append(Batch(to_np(lam_min[s]), to_np(lam_max[s]), to_np(lam[s]), to_np(agree_min[s]),
                         to_np(log_agree_min[s]) / np.log(10), to_np(agree_min_late[s]), to_np(agree[s]),
                         to_np(floor_step[s]),
                         rows if g == 0 else None))
    return out
