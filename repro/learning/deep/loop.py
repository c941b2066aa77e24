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

Random numbers are drawn per *seed*: the runs of one seed under different controllers start from the same weights
and states and see the same random numbers; only λ differs. Two sources: torch's generator (``[U, …]`` per seed
index, gathered to rows: a run's numbers depend on the other seeds in the batch), or, where :class:`Rows` gives
per-row keys (``key``), a counter-based hash (:func:`counter_uniform`) of (key, stream, step, element): a run's
weights, states and draws then depend on its key alone, so that any split of the runs into batches (chunks,
shards) gives each run the same numbers.
Evaluations (every ``eval_every`` steps, eager) record λ, the KL and its EMA, agreement (``agreement.py``) on the
last minibatch and on a probe batch of ``probe`` replay states per run drawn at the end of the warm-up, and the
last finished episode's return. On CUDA the step is captured whole in a CUDA graph (``graph=True``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from repro.core.contract import Slots
from repro.core.errors import SuiteError
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
    key: np.ndarray | None = None       # int32 random key per run (rows of one seed share it): counter-based RNG
    pi_lr: np.ndarray | None = None     # π's Adam learning rate per run (Q keeps LoopConfig.lr); None: lr for both
    floor: np.ndarray | None = None     # the arm's λ floor (NaN: none): counted "at the floor" when λ ≤ floor
    lower_edge: np.ndarray | None = None  # the arm's dead zone's lower edge on the KL EMA (target/tolerance; NaN)

    def __len__(self) -> int:
        return len(self.u)



def device_for(backend) -> str:
    """The torch device the loop runs on with ``backend``: "cuda" beside CuPy, else "cpu" with one intra-op thread
    (these small tensors cost more to split than they give). One-line SuiteError where CuPy is asked for and torch
    sees no CUDA device."""
    if backend.name != "cupy":
        torch.set_num_threads(1)
        return "cpu"
    if not torch.cuda.is_available():
        raise SuiteError("--backend cupy: torch sees no CUDA device")
    return "cuda"


def _tensor(x, device, dtype=torch.float32):
    return torch.as_tensor(np.asarray(x), device=device).to(dtype)


#: Counter-RNG streams: one per use, so that no two uses share a draw.
S_ACT, S_RESET, S_REPLAY, S_PROBE, S_INIT_Q, S_INIT_PI, S_STATE0 = range(1, 8)
_GOLD = -0x61C88647            # 0x9E3779B9 as int32
_M1, _M2 = 0x7FEB352D, 0x846CA68B - (1 << 32)  # lowbias32's multipliers as int32


def mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 (a bijective 32-bit integer hash) on int32 tensors: wrapping products, logical shifts by masking."""
    x = x ^ ((x >> 16) & 0xFFFF)
    x = x * _M1
    x = x ^ ((x >> 15) & 0x1FFFF)
    x = x * _M2
    return x ^ ((x >> 16) & 0xFFFF)


def counter_uniform(key: torch.Tensor, stream: int, step, n: int) -> torch.Tensor:
    """``[R, n]`` float32 uniforms in (0, 1), exact multiples of 2⁻²⁴ (23 random bits): a hash of (row key
    ``[R]`` int32, ``stream``, ``step`` (int or 0-d tensor), element index). Integer arithmetic: the same bits on
    any device, whatever the batch."""
    a = mix32(key + stream * _GOLD)
    b = mix32(a + (step.to(torch.int32) if torch.is_tensor(step) else int(step)))
    idx = torch.arange(n, device=key.device, dtype=torch.int32) * _GOLD
    bits = mix32(b[:, None] + idx[None, :])
    return ((bits >> 9) & 0x7FFFFF).to(torch.float32) * 2.0 ** -23 + 2.0 ** -24


def init_mlp_keyed(key: torch.Tensor, sizes: list[int], stream: int) -> list[torch.Tensor]:
    """:func:`nets.init_mlp`'s shapes and bounds (±1/√fan_in) from :func:`counter_uniform` of each run's key."""
    params, k = [], 0
    R = key.shape[0]
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        bound = 1.0 / math.sqrt(fan_in)
        for shape in ((fan_in, fan_out), (1, fan_out)):
            u = counter_uniform(key, stream, k, shape[0] * shape[1]).view(R, *shape)
            params.append((u * 2 - 1) * bound)
            k += 1
    return params


class RowAdam:
    """Adam (PyTorch's defaults: β 0.9/0.999, ε 1e-8, no weight decay) with a learning rate per run ``[R]``,
    on-device state (capturable in a CUDA graph). Elementwise: each run is updated as if it trained alone."""

    def __init__(self, params: list[torch.Tensor], lr: torch.Tensor, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.betas, self.eps = params, betas, eps
        self.lr = [lr.view(-1, *([1] * (p.dim() - 1))) for p in params]
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = torch.zeros((), device=lr.device)

    @torch.no_grad()
    def step(self) -> None:
        b1, b2 = self.betas
        self.t += 1
        bc1 = 1 - torch.pow(b1, self.t)
        bc2_sqrt = torch.sqrt(1 - torch.pow(b2, self.t))
        grads = [p.grad for p in self.params]
        torch._foreach_lerp_(self.m, grads, 1 - b1)
        torch._foreach_mul_(self.v, b2)
        torch._foreach_addcmul_(self.v, grads, grads, 1 - b2)
        denom = torch._foreach_sqrt(self.v)
        torch._foreach_div_(denom, bc2_sqrt)
        torch._foreach_add_(denom, self.eps)
        for p, m, d, lr in zip(self.params, self.m, denom, self.lr, strict=True):
            p.sub_(lr / bc1 * m / d)


class DeepLoop:
    def __init__(self, cfg: LoopConfig, rows: Rows, backend, slots: Slots, device="cpu", mode: str = "batched",
                 seed: int = 0, trace_rows: np.ndarray | None = None, minibatch_stats: bool = True):
        self.cfg, self.rows, self.slots, self.device = cfg, rows, slots, torch.device(device)
        dev = self.device
        self.env = envs.make(cfg.env)
        spec = self.env.spec
        R, U = len(rows), int(rows.u.max()) + 1
        self.R, self.U = R, U
        self.u = _tensor(rows.u, dev, torch.long)
        q_sizes = [spec.obs_dim, cfg.hidden, cfg.hidden, spec.n_actions]
        p_sizes = [spec.obs_dim, cfg.pi_hidden, cfg.pi_hidden, spec.n_actions]
        self.key = None if rows.key is None else _tensor(np.asarray(rows.key, dtype=np.int64), "cpu", torch.int32)
        if self.key is None:
            gen = torch.Generator(device="cpu").manual_seed(seed)  # init on the CPU: the same weights on any device
            torch.manual_seed(seed)
            q0 = [w[rows.u] for w in nets.init_mlp(U, q_sizes, gen, "cpu")]
            p0 = [w[rows.u] for w in nets.init_mlp(U, p_sizes, gen, "cpu")]
            s0 = envs.reset(self.env, U, gen, "cpu")[rows.u]
        else:  # on the CPU from each run's key: the same weights on any device and in any batch
            q0, p0 = init_mlp_keyed(self.key, q_sizes, S_INIT_Q), init_mlp_keyed(self.key, p_sizes, S_INIT_PI)
            h = self.env.spec.reset_half_width
            s0 = (counter_uniform(self.key, S_STATE0, 0, spec.state_dim) * 2 - 1) * h
            self.key = self.key.to(dev)
        self.q = [w.to(dev).requires_grad_() for w in q0]
        self.q_target = [w.detach().clone() for w in self.q]
        self.pi = [w.to(dev).requires_grad_() for w in p0]
        capturable = dev.type == "cuda"
        if rows.pi_lr is None:
            self.opt, self.pi_opt = torch.optim.Adam(self.q + self.pi, lr=cfg.lr, capturable=capturable), None
        else:
            self.opt = torch.optim.Adam(self.q, lr=cfg.lr, capturable=capturable)
            self.pi_opt = RowAdam(self.pi, _tensor(rows.pi_lr, dev))
        self.s = s0.to(dev)
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
        self.any_forward = bool(np.any(rows.forward))  # else the forward KL is not computed (the same bits)
        self.minibatch_stats = minibatch_stats          # the minibatch's agreement each step (the mb_* fields)
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
        nan = np.full(R, np.nan)
        self.floor = _tensor(nan if rows.floor is None else rows.floor, dev)
        self.lower_edge = _tensor(nan if rows.lower_edge is None else rows.lower_edge, dev)
        self.n_floor = torch.zeros(R, device=dev, dtype=torch.int32)   # post-warm-up steps with λ at the floor
        self.n_pre = torch.zeros(R, device=dev, dtype=torch.int32)     # … and the KL EMA below the lower edge

    # -- one step ---------------------------------------------------------------------------------------------
    def _rand_rows(self, stream: int, n: int) -> torch.Tensor:
        """Uniform (0, 1) numbers per seed ``[R, n]``: torch's generator per seed index gathered to rows, or the
        counter hash of each row's key at this step."""
        if self.key is None:
            return torch.rand((self.U, n), device=self.device)[self.u]
        return counter_uniform(self.key, stream, self.t, n)

    def in_region(self, obs: torch.Tensor) -> torch.Tensor:
        return obs[..., self.cfg.region_obs] > self.cfg.region_threshold

    def step(self) -> None:
        cfg, env, spec = self.cfg, self.env, self.env.spec
        A, N = spec.n_actions, cfg.replay
        # 1. act
        with torch.no_grad():
            logits = nets.forward(self.pi, self.obs.unsqueeze(1)).squeeze(1)
            gumbel = -torch.log(-torch.log(self._rand_rows(S_ACT, A).clamp(1e-20, 1 - 1e-7)))
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
            fresh = (self._rand_rows(S_RESET, spec.state_dim) * 2 - 1) * spec.reset_half_width
            self.s.copy_(torch.where(done.unsqueeze(1), fresh, ns))
            self.obs.copy_(env.observe(self.s))
            self.t += 1
            size = torch.clamp(self.t, max=N).float()
            idx = (self._rand_rows(S_REPLAY, cfg.batch) * size).long().clamp(max=N - 1)
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
        kl = (p * (log_pi - log_pq)).sum(-1)
        if self.any_forward:
            kl = torch.where(self.forward, (log_pq.exp() * (log_pq - log_pi)).sum(-1), kl)
        in_r = self.in_region(bo).float()
        entropy = -(p * log_pi).sum(-1)
        lam = self.isv[:, self.slots.lambda_].unsqueeze(1)
        loss_pi = (-self.aux * in_r * p[..., cfg.aux_action] - self.beta * entropy + lam * kl).mean(1).sum()
        self.opt.zero_grad(set_to_none=False)
        if self.pi_opt is not None:
            for w in self.pi:
                if w.grad is not None:
                    w.grad.zero_()
        (loss_q + loss_pi).backward()
        self.opt.step()
        if self.pi_opt is not None:
            self.pi_opt.step()
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
            lam_now = self.isv[:, self.slots.lambda_]
            judged = (self.t > cfg.warmup).to(torch.int32)
            at_floor = (lam_now <= self.floor).to(torch.int32)
            self.n_floor += at_floor * judged
            self.n_pre += at_floor * (self.ema < self.lower_edge).to(torch.int32) * judged
            if self.trace_rows is not None:
                self.trace_lam.index_copy_(0, tt, self.isv[self.trace_rows, self.slots.lambda_].unsqueeze(0))
            if self.minibatch_stats:
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
        # A capture stream of its own (not torch's shared default): cuBLAS's workspace is kept per (handle, stream),
        # so graphs captured on one stream share it, and two loops replayed side by side would both write it.
        self.capture_stream = torch.cuda.Stream()
        with torch.cuda.graph(self.graph, stream=self.capture_stream):
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
        u = torch.rand(self.U, self.cfg.probe, device=self.device)[self.u] if self.key is None else \
            counter_uniform(self.key, S_PROBE, 0, self.cfg.probe)
        idx = (u * size).long()
        self.probe_obs = self.buf_obs[self.ar[:, None], idx].clone()

    @torch.no_grad()
    def evaluate(self) -> dict[str, torch.Tensor]:
        """One evaluation's per-run values (``[R]`` each, on the device)."""
        s = self.slots
        out = {"lambda": self.isv[:, s.lambda_].clone(), "kl_ema": self.ema.clone(), "kl": self.kl_meas.clone(),
               "ret": self.last_ret.clone()}
        if self.minibatch_stats:
            out["mb_in_r"] = self.mb_in_r.mean(1)
            for k, v in agreement.summarise(self.mb_lp, self.mb_match, self.mb_tie).items():
                out["mb_" + k] = v
        if self.probe_obs is not None:
            q = nets.forward(self.q, self.probe_obs)
            log_pi = torch.log_softmax(nets.forward(self.pi, self.probe_obs), -1)
            for k, v in agreement.summarise(*agreement.per_state(log_pi, q)).items():
                out["probe_" + k] = v
            lp, match, tie = agreement.per_state(log_pi, q)
            in_r = self.in_region(self.probe_obs)
            for k, v in agreement.summarise(lp, match, tie | ~in_r).items():  # inside R only (a*'s pull)
                out["probe_r_" + k] = v
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

    def run(self, graph: bool = False, progress=None, stop=None) -> dict[str, np.ndarray]:
        """Every step of every run; returns ``{field: [n_evals, R]}`` plus ``eval_steps`` and (with trace rows)
        ``trace_kl``/``trace_lambda`` ``[steps, k]``. ``stop`` (a ``threading.Event``), once set, ends the loop at
        its next evaluation with :class:`KeyboardInterrupt` (another thread was interrupted)."""
        cfg = self.cfg
        resume = np.asarray(self.rows.resume)
        records, steps_at = [], []
        done = int(self.t.item())  # a second call goes on from where the first stopped
        began = time.perf_counter()
        if graph and self.graph is None:
            done += self.capture()
        while done < cfg.steps:
            if stop is not None and stop.is_set():
                raise KeyboardInterrupt
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
        out["n_floor"] = self.n_floor.cpu().numpy()
        out["n_pre"] = self.n_pre.cpu().numpy()
        out["seconds"] = np.array(time.perf_counter() - began)
        return out
