"""The learning loop stated with array operations (NumPy or CuPy): the reference the compiled loop is held to.

:mod:`repro.learning.agent` describes the loop and runs it compiled (``kernels/learning_loop.cuh``); this module
runs the same statement one array operation at a time (launch-bound on a GPU, hence not what the study runs).
The tests compare the two run by run.
"""

from __future__ import annotations

import numpy as np

from repro.backends.base import LEARN_OUTPUTS
from repro.core.isv import new_isv
from repro.core.softmax import softmax
from repro.learning import rng
from repro.learning.agent import FIRST_STUDY, KL_SITES, Arm, Learning, Measure, Traces, per_run
from repro.learning.env import BatchedEnv, Tables


# a rule without a ceiling may take λ to inf and π's logits to NaN: measured ("diverged"), not warned about
@np.errstate(invalid="ignore", over="ignore", divide="ignore")
def run_reference(backend, tables: Tables, groups: list[Arm], learning: Learning, seeds: np.ndarray,
                  grid: dict[str, np.ndarray], measure: Measure = FIRST_STUDY) -> Traces:
    """Run every group × grid point × seed; runs are ordered group-major, then grid point, then seed.

    ``grid``: equal-length arrays ``entropy_bonus``, ``aux_reward`` (reward-range units per step the actor
    takes its auxiliary action), ``pi_view`` (π sees ``s // pi_view``: that many consecutive states merged).
    """
    xp = backend.xp
    L = learning
    S, A = tables.n_states, tables.n_actions
    runs = {k: xp.asarray(v) for k, v in per_run(grid, seeds, len(groups)).items()}
    beta, aux_r, run_seed = runs["beta"], runs["aux_reward"], runs["seed"]
    feat, site, before, odd_only = runs["features"], runs["kl_site"], runs["kl_before"] != 0, runs["aux_odd"] != 0
    linear = feat > 0
    view = xp.where(linear, 1, runs["view"])  # the linear policy's critic is tabular over states
    D = int(feat.max()) if len(feat) else 0
    cap, n_sample = measure.replay_capacity, measure.replay_sample
    quiet32, floor32 = xp.float32(measure.quiet_kl), xp.float32(measure.floor_lambda)
    N = len(run_seed)
    base = N // len(groups)
    kernels = [backend.compile(g.source, g.slots) for g in groups]
    env = BatchedEnv(xp, tables)
    ar = xp.arange(N)
    # the auxiliary objective's preferred action per state: fixed per seed, unknown to Q
    aux_action = xp.stack([(rng.random_bits(xp, run_seed, s, rng.AUX) % np.uint64(A)).astype(xp.int64) for s in range(S)], 1)
    # the linear policy's features: φ[run, state, k] = ±1 from the run's seed (k < its feature count)
    phi = xp.stack([xp.where((rng.random_bits(xp, run_seed, i, rng.FEATURE) >> np.uint64(63)) == 1, 1.0, -1.0)
                    for i in range(S * D)], 1).reshape(N, S, D) if D else xp.zeros((N, S, 0))
    phi = xp.where(xp.arange(D)[None, None, :] < feat[:, None, None], phi, 0.0)
    ring = xp.zeros((N, max(cap, 1)), dtype=xp.int64)
    quiet_run, quiet_max = xp.zeros(N, dtype=xp.int64), xp.zeros(N, dtype=xp.int64)

    def logits(states):
        """π's logits at one state per run: θ at its observation, or Σ_k ±W_k summed in k order (linear)."""
        x = theta[ar, states // view]
        w = xp.zeros((N, A))
        for k in range(D):
            signs = phi[ar, states, k][:, None]
            w = xp.where((k < feat)[:, None], w + xp.where(signs > 0, theta[:, k], -theta[:, k]), w)
        return xp.where(linear[:, None], w, x)

    def kl_at(states):
        p, log_p = softmax(xp, q[ar, states] / L.q_temperature)
        return (p * (log_p - softmax(xp, logits(states))[1])).sum(axis=1)

    def replay_kl(t):
        if cap == 0:
            return xp.zeros(N)
        filled = min(t + 1, cap)
        total = xp.zeros(N)
        for j in range(n_sample):
            z = ring[ar, (rng.random_bits(xp, run_seed, t * n_sample + j, rng.REPLAY) % np.uint64(filled)).astype(xp.int64)]
            total = total + kl_at(z)
        return total / n_sample
    slots = groups[0].slots
    # each group's rows seeded by its own layout: a stateful controller's slots start at its contract's values
    isv = xp.asarray(np.concatenate([new_isv(g.slots, np.full(base, g.seed_lambda, dtype=np.float32))
                                     for g in groups]))
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
        if cap:
            ring[:, t % cap] = s
        o = s // view
        pi, log_pi = softmax(xp, logits(s))
        u = rng.uniforms(xp, run_seed, [(t, rng.ACTION), (t, rng.ENV), (t + 1, rng.RESET)])
        a = xp.minimum((xp.cumsum(pi, axis=1) <= u[:, :1]).sum(axis=1), A - 1)
        s2, r, term = env.step(s, a, u[:, 1])
        t_ep += 1
        done = term | (t_ep >= tables.max_episode_steps)
        rn = r / tables.reward_range
        cont = L.gamma * (~term)
        q_sa = q[ar, s, a]
        q[ar, s, a] = q_sa + L.q_lr * (rn + cont * q[ar, s2].max(axis=1) - q_sa)
        r_pi = rn + aux_r * ((a == aux_action[ar, s]) & (~odd_only | (s % 2 == 1)))
        delta = r_pi + cont * v[ar, s2 // view] - v[ar, o]
        v[ar, o] += L.critic_lr * delta
        p_q, log_p_q = softmax(xp, q[ar, s] / L.q_temperature)
        entropy = -(pi * log_pi).sum(axis=1, keepdims=True)
        grad = (L.actor_lr * delta[:, None] * (eye[a] - pi) - beta[:, None] * pi * (log_pi + entropy)
                + L.distill_lr * lam[:, None] * (p_q - pi))
        is_replay = site == KL_SITES["replay"]
        kl_first = xp.where(is_replay, replay_kl(t), (p_q * (log_p_q - log_pi)).sum(axis=1))  # π before its update
        theta[ar, o] += xp.where(linear[:, None], 0.0, grad)
        for k in range(D):  # W_k += φ_k(s)·grad / d
            step = grad / xp.maximum(feat, 1)[:, None]
            theta[:, k] += xp.where((linear & (k < feat))[:, None], xp.where(phi[ar, s, k][:, None] > 0, step, -step), 0.0)
        _, log_pi2 = softmax(xp, logits(s))
        kl_then = xp.where(is_replay, replay_kl(t), (p_q * (log_p_q - log_pi2)).sum(axis=1))
        kl = xp.where(before, kl_first, kl_then)
        measured = (site != KL_SITES["even"]) | (s % 2 == 0)
        ema = xp.where(measured, (1 - L.kl_ema_rate) * ema + L.kl_ema_rate * kl, ema)
        isv[:, slots.kl] = ema.astype(xp.float32)
        isv[:, slots.target] = target32
        for g, kernel in enumerate(kernels):
            kernel.batched_step(isv[g * base:(g + 1) * base])
        lam = isv[:, slots.lambda_].astype(xp.float64)
        quiet_run = xp.where((isv[:, slots.lambda_] <= floor32) & (isv[:, slots.kl] < quiet32), quiet_run + 1, 0)
        quiet_max = xp.maximum(quiet_max, quiet_run)
        ep_ret += r
        win_ret += xp.where(done, ep_ret, 0.0)
        win_done += done
        ep_ret = xp.where(done, 0.0, ep_ret)
        t_ep = xp.where(done, 0, t_ep)
        s = xp.where(done, env.reset(u[:, 2]), s2)
        if (t + 1) % L.eval_every == 0:
            e = (t + 1) // L.eval_every - 1
            log_pi_all = xp.stack([softmax(xp, logits(xp.full(N, st)))[1] for st in range(S)], 1)  # [N, S, A]
            mean, log_min = agreement(xp, q, log_pi_all, visited)
            unique = unique_agreement(xp, q, log_pi_all)
            # how many of the ring's filled entries hold each state
            in_ring = (ring[:, :min(t + 1, cap), None] == xp.arange(S)).sum(axis=1)
            odd = (xp.arange(S) % 2 == 1)[None, :]
            sets = {"unique": visited.astype(float), "odd": (visited & odd).astype(float), "replay": in_ring}
            values = {"lam": isv[:, slots.lambda_], "agree_mean": mean, "log10_agree_min": log_min, "kl_ema": ema,
                      "episode_return": win_ret / xp.where(win_done > 0, win_done, xp.nan),
                      "n_unique": (visited & xp.isfinite(unique)).sum(axis=1),
                      "quiet_floor_run": quiet_max}
            for name, weight in sets.items():
                values[f"agree_{name}"], values[f"log10_min_{name}"] = weighted_agreement(xp, unique, weight)
            for key, value in values.items():
                out[key][e] = to_np(value)
            win_ret[...], win_done[...] = 0.0, 0.0
            quiet_max = quiet_run.copy()
    return Traces(steps=np.arange(1, n_eval + 1) * L.eval_every, **out)


def agreement(xp, q, log_pi, visited):
    """(mean, log10 min) over visited states of π's probability of Q's greedy action(s), per run (``log_pi``:
    ``[N, S, A]``, π's log-probabilities at every state)."""
    greedy = q == q.max(axis=2, keepdims=True)  # [N, S, A]: ties count together
    masked = xp.where(greedy, log_pi, -xp.inf)
    top = masked.max(axis=2, keepdims=True)
    log_agree = (top + xp.log(xp.exp(masked - top).sum(axis=2, keepdims=True)))[..., 0]  # log Σ_greedy π
    mean = xp.where(visited, xp.exp(log_agree), 0.0).sum(axis=1) / xp.maximum(visited.sum(axis=1), 1)
    log_min = xp.where(visited, log_agree, xp.inf).min(axis=1) / np.log(10)
    return mean, log_min


def unique_agreement(xp, q, log_pi):
    """``[N, S]`` log π(Q's greedy action) where that action is unique, NaN at a tie."""
    greedy = q == q.max(axis=2, keepdims=True)
    one = greedy.sum(axis=2) == 1
    return xp.where(one, xp.where(greedy, log_pi, 0.0).sum(axis=2), xp.nan)


def weighted_agreement(xp, log_agree, weight):
    """(mean, log10 min) of π(greedy) over states with ``weight`` > 0 and a unique greedy action, each state
    counted ``weight`` times (the replay ring's entries); NaN mean and +inf minimum where there is none."""
    judged = (weight > 0) & xp.isfinite(log_agree)
    w = xp.where(judged, weight, 0.0)
    n = w.sum(axis=1)
    total = xp.where(judged, w * xp.exp(xp.where(judged, log_agree, 0.0)), 0.0).sum(axis=1)
    mean = xp.where(n > 0, total / xp.where(n > 0, n, 1.0), xp.nan)
    log_min = xp.where(judged, log_agree, xp.inf).min(axis=1) / np.log(10)
    return mean, log_min
