"""The deep loop: DQN-style Q, a behaviour policy π distilled towards softmax(Q/τ), the controller on the ISV.

All runs step together (tensors ``[R, …]``); one step is

1. act: π's logits on the current observation, an action by Gumbel-max (no host sync), the env port steps,
   finished episodes restart; the transition goes into the run's replay ring;
2. Q: a minibatch of ``batch`` transitions per run, Huber loss against r + γ·max Q_target(s') (Polyak target);
3. π: on the same minibatch, −aux·1[s ∈ R]·π(a*|s) − β·H(π(s)) + λ·KL(s), λ read from the ISV's λ slot;
   KL = KL(π‖softmax(Q/τ)) (``reverse``) or KL(softmax(Q/τ)‖π) (``forward``), Q detached;
4. the controller's KL: the minibatch mean of KL (site ``minibatch``) or its mean over the states outside R
   (site ``outside_R``); its EMA (rate ``ema_alpha``, from 0 or from the first measured KL) written into the
   ISV's KL slot; the controller kernel updates λ in place.

Random numbers are drawn per *seed* (``[U, …]``) and gathered to rows: the runs of one seed under different
controllers start from the same weights and states and see the same random numbers; only λ differs.
Evaluations (every ``eval_every`` steps, eager) record λ, the KL and its EMA, agreement (``agreement.py``) on the
last minibatch and on a probe batch of ``probe`` replay states per run drawn at the end of the warm-up, and the
last finished episode's return. On CUDA the step is captured whole in a CUDA graph (``graph=True``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from repro.core.contract import Slots
from repro.learning.deep import agreement, envs, nets
from repro.learning.deep.controller import ArmRows, Controllers, new_isv

SITES = ("minibatch", "outside_R")


@dataclass(frozen=True)
class LoopConfig:
    """What every run of one loop shares (steps, sizes, rates; units in the field comments)."""

    env: str = "Acrobot-v1"
    steps: int = 20000           # environment steps per run (one update of each net per step)
    eval_every: int = 250        # steps between evaluations
    warmup: int = 5000           # steps before the first judged evaluation; the probe batch is drawn here
    replay: int = 20000          # replay ring per run (transitions)
    batch: int = 64              # minibatch per run per step
    probe: int = 256             # probe states per run
    hidden: int = 64             # Q's two hidden layers
    pi_hidden: int = 64          # π's two hidden layers
    gamma: float = 0.99
    lr: float = 1e-3             # Adam, both nets
    polyak: float = 0.005        # target net: θ' ← θ' + polyak·(θ − θ') each step
    ema_alpha: float = 0.01      # KL EMA: ema ← ema + α·(KL − ema)
    region_obs: int = 4          # R = {s : obs[region_obs] > region_threshold}
    region_threshold: float = 1.0
    aux_action: int = 0          # a*: the action π's auxiliary reward pays for inside R


@dataclass
class Rows:
    """Per-run settings, ``[R]`` each (a cell's axis values, the arm's controller, the seed's index ``u``)."""

    u: np.ndarray                 # seed index (rows of one seed share init and random numbers)
    tau: np.ndarray               # Q's temperature
    aux: np.ndarray               # auxiliary reward
    beta: np.ndarray              # π's entropy coefficient
    target: np.ndarray            # the controller's KL target (ISV slot)
    forward: np.ndarray           # bool: forward KL
    site: np.ndarray              # index into SITES
    ema_first: np.ndarray         # bool: the EMA starts from the first measured KL (else from 0)
    resume: np.ndarray            # step at which the EMA restarts from 0 with λ kept (−1: never)
    arms: list[ArmRows] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.u)


def _tensor(x, device, dtype=torch.float32):
    return torch.as_tensor(np.asarray(x), device=device).to(dtype)


class DeepLoop:
    def __init__(self, cfg: LoopConfig, rows: Rows, backend, slots: Slots, device="cpu", mode: str = "batched",
                 seed: int = 0, trace_rows: np.ndarray | None = None):
        self.cfg, self.rows, self.slots, self.device = cfg, rows, slots, torch.device(device)
        dev = self.device
        self.env = envs.make(cfg.env)
        spec = self.env.spec
        R, U = len(rows), int(rows.u.max()) + 1
        self.R, self.U = R, U
        gen = torch.Generator(device="cpu").manual_seed(seed)  # init on the CPU: the same weights on any device
        torch.manual_seed(seed)
        self.u = _tensor(rows.u, dev, torch.long)
        q0 = nets.init_mlp(U, [spec.obs_dim, cfg.hidden, cfg.hidden, spec.n_actions], gen, "cpu")
        p0 = nets.init_mlp(U, [spec.obs_dim, cfg.pi_hidden, cfg.pi_hidden, spec.n_actions], gen, "cpu")
        s0 = envs.reset(self.env, U, gen, "cpu")
        self.q = [w[rows.u].to(dev).requires_grad_() for w in q0]
        self.q_target = [w.detach().clone() for w in self.q]
        self.pi = [w[rows.u].to(dev).requires_grad_() for w in p0]
        self.opt = torch.optim.Adam(self.q + self.pi, lr=cfg.lr, capturable=dev.type == "cuda")
        self.s = s0[rows.u].to(dev)
        self.obs = self.env.observe(self.s)
        self.ep_len = torch.zeros(R, device=dev, dtype=torch.long)
        self.ep_ret = torch.zeros(R, device=dev)
        self.last_ret = torch.full((R,), float("nan"), device=dev)
        N, D = cfg.replay, spec.obs_dim
        self.buf_obs = torch.zeros(R, N, D, device=dev)
        self.buf_next = torch.zeros(R, N, D, device=dev)
        self.buf_act = torch.zeros(R, N, device=dev, dtype=torch.long)
        self.buf_rew = torch.zeros(R, N, device=dev)
        self.buf_term = torch.zeros(R, N, device=dev)
        self.t = torch.zeros((), device=dev, dtype=torch.long)
        self.ar = torch.arange(R, device=dev)
        self.tau = _tensor(rows.tau, dev)[:, None, None]
        self.aux = _tensor(rows.aux, dev)[:, None]
        self.beta = _tensor(rows.beta, dev)[:, None]
        self.forward = _tensor(rows.forward, dev, torch.bool)[:, None]
        self.outside = _tensor(np.asarray(rows.site) == SITES.index("outside_R"), dev, torch.bool)
        self.ema_first = _tensor(rows.ema_first, dev, torch.bool)
        self.started = ~self.ema_first
        self.ema = torch.zeros(R, device=dev)
        self.kl_meas = torch.zeros(R, device=dev)
        self.mb_lp = torch.zeros(R, cfg.batch, device=dev)
        self.mb_match = torch.zeros(R, cfg.batch, device=dev, dtype=torch.bool)
        self.mb_tie = torch.zeros(R, cfg.batch, device=dev, dtype=torch.bool)
        self.mb_in_r = torch.zeros(R, cfg.batch, device=dev)
        self.isv = new_isv(R, slots, dev)
        self.isv[:, slots.target] = _tensor(rows.target, dev)
        self.isv[:, slots.kl] = 0.0
        for arm in rows.arms:
            self.isv[arm.start:arm.stop, slots.lambda_] = np.float32(arm.seed_lambda).item()
        self.controllers = Controllers(backend, self.isv, rows.arms, slots, mode)
        self.trace_rows = None if trace_rows is None else _tensor(trace_rows, dev, torch.long)
        if self.trace_rows is not None:
            k = len(trace_rows)
            self.trace_kl = torch.zeros(cfg.steps, k, device=dev)
            self.trace_lam = torch.zeros(cfg.steps, k, device=dev)
        self.probe_obs = None
        self.graph = None

    # -- one step ---------------------------------------------------------------------------------------------
    def _rand_rows(self, *shape) -> torch.Tensor:
        """Uniform (0, 1) numbers per seed, gathered to rows: ``[R, *shape]``."""
        return torch.rand((self.U, *shape), device=self.device)[self.u]

    def in_region(self, obs: torch.Tensor) -> torch.Tensor:
        return obs[..., self.cfg.region_obs] > self.cfg.region_threshold

    def step(self) -> None:
        cfg, env, spec = self.cfg, self.env, self.env.spec
        A, N = spec.n_actions, cfg.replay
        # 1. act
        with torch.no_grad():
            logits = nets.forward(self.pi, self.obs.unsqueeze(1)).squeeze(1)
            gumbel = -torch.log(-torch.log(self._rand_rows(A).clamp(1e-20, 1 - 1e-7)))
            action = (logits + gumbel).argmax(-1)
            ns, nobs, reward, term = env.step(self.s, action)
            pos = torch.remainder(self.t, N).view(1)
            self.buf_obs.index_copy_(1, pos, self.obs.unsqueeze(1))
            self.buf_next.index_copy_(1, pos, nobs.unsqueeze(1))
            self.buf_act.index_copy_(1, pos, action.unsqueeze(1))
            self.buf_rew.index_copy_(1, pos, reward.unsqueeze(1))
            self.buf_term.index_copy_(1, pos, term.float().unsqueeze(1))
            self.ep_len += 1
            done = term | (self.ep_len >= spec.max_steps)
            self.ep_ret += reward
            self.last_ret.copy_(torch.where(done, self.ep_ret, self.last_ret))
            self.ep_ret.masked_fill_(done, 0.0)
            self.ep_len.masked_fill_(done, 0)
            fresh = (self._rand_rows(spec.state_dim) * 2 - 1) * spec.reset_half_width
            self.s.copy_(torch.where(done.unsqueeze(1), fresh, ns))
            self.obs.copy_(env.observe(self.s))
            self.t += 1
            size = torch.clamp(self.t, max=N).float()
            idx = (self._rand_rows(cfg.batch) * size).long().clamp(max=N - 1)
            ar = self.ar[:, None]
            bo, bn = self.buf_obs[ar, idx], self.buf_next[ar, idx]
            ba, br, bt = self.buf_act[ar, idx], self.buf_rew[ar, idx], self.buf_term[ar, idx]
            target_q = br + cfg.gamma * (1 - bt) * nets.forward(self.q_target, bn).max(-1).values
        # 2. Q
        q = nets.forward(self.q, bo)
        q_a = q.gather(-1, ba.unsqueeze(-1)).squeeze(-1)
        loss_q = torch.nn.functional.smooth_l1_loss(q_a, target_q, reduction="none").mean(1).sum()
        # 3. π
        log_pi = torch.log_softmax(nets.forward(self.pi, bo), -1)
        qd = q.detach()
        log_pq = torch.log_softmax(qd / self.tau, -1)
        p = log_pi.exp()
        kl = torch.where(self.forward, (log_pq.exp() * (log_pq - log_pi)).sum(-1), (p * (log_pi - log_pq)).sum(-1))
        in_r = self.in_region(bo).float()
        entropy = -(p * log_pi).sum(-1)
        lam = self.isv[:, self.slots.lambda_].unsqueeze(1)
        loss_pi = (-self.aux * in_r * p[..., cfg.aux_action] - self.beta * entropy + lam * kl).mean(1).sum()
        self.opt.zero_grad(set_to_none=False)
        (loss_q + loss_pi).backward()
        self.opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(self.q_target, [w.detach() for w in self.q], cfg.polyak)
            # 4. the controller's KL, its EMA into the ISV, the kernel
            kd = kl.detach()
            out = 1 - in_r
            outside_mean = (kd * out).sum(1) / out.sum(1).clamp(min=1)
            self.kl_meas.copy_(torch.where(self.outside, outside_mean, kd.mean(1)))
            self.ema.copy_(torch.where(self.started, self.ema + cfg.ema_alpha * (self.kl_meas - self.ema),
                                       self.kl_meas))
            self.started.fill_(True)
            self.isv[:, self.slots.kl] = self.ema
            if self.trace_rows is not None:
                tt = (self.t - 1).view(1)
                self.trace_kl.index_copy_(0, tt, self.ema[self.trace_rows].unsqueeze(0))
            self.controllers.step()
            if self.trace_rows is not None:
                self.trace_lam.index_copy_(0, tt, self.isv[self.trace_rows, self.slots.lambda_].unsqueeze(0))
            lp, match, tie = agreement.per_state(log_pi.detach(), qd)
            self.mb_lp.copy_(lp)
            self.mb_match.copy_(match)
            self.mb_tie.copy_(tie)
            self.mb_in_r.copy_(in_r)

    # -- graph ------------------------------------------------------------------------------------------------
    def capture(self, warm_steps: int = 3) -> None:
        """Capture :meth:`step` in a CUDA graph (after ``warm_steps`` eager steps on a side stream, as PyTorch's
        whole-network capture recipe does); :meth:`advance` then replays it."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warm_steps):
                self.step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.step()
        return warm_steps

    def advance(self, n: int) -> None:
        for _ in range(n):
            if self.graph is not None:
                self.graph.replay()
            else:
                self.step()

    # -- evaluation -------------------------------------------------------------------------------------------
    @torch.no_grad()
    def draw_probe(self) -> None:
        """The probe batch: ``probe`` states of each run's replay, fixed from here on."""
        size = min(int(self.t.item()), self.cfg.replay)
        idx = (torch.rand(self.U, self.cfg.probe, device=self.device)[self.u] * size).long()
        self.probe_obs = self.buf_obs[self.ar[:, None], idx].clone()

    @torch.no_grad()
    def evaluate(self) -> dict[str, torch.Tensor]:
        """One evaluation's per-run values (``[R]`` each, on the device)."""
        s = self.slots
        out = {"lambda": self.isv[:, s.lambda_].clone(), "kl_ema": self.ema.clone(), "kl": self.kl_meas.clone(),
               "ret": self.last_ret.clone(), "mb_in_r": self.mb_in_r.mean(1)}
        for k, v in agreement.summarise(self.mb_lp, self.mb_match, self.mb_tie).items():
            out["mb_" + k] = v
        if self.probe_obs is not None:
            q = nets.forward(self.q, self.probe_obs)
            log_pi = torch.log_softmax(nets.forward(self.pi, self.probe_obs), -1)
            for k, v in agreement.summarise(*agreement.per_state(log_pi, q)).items():
                out["probe_" + k] = v
            top2 = q.topk(2, -1).values
            out["probe_gap"] = (top2[..., 0] - top2[..., 1]).median(-1).values
            out["probe_in_r"] = self.in_region(self.probe_obs).float().mean(1)
        return out

    def restart_ema(self, rows: torch.Tensor) -> None:
        """The resume event: the EMA restarts (from 0, or from the next KL where it starts from the first) with λ
        kept, as a checkpoint that did not save the EMA."""
        self.ema[rows] = 0.0
        self.isv[rows, self.slots.kl] = 0.0
        self.started[rows] = ~self.ema_first[rows]

    def run(self, graph: bool = False, progress=None) -> dict[str, np.ndarray]:
        """Every step of every run; returns ``{field: [n_evals, R]}`` plus ``eval_steps`` and (with trace rows)
        ``trace_kl``/``trace_lambda`` ``[steps, k]``."""
        cfg = self.cfg
        resume = np.asarray(self.rows.resume)
        records, steps_at = [], []
        done = int(self.t.item())  # a second call goes on from where the first stopped
        began = time.perf_counter()
        if graph and self.graph is None:
            done += self.capture()
        while done < cfg.steps:
            n = min(cfg.eval_every - done % cfg.eval_every, cfg.steps - done)
            self.advance(n)
            done += n
            if done % cfg.eval_every == 0:
                if self.probe_obs is None and done >= cfg.warmup:  # the first evaluation at or after the warm-up
                    self.draw_probe()
                records.append(self.evaluate())
                steps_at.append(done)
                hit = np.flatnonzero(resume == done)
                if hit.size:
                    self.restart_ema(torch.as_tensor(hit, device=self.device))
                if progress and len(records) % 20 == 0:
                    progress(f"step {done}/{cfg.steps} ({time.perf_counter() - began:.0f} s)")
        keys = records[-1].keys()
        out = {k: torch.stack([r.get(k, torch.full_like(records[-1][k], float("nan"))) for r in records]).cpu().numpy()
               for k in keys}
        out["eval_steps"] = np.array(steps_at)
        if self.trace_rows is not None:
            out["trace_kl"] = self.trace_kl.cpu().numpy()
            out["trace_lambda"] = self.trace_lam.cpu().numpy()
        out["seconds"] = np.array(time.perf_counter() - began)
        return out
