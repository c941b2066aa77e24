"""The batched torch ports held to gymnasium's own ``step`` over random states and actions.

Tolerances: the float64 port against gymnasium (float64 state, float32 observation) within 1e-6 absolute on the
observation and the next state (the remaining difference is the float32 rounding of gymnasium's observation and
the order of a few float64 operations); the float32 port — what the study runs — within 2e-4 absolute on the
observation and state plus 2e-4 relative (Acrobot's RK4 step of 0.2 s in float32 at velocities up to 9π rad/s
errs by up to about 1e-4 relative). Terminated and reward agree
exactly except on states within the tolerance of the termination boundary (excluded and counted, at most 1 %).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the deep study needs PyTorch (pip install --group deep)")
gym = pytest.importorskip("gymnasium")

from repro.learning.deep import envs  # noqa: E402

N = 2000


def _random_states(name: str, rng: np.random.Generator) -> np.ndarray:
    if name == "Acrobot-v1":
        return np.column_stack([rng.uniform(-np.pi, np.pi, (N, 2)), rng.uniform(-4 * np.pi, 4 * np.pi, N),
                                rng.uniform(-9 * np.pi, 9 * np.pi, N)])
    return np.column_stack([rng.uniform(-2.4, 2.4, N), rng.uniform(-3, 3, N), rng.uniform(-0.2, 0.2, N),
                            rng.uniform(-3, 3, N)])


def _boundary(name: str, s: np.ndarray, tol: float) -> np.ndarray:
    """States whose next state lies within ``tol`` of the termination test's edge (either port may call them)."""
    if name == "Acrobot-v1":
        return np.abs(-np.cos(s[:, 0]) - np.cos(s[:, 1] + s[:, 0]) - 1.0) < tol
    return (np.abs(np.abs(s[:, 0]) - 2.4) < tol) | (np.abs(np.abs(s[:, 2]) - 12 * 2 * np.pi / 360) < tol)


@pytest.mark.parametrize("name", sorted(envs.ENVS))
@pytest.mark.parametrize("dtype, tol, rtol", [(torch.float64, 1e-6, 0.0), (torch.float32, 2e-4, 2e-4)])
def test_port_matches_gymnasium_step(name, dtype, tol, rtol):
    rng = np.random.default_rng(34)
    env = gym.make(name).unwrapped
    env.reset(seed=0)
    port = envs.make(name)
    states = _random_states(name, rng)
    actions = rng.integers(0, port.spec.n_actions, N)
    ref_obs, ref_next, ref_rew, ref_term = [], [], [], []
    for s, a in zip(states, actions, strict=True):
        env.state = s.copy()
        if name == "CartPole-v1":
            env.steps_beyond_terminated = None
        obs, rew, term, trunc, _ = env.step(int(a))
        ref_obs.append(obs)
        ref_next.append(np.asarray(env.state, dtype=np.float64))
        ref_rew.append(rew)
        ref_term.append(term)
    ns, obs, rew, term = port.step(torch.tensor(states, dtype=dtype), torch.tensor(actions))
    ref_next = np.array(ref_next)
    edge = _boundary(name, ref_next, 10 * tol)
    assert edge.mean() <= 0.01, f"{edge.sum()} states at the termination edge"
    np.testing.assert_allclose(obs.numpy(), np.array(ref_obs), rtol=rtol, atol=tol)
    if name == "CartPole-v1":  # Acrobot's angles wrap: compared through the observation's cos and sin
        np.testing.assert_allclose(ns.numpy(), ref_next, rtol=rtol, atol=tol)
    else:
        np.testing.assert_allclose(ns[:, 2:].numpy(), ref_next[:, 2:], rtol=rtol, atol=tol)
    keep = ~edge
    assert (term.numpy()[keep] == np.array(ref_term)[keep]).all()
    assert (rew.numpy()[keep] == np.array(ref_rew)[keep]).all()
    assert np.array(ref_term).any() and not np.array(ref_term).all(), "the sample must hold both outcomes"
