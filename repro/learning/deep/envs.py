"""Acrobot-v1 and CartPole-v1 (gymnasium 1.x, ``classic_control``) as batched PyTorch: one row per run.

Each ``step`` is gymnasium's ``step`` written in tensor ops over all runs at once (no Python loop over runs,
no host synchronisation: termination is a tensor). The arithmetic follows gymnasium's order of operations;
gymnasium integrates in float64 and returns float32 observations, the study runs the port in float32
(``tests/test_deep_env.py`` holds both dtypes to gymnasium's own ``step`` and states the tolerances).
Time limits (500 steps for both) are the caller's: :class:`repro.learning.deep.loop` truncates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class EnvSpec:
    """A task: its id, state and observation widths, action count, time limit (steps) and reset box half-width."""

    name: str
    state_dim: int
    obs_dim: int
    n_actions: int
    max_steps: int
    reset_half_width: float


class Acrobot:
    """gymnasium ``AcrobotEnv`` (book dynamics, no torque noise), state ``[R, 4]`` = θ1, θ2, θ̇1, θ̇2 (rad, rad/s)."""

    spec = EnvSpec("Acrobot-v1", 4, 6, 3, 500, 0.1)
    dt = 0.2
    m1 = m2 = l1 = 1.0
    lc1 = lc2 = 0.5
    i1 = i2 = 1.0
    g = 9.8
    max_vel_1 = 4 * math.pi
    max_vel_2 = 9 * math.pi

    def _dsdt(self, s: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        m1, m2, l1, lc1, lc2, i1, i2, g = self.m1, self.m2, self.l1, self.lc1, self.lc2, self.i1, self.i2, self.g
        theta1, theta2, dtheta1, dtheta2 = s.unbind(-1)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * torch.cos(theta2)) + i1 + i2
        d2 = m2 * (lc2**2 + l1 * lc2 * torch.cos(theta2)) + i2
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (-m2 * l1 * lc2 * dtheta2**2 * torch.sin(theta2)
                - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * torch.sin(theta2)
                + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - math.pi / 2) + phi2)
        ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * torch.sin(theta2) - phi2) / (
            m2 * lc2**2 + i2 - d2**2 / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return torch.stack((dtheta1, dtheta2, ddtheta1, ddtheta2), -1)

    def step(self, s: torch.Tensor, action: torch.Tensor):
        """``(next state, observation, reward, terminated)`` for states ``[R, 4]`` and actions ``[R]`` (0, 1, 2)."""
        a = action.to(s.dtype) - 1.0  # AVAIL_TORQUE = [-1, 0, +1]
        dt = self.dt
        dt2 = dt / 2.0
        k1 = self._dsdt(s, a)
        k2 = self._dsdt(s + dt2 * k1, a)
        k3 = self._dsdt(s + dt2 * k2, a)
        k4 = self._dsdt(s + dt * k3, a)
        ns = s + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        # wrap(x, -π, π): gymnasium subtracts or adds 2π until inside (remainder: the same for |x| < 3π)
        angles = torch.remainder(ns[..., :2] + math.pi, 2 * math.pi) - math.pi
        v1 = ns[..., 2].clamp(-self.max_vel_1, self.max_vel_1)
        v2 = ns[..., 3].clamp(-self.max_vel_2, self.max_vel_2)
        ns = torch.cat((angles, v1.unsqueeze(-1), v2.unsqueeze(-1)), -1)
        terminated = -torch.cos(ns[..., 0]) - torch.cos(ns[..., 1] + ns[..., 0]) > 1.0
        reward = torch.where(terminated, 0.0, -1.0).to(s.dtype)
        return ns, self.observe(ns), reward, terminated

    @staticmethod
    def observe(s: torch.Tensor) -> torch.Tensor:
        """``[cos θ1, sin θ1, cos θ2, sin θ2, θ̇1, θ̇2]`` as float32."""
        return torch.stack((torch.cos(s[..., 0]), torch.sin(s[..., 0]), torch.cos(s[..., 1]), torch.sin(s[..., 1]),
                            s[..., 2], s[..., 3]), -1).float()


class CartPole:
    """gymnasium ``CartPoleEnv`` (Euler), state ``[R, 4]`` = x (m), ẋ (m/s), θ (rad), θ̇ (rad/s)."""

    spec = EnvSpec("CartPole-v1", 4, 4, 2, 500, 0.05)
    gravity = 9.8
    masspole = 0.1
    total_mass = 1.0 + 0.1
    length = 0.5
    polemass_length = 0.1 * 0.5
    force_mag = 10.0
    tau = 0.02
    theta_threshold = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def step(self, s: torch.Tensor, action: torch.Tensor):
        """``(next state, observation, reward, terminated)``; reward 1 on every step a fresh episode takes
        (gymnasium's reward on the terminating step is 1 too)."""
        x, x_dot, theta, theta_dot = s.unbind(-1)
        force = torch.where(action == 1, self.force_mag, -self.force_mag).to(s.dtype)
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        temp = (force + self.polemass_length * torch.square(theta_dot) * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * torch.square(costheta) / self.total_mass))
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        ns = torch.stack((x + self.tau * x_dot, x_dot + self.tau * xacc, theta + self.tau * theta_dot,
                          theta_dot + self.tau * thetaacc), -1)
        terminated = ((ns[..., 0] < -self.x_threshold) | (ns[..., 0] > self.x_threshold)
                      | (ns[..., 2] < -self.theta_threshold) | (ns[..., 2] > self.theta_threshold))
        return ns, self.observe(ns), torch.ones_like(x), terminated

    @staticmethod
    def observe(s: torch.Tensor) -> torch.Tensor:
        return s.float()


ENVS = {"Acrobot-v1": Acrobot, "CartPole-v1": CartPole}


def make(name: str):
    """The batched port of gymnasium task ``name`` (Acrobot-v1 or CartPole-v1)."""
    return ENVS[name]()


def reset(env, n: int, generator: torch.Generator | None, device, dtype=torch.float32) -> torch.Tensor:
    """Fresh states ``[n, 4]``, uniform in ±``reset_half_width`` as gymnasium resets (its own RNG stream, not its bits)."""
    h = env.spec.reset_half_width
    return (torch.rand((n, env.spec.state_dim), generator=generator, device=device, dtype=dtype) * 2 - 1) * h
