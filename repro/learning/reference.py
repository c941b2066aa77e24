"""The learning loop stated with array operations (NumPy or CuPy): the reference the compiled loop is held to.

:mod:`repro.learning.agent` describes the loop and runs it compiled (``kernels/learning_loop.cuh``); this module
runs the same statement one array operation at a time (launch-bound on a GPU, hence not what the study runs).
The tests compare the two run by run.
"""

from __future__ import annotations

import numpy as np

from repro.backends.base import LEARN_OUTPUTS
from repro.core.isv import new_isv
from repro.learning import rng
from repro.learning.agent import Group, Learning, Traces, per_run
from repro.learning.env import BatchedEnv, Tables


def _softmax(xp, logits):
    z = logits - logits.max(axis=-1, keepdims=True)
    log_p = z - xp.log(xp.exp(z).sum(axis=-1, keepdims=True))
    return xp.exp(log_p), log_p


def simulate(backend, tables: Tables, groups: list[Group], learning: Learning, seeds: np.ndarray,
             grid: dict[str, np.ndarray]) -> Traces:
    """Run every group × grid point × seed; runs are ordered group-major, then grid point, then seed.

    ``grid``: equal-length arrays ``entropy_bonus``, ``aux_reward`` (reward-range units per step the actor
    takes its auxiliary action), ``pi_view`` (π sees ``s // pi_view``: that many consecutive states merged).
    """
    # a rule without a ceiling may take λ to inf and π's logits to NaN: measured ("diverged"), not warned about
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return _simulate(backend, tables, groups, learning, seeds, grid)


def _simulate(backend, tables: Tables, groups: list[Group], learning: Learning, seeds: np.ndarray,
              grid: dict[str, np.ndarray]) -> Traces:
    """The loop of :func:`simulate`."""
    xp = backend.xp
    L = learning
    S, A = tables.n_states, tables.n_actions
    runs = {k: xp.asarray(v) for k, v in per_run(grid, seeds, len(groups)).items()}
    beta, aux_r, view, run_seed = runs["beta"], runs["aux_reward"], runs["view"], runs["seed"]
    N = len(run_seed)
    base = N // len(groups)
    kernels = [backend.compile(g.source, g.slots) for g in groups]
    env = BatchedEnv(xp, tables)
    scale = tables.reward_range
    ar = xp.arange(N)
    # the auxiliary objective's preferred action per state: fixed per seed, unknown to Q
    aux_action = xp.stack([(rng.bits(xp, run_seed, s, rng.AUX) % np.uint64(A)).astype(xp.int64) for s in range(S)], 1)
    obs_of = xp.arange(S)[None, :] // view[:, None]  # [N, S]
    slots = groups[0].slots
    isv = xp.asarray(new_isv(slots, np.repeat([g.seed_lambda for g in groups], base)))
    target32 = xp.float32(L.kl_target)
    lam = isv[:, slots.lambda_].astype(xp.float64)
    q = xp.zeros((N, S, A))
    theta = xp.zeros((N, S, A))  # indexed by π's observation (≤ S of them)
    v = xp.zeros((N, S))
    ema = xp.zeros(N)
    visited = xp.zeros((N, S), dtype=bool)
    s = env.reset(rng.uniform(xp, run_seed, 0, rng.RESET))
    t_ep = xp.zeros(N, dtype=xp.int64)
    ep_ret, win_ret, win_done = xp.zeros(N), xp.zeros(N), xp.zeros(N)
    eye = xp.eye(A)
    n_eval = L.steps // L.eval_every
    out = {k: np.empty((n_eval, N), dtype=dtype) for k, dtype in LEARN_OUTPUTS.items()}
    to_np = xp.asnumpy if xp is not np else np.asarray
    for t in range(L.steps):
        visited[ar, s] = True
        o = s // view
        pi, log_pi = _softmax(xp, theta[ar, o])
        u = rng.uniforms(xp, run_seed, [(t, rng.ACTION), (t, rng.ENV), (t + 1, rng.RESET)])
        a = xp.minimum((xp.cumsum(pi, axis=1) <= u[:, :1]).sum(axis=1), A - 1)
        s2, r, term = env.step(s, a, u[:, 1])
        t_ep += 1
        done = term | (t_ep >= tables.max_episode_steps)
        rn = r / scale
        cont = L.gamma * (~term)
        q_sa = q[ar, s, a]
        q[ar, s, a] = q_sa + L.q_lr * (rn + cont * q[ar, s2].max(axis=1) - q_sa)
        o2 = s2 // view
        r_pi = rn + aux_r * (a == aux_action[ar, s])
        delta = r_pi + cont * v[ar, o2] - v[ar, o]
        v[ar, o] += L.critic_lr * delta
        p_q, log_p_q = _softmax(xp, q[ar, s] / L.q_temperature)
        entropy = -(pi * log_pi).sum(axis=1, keepdims=True)
        grad = (L.actor_lr * delta[:, None] * (eye[a] - pi) - beta[:, None] * pi * (log_pi + entropy)
                + L.distill_lr * lam[:, None] * (p_q - pi))
        theta[ar, o] += grad
        _, log_pi2 = _softmax(xp, theta[ar, o])
        kl = (p_q * (log_p_q - log_pi2)).sum(axis=1)
        ema = (1 - L.kl_ema_rate) * ema + L.kl_ema_rate * kl
        isv[:, slots.kl] = ema.astype(xp.float32)
        isv[:, slots.target] = target32
        for g, kernel in enumerate(kernels):
            kernel.batched_step(isv[g * base:(g + 1) * base])
        lam = isv[:, slots.lambda_].astype(xp.float64)
        ep_ret += r
        win_ret += xp.where(done, ep_ret, 0.0)
        win_done += done
        ep_ret = xp.where(done, 0.0, ep_ret)
        t_ep = xp.where(done, 0, t_ep)
        s = xp.where(done, env.reset(u[:, 2]), s2)
        if (t + 1) % L.eval_every == 0:
            e = (t + 1) // L.eval_every - 1
            mean, log_min = agreement(xp, q, theta, obs_of, visited)
            for key, value in (("lam", isv[:, slots.lambda_]), ("agree_mean", mean), ("log10_agree_min", log_min),
                               ("kl_ema", ema), ("episode_return", win_ret / xp.where(win_done > 0, win_done, xp.nan))):
                out[key][e] = to_np(value)
            win_ret[...], win_done[...] = 0.0, 0.0
    return Traces(steps=np.arange(1, n_eval + 1) * L.eval_every, **out)


def agreement(xp, q, theta, obs_of, visited):
    """(mean, log10 min) over visited states of π's probability of Q's greedy action(s), per run."""
    N = q.shape[0]
    greedy = q == q.max(axis=2, keepdims=True)  # [N, S, A]: ties count together
    _, log_pi = _softmax(xp, theta[xp.arange(N)[:, None], obs_of])  # π at each state's observation
    masked = xp.where(greedy, log_pi, -xp.inf)
    top = masked.max(axis=2, keepdims=True)
    log_agree = (top + xp.log(xp.exp(masked - top).sum(axis=2, keepdims=True)))[..., 0]  # log Σ_greedy π
    n_visited = visited.sum(axis=1)
    mean = xp.where(visited, xp.exp(log_agree), 0.0).sum(axis=1) / xp.maximum(n_visited, 1)
    log_min = xp.where(visited, log_agree, xp.inf).min(axis=1) / np.log(10)
    return mean, log_min
