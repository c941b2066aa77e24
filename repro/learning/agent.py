"""The learners and the batched loop: every run of every controller advances one environment step at a time.

Per run (one ISV row each), per step:

- π (a softmax actor, logits θ over what it observes) picks the action; the environment steps.
- Q (tabular) learns by Q-learning from that experience (off-policy, discount γ).
- π's own signal is a one-step actor-critic on the environment's reward plus the grid's auxiliary reward:
  advantage δ = r_π + γ·V(o') − V(o) with a learned critic V over π's observations (the baseline), logits
  pushed by ``actor_lr``·δ·(onehot(a) − π), plus an entropy bonus ``entropy_bonus``·∇H(π(·|o)).
- Distillation: ``distill_lr``·λ·(p_Q − π) at the visited observation, p_Q = softmax(Q(s)/``q_temperature``)
  (the gradient of the cross-entropy toward Q's Boltzmann policy).
- KL(p_Q ‖ π) at the visited state, as an EMA (rate ``kl_ema_rate``), goes into the KL slot, the target
  into the target slot; the compiled controller kernel steps the run's ISV, and λ is read back for the
  next step.

Rewards are divided by the task's reward range (max − min over its table), so temperatures and the
auxiliary reward are in the same units on every task. Agreement is evaluated every ``eval_every`` steps over
every state visited so far: π's probability of Q's greedy action (ties: of the tied set), as the mean over
those states and as the minimum (the latter also as a log10, which does not underflow).

The second study adds axes per run, each 0 in the first study (:data:`AXES`): where the KL fed to
the controller is measured (``kl_site``: 0 the visited state, 1 the mean over a sample of ``replay_sample``
states drawn each step from a ring of the last ``replay_capacity`` visited states, 2 the even-numbered states
only: the EMA holds on odd ones), ``kl_before`` (1: π before this step's update), ``aux_odd`` (1: the auxiliary
reward is paid on odd-numbered states only) and ``features`` (d > 0: π is a linear softmax over d ±1 features
of the state fixed by seed, its critic tabular over states; 0: the tabular aliased view). It also measures
agreement with ties excluded (only states where Q's greedy action is unique; their count), on the odd states
and on the replay ring's entries, and per evaluation window the longest run of steps with λ at or below
``floor_lambda`` while the KL the controller sees is below ``quiet_kl`` (the incident's signature).

The loop runs compiled (``kernels/learning_loop.cuh``, the controller inside it): one call per controller
runs all its steps, a thread per run on the GPU and ranges of runs on every core of the host.
:mod:`repro.learning.reference` states the same loop with array operations; the tests hold the two together.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repro.core.contract import Slots
from repro.core.errors import SuiteError
from repro.core.isv import new_isv
from repro.core.kernel_source import KernelSource
from repro.learning.env import Tables

#: Most actions the compiled loop holds per state (``RLQ_L_MAX_A``; toy-text tasks have at most 6).
MAX_ACTIONS = 8
#: The second study's per-run axes (0: the first study's loop); ``kl_site`` values below.
AXES = ("kl_site", "kl_before", "aux_odd", "features")
KL_SITES = {"visited": 0, "replay": 1, "even": 2}


@dataclass(frozen=True)
class Learning:
    """The learners' parameters (the pre-registered file sets every one; units in the comments)."""

    gamma: float  # discount per step
    q_lr: float  # Q-learning step size
    q_temperature: float  # Boltzmann temperature of p_Q (reward-range units)
    actor_lr: float  # actor step size per unit advantage
    critic_lr: float  # step size of the actor's critic V
    distill_lr: float  # step size of the distillation gradient λ·(p_Q − π)
    kl_ema_rate: float  # EMA rate of the KL written to the KL slot (per step)
    kl_target: float  # KL target written to the target slot (nats)
    steps: int  # environment steps per run (= controller launches)
    eval_every: int  # steps between agreement evaluations
    default_max_episode_steps: int  # truncation where the task registers none (steps)


@dataclass(frozen=True)
class Arm:
    """One controller's runs: its kernel source, the contract's slots and the λ every run is seeded with."""

    name: str
    source: KernelSource
    slots: Slots
    seed_lambda: float


@dataclass(frozen=True)
class Measure:
    """The second study's loop-wide settings (zeros: the first study's loop)."""

    replay_capacity: int = 0  # the ring of past visited states (entries; > 0 wherever kl_site is replay)
    replay_sample: int = 0  # states drawn from it per step for the KL
    quiet_kl: float = 0.0  # the signature's "KL quiet": the KL slot below this (float32 nats; 0: never)
    floor_lambda: float = 0.0  # the signature's "λ at the floor": λ at or below this (float32)


#: The first study's loop: no ring, no signature thresholds.
FIRST_STUDY = Measure()


@dataclass
class Traces:
    """Per evaluation point × run (NumPy, ``[E, N]``): what the study judges."""

    steps: np.ndarray  # [E] the step after which each evaluation was taken
    lam: np.ndarray  # λ (float32 as the kernel left it)
    agree_mean: np.ndarray  # mean over visited states of π(Q's greedy action)
    log10_agree_min: np.ndarray  # log10 of the minimum over visited states
    kl_ema: np.ndarray  # the KL EMA fed to the kernel (nats)
    episode_return: np.ndarray  # mean return of the episodes finished in the window (env units; NaN: none)
    agree_unique: np.ndarray  # mean of π(Q's greedy action) over visited states whose greedy action is unique (NaN: none)
    log10_min_unique: np.ndarray  # log10 of the minimum over those states (inf: none)
    n_unique: np.ndarray  # how many visited states have a unique greedy action
    agree_odd: np.ndarray  # as agree_unique, over the odd-numbered visited states only
    log10_min_odd: np.ndarray
    agree_replay: np.ndarray  # as agree_unique, over the replay ring's entries (NaN without a ring)
    log10_min_replay: np.ndarray
    quiet_floor_run: np.ndarray  # longest run of steps in the window with λ ≤ floor_lambda and KL < quiet_kl


def per_run(grid: dict[str, np.ndarray], seeds: np.ndarray, n_groups: int) -> dict[str, np.ndarray]:
    """Each run's seed and grid values (NumPy ``[N]``), runs ordered group-major, then grid point, then seed."""
    K, P = len(seeds), len(grid["pi_view"])
    tile = lambda v, dtype: np.tile(np.repeat(np.asarray(v, dtype), K), n_groups)  # noqa: E731
    return {"seed": np.tile(np.asarray(seeds, np.uint64), n_groups * P),
            "beta": tile(grid["entropy_bonus"], np.float64), "aux_reward": tile(grid["aux_reward"], np.float64),
            "view": tile(grid["pi_view"], np.int64),
            **{k: tile(grid[k] if k in grid else np.zeros(P), np.int64) for k in AXES}}


def parameters(learning: Learning, tables: Tables, measure: Measure = FIRST_STUDY) -> np.ndarray:
    """The loop's ``par[]`` (the order of the enum in ``learning_loop.cuh``)."""
    L = learning
    return np.array([L.gamma, L.q_lr, L.q_temperature, L.actor_lr, L.critic_lr, L.distill_lr, L.kl_ema_rate,
                     L.kl_target, tables.reward_range, np.log(10), np.float32(measure.quiet_kl),
                     np.float32(measure.floor_lambda)], dtype=np.float64)


def scratch_doubles(tables: Tables, measure: Measure, features_max: int) -> int:
    """Doubles of state per run: Q, θ, V, visited, the replay ring, its count per state, the features."""
    S, A = tables.n_states, tables.n_actions
    return 2 * S * A + 3 * S + measure.replay_capacity + S * features_max


def check_axes(tables: Tables, runs: dict[str, np.ndarray], measure: Measure) -> int:
    """Refuse axis values the loop cannot run (one-line :class:`SuiteError`); the largest feature count."""
    S = tables.n_states
    if not set(np.unique(runs["kl_site"]).tolist()) <= set(KL_SITES.values()):
        raise SuiteError(f"kl_site must be one of {KL_SITES}")
    if (runs["kl_site"] == KL_SITES["replay"]).any() and not (measure.replay_capacity > 0 and measure.replay_sample > 0):
        raise SuiteError("a replay KL needs replay_capacity and replay_sample above 0")
    if not ((runs["features"] >= 0) & (runs["features"] <= S)).all():
        raise SuiteError(f"{tables.name}: features must lie in 0..{S} (the number of states)")
    return int(runs["features"].max(initial=0))


def run_loop(backend, tables: Tables, groups: list[Arm], learning: Learning, seeds: np.ndarray,
             grid: dict[str, np.ndarray], measure: Measure = FIRST_STUDY) -> Traces:
    """Run every group × grid point × seed; runs are ordered group-major, then grid point, then seed.

    ``grid``: equal-length arrays ``entropy_bonus``, ``aux_reward`` (reward-range units per step the actor
    takes its auxiliary action), ``pi_view`` (π sees ``s // pi_view``: that many consecutive states merged), and
    optionally the second study's :data:`AXES` (0 where absent).
    """
    S, A = tables.n_states, tables.n_actions
    if A > MAX_ACTIONS:
        raise SuiteError(f"{tables.name}: {A} actions; the learning loop holds at most {MAX_ACTIONS}")
    L = learning
    runs = per_run(grid, seeds, 1)
    n = len(runs["seed"])
    d_max = check_axes(tables, runs, measure)
    shared = {"cum": tables.cum, "next_state": tables.next_state, "reward": tables.reward,
              "terminated": tables.terminated, "initial_cum": tables.initial_cum,
              "par": parameters(L, tables, measure),
              "dims": np.array([S, A, tables.cum.shape[2], tables.max_episode_steps, L.steps, L.eval_every,
                                measure.replay_capacity, measure.replay_sample, d_max])}
    n_evals = L.steps // L.eval_every
    pending = [backend.compile_learner(g.source, g.slots).start(new_isv(g.slots, np.full(n, g.seed_lambda)),
                                                                {**runs, **shared}, n_evals,
                                                                scratch_doubles(tables, measure, d_max))
               for g in groups]  # on the GPU every controller's runs are in flight at once
    parts = [finish() for finish in pending]
    out = {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}
    return Traces(steps=np.arange(1, n_evals + 1) * L.eval_every, **out)  # the outputs are named as its fields
