"""A gymnasium toy-text task as arrays, stepped for many runs at once with the backend's array module.

The tables come from the environment's own transition table ``P[s][a] = [(p, s', r, terminated), …]``;
an outcome is drawn exactly as gymnasium's ``categorical_sample`` does (the first outcome whose cumulative
probability exceeds a uniform), so given the same uniforms the stepper reproduces ``env.step()`` bit for
bit (tested). Truncation follows the registered ``max_episode_steps`` (or the study's default where the
environment registers none); a finished episode restarts from the initial-state distribution.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from repro.core.errors import SuiteError


@dataclass(frozen=True)
class Tables:
    """One environment's transition table, padded to the largest outcome count (NumPy arrays)."""

    name: str
    cum: np.ndarray  # [S, A, M] cumulative outcome probabilities (padding repeats the last)
    next_state: np.ndarray  # [S, A, M] int64
    reward: np.ndarray  # [S, A, M] float64 (the environment's units)
    terminated: np.ndarray  # [S, A, M] bool
    initial_cum: np.ndarray  # [S] cumulative initial-state distribution
    max_episode_steps: int  # truncation horizon (steps)

    @property
    def n_states(self) -> int:
        return self.cum.shape[0]

    @property
    def n_actions(self) -> int:
        return self.cum.shape[1]

    @property
    def reward_range(self) -> float:
        """max − min reward over the table (the study's reward unit), 1 when all rewards are equal."""
        spread = float(self.reward.max() - self.reward.min())
        return spread if spread > 0 else 1.0


def make(name: str, default_max_steps: int):
    """(gymnasium env, :class:`Tables`) for a registered discrete environment that exposes ``P``."""
    try:
        import gymnasium
    except ImportError:
        raise SuiteError("the learning study needs gymnasium (pip install --group study)") from None
    try:
        with warnings.catch_warnings():  # an old version's DeprecationWarning would add lines to a one-line error
            warnings.simplefilter("ignore")
            env = gymnasium.make(name)
    except Exception as err:  # gymnasium raises several types for unknown or broken ids
        raise SuiteError(f"unknown or unusable gymnasium environment {name!r}: {str(err).splitlines()[0]}") from None
    raw = env.unwrapped
    if not hasattr(raw, "P") or not hasattr(raw, "initial_state_distrib") or getattr(raw, "fickle_passenger", False):
        raise SuiteError(f"{name}: not a tabular environment with a transition table P (the study needs one)")
    return env, tables_of(name, raw, env.spec.max_episode_steps or default_max_steps)


def tables_of(name: str, raw, max_steps: int) -> Tables:
    S, A = raw.observation_space.n, raw.action_space.n
    M = max(len(raw.P[s][a]) for s in range(S) for a in range(A))
    cum = np.zeros((S, A, M))
    nxt = np.zeros((S, A, M), dtype=np.int64)
    rew = np.zeros((S, A, M))
    term = np.zeros((S, A, M), dtype=bool)
    for s in range(S):
        for a in range(A):
            outcomes = raw.P[s][a]
            c = np.cumsum(np.asarray([o[0] for o in outcomes]))  # as categorical_sample computes it
            k = len(outcomes)
            cum[s, a, :k], cum[s, a, k:] = c, c[-1]
            for j in range(M):
                _, ns, r, t = outcomes[min(j, k - 1)]
                nxt[s, a, j], rew[s, a, j], term[s, a, j] = ns, r, t
    return Tables(name, cum, nxt, rew, term, np.cumsum(np.asarray(raw.initial_state_distrib)), int(max_steps))


def first_above(xp, cum, u):
    """``argmax(cum > u)`` per row, as ``categorical_sample`` (0 when no entry exceeds u)."""
    return (cum > u[:, None]).astype(xp.int8).argmax(axis=1)  # int8: argmax over bools is not on every backend


class BatchedEnv:
    """The tables on the device, stepped for ``[N]`` runs at once."""

    def __init__(self, xp, tables: Tables):
        self.xp, self.t = xp, tables
        self.cum, self.next_state = xp.asarray(tables.cum), xp.asarray(tables.next_state)
        self.reward, self.terminated = xp.asarray(tables.reward), xp.asarray(tables.terminated)
        self.initial_cum = xp.asarray(tables.initial_cum)

    def reset(self, u):
        """Initial states for uniforms ``u`` [N]."""
        return first_above(self.xp, self.xp.broadcast_to(self.initial_cum, (u.shape[0], self.t.n_states)), u)

    def step(self, s, a, u):
        """(next state, reward, terminated) for states ``s``, actions ``a`` and uniforms ``u`` [N]."""
        i = first_above(self.xp, self.cum[s, a], u)
        return self.next_state[s, a, i], self.reward[s, a, i], self.terminated[s, a, i]
