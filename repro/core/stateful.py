"""The spec model of the stateful rules (``rule = "pid_lagrangian"`` and ``"geco"``), from their contract entries.

Written from the update equations the contract documents (repro/core/contract.py RULE_KINDS; the sources are
cited in each entry), not from the kernels: per step, the state is read from its float32 slots, updated in the
source's arithmetic (the PID Lagrangian in double, as rlpyt's Python floats; GECO in float32, as genesis's
tensors, its exponential in double rounded once), and written back rounded to float32, as the kernel must.
Vectorised over runs: every operation is elementwise, so each run is bit-identical to running it alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repro.core import libm
from repro.core.contract import Controller
from repro.core.f32 import F32


@dataclass(frozen=True)
class StatefulRule:
    """A stateful rule's kind and parameters (the contract's values), and its state slots' start values."""

    kind: str
    params: tuple[tuple[str, float], ...]
    state: tuple[tuple[str, float], ...]  # (name, start) in slot order; a delay line's slots as name[i]
    floor: float | None
    ceiling: float | None

    @classmethod
    def of(cls, c: Controller, **overrides: float) -> StatefulRule:
        names = {"pid_lagrangian": ("k_p", "k_i", "k_d", "d_delay", "p_ema_alpha", "d_ema_alpha"),
                 "geco": ("step_size", "alpha", "speedup"), "log_pi": ("k_p", "k_i", "i_min", "i_max")}[c.rule]
        names += ("seed_lambda",) if c.rule == "log_pi" else ()
        params = {k: c.value(k) for k in names} | overrides
        return cls(kind=c.rule, params=tuple(params.items()), state=tuple((s.name, s.start) for s in c.state),
                   floor=c.bound("floor"), ceiling=c.bound("ceiling"))

    def p(self, name: str) -> float:
        return dict(self.params)[name]

    def start(self, n_runs: int) -> dict[str, np.ndarray]:
        """The state before the first step, float32, one value per run."""
        return {name: np.full(n_runs, start, dtype=F32) for name, start in self.state}


def _exp_f32(x: np.ndarray) -> np.ndarray:
    """exp of float32 values in double (glibc's, as the host kernel's), rounded once to float32."""
    return libm.exp(np.asarray(x, dtype=np.float64)).astype(F32)


def _max0(x: np.ndarray) -> np.ndarray:
    """Python's ``max(0., x)``: x where x > 0., else 0. (a NaN and -0. give 0.)."""
    return np.where(x > 0.0, x, 0.0)


def _pid_step(rule: StatefulRule, lam, st: dict, kl, target):
    p = rule.p
    delay = int(p("d_delay"))
    ep, limit = kl.astype(np.float64), target.astype(np.float64)
    delta = ep - limit
    pid_i = _max0(st["integral"].astype(np.float64) + delta * p("k_i"))
    a_p, a_d = p("p_ema_alpha"), p("d_ema_alpha")
    delta_p = st["delta_p"].astype(np.float64) * a_p
    delta_p = delta_p + (1 - a_p) * delta
    cost_d = st["cost_d"].astype(np.float64) * a_d
    cost_d = cost_d + (1 - a_d) * ep
    at = st["ring_pos"]
    pos = np.where((at >= 0) & (at < delay), np.nan_to_num(at, nan=0.0), 0).astype(np.int64)
    ring = np.stack([st[f"ring[{i}]"] for i in range(delay)]) if delay > 1 else st["ring"][None, :]
    runs = np.arange(ring.shape[1])
    pid_d = _max0(cost_d - ring[pos, runs].astype(np.float64))
    pid_o = p("k_p") * delta_p + pid_i + p("k_d") * pid_d
    new = dict(st)
    new["integral"], new["delta_p"], new["cost_d"] = pid_i.astype(F32), delta_p.astype(F32), cost_d.astype(F32)
    ring = ring.copy()
    ring[pos, runs] = cost_d.astype(F32)
    for i in range(delay):
        new[f"ring[{i}]" if delay > 1 else "ring"] = ring[i]
    new["ring_pos"] = ((pos + 1) % delay).astype(F32)
    return _max0(pid_o).astype(F32), new


def _geco_step(rule: StatefulRule, lam, st: dict, kl, target):
    p = rule.p
    err, goal = kl.astype(F32), target.astype(F32)
    a = F32(p("alpha"))
    one_minus = F32(1.0 - p("alpha"))
    ema = np.where(st["started"] == 0, err, (one_minus * err).astype(F32) + (a * st["err_ema"]).astype(F32)).astype(F32)
    constraint = (goal - ema).astype(F32)
    scale = np.where(constraint > 0, F32(p("speedup") * p("step_size")), F32(p("step_size"))).astype(F32)
    arg = (scale * constraint).astype(F32)
    factor = _exp_f32(arg)
    new_lam = (lam.astype(F32) / factor).astype(F32)
    lo, hi = F32(rule.floor), F32(rule.ceiling)
    new_lam = np.where(new_lam < lo, lo, np.where(new_lam > hi, hi, new_lam)).astype(F32)  # NaN passes (torch.clamp)
    return new_lam, dict(st, err_ema=ema, started=np.ones_like(st["started"]))




def _log_pi_step(rule: StatefulRule, lam, st: dict, kl, target):
    p = rule.p
    kl, target, lam = kl.astype(F32), target.astype(F32), lam.astype(F32)
    ok = (kl > 0) & (target > 0) & np.isfinite(kl) & np.isfinite(target) & (lam > 0)
    ratio = np.where(ok, kl.astype(np.float64) / np.where(ok, target, 1).astype(np.float64), 1.0)
    e = libm.log(ratio).astype(F32)  # in double (glibc's, as the host kernel's), rounded once to float32
    i_new = (st["integral"] + (F32(p("k_i")) * e).astype(F32)).astype(F32)
    i_new = np.minimum(np.maximum(i_new, F32(p("i_min"))), F32(p("i_max"))).astype(F32)
    arg = ((F32(p("k_p")) * e).astype(F32) + i_new).astype(F32)
    new_lam = (F32(p("seed_lambda")) * _exp_f32(arg)).astype(F32)
    new_lam = np.minimum(np.maximum(new_lam, F32(rule.floor)), F32(rule.ceiling)).astype(F32)
    return np.where(ok, new_lam, lam).astype(F32), dict(st, integral=np.where(ok, i_new, st["integral"]).astype(F32))


_STEPS = {"pid_lagrangian": _pid_step, "geco": _geco_step, "log_pi": _log_pi_step}


def run(rule: StatefulRule, lambda0, kl: np.ndarray, target: np.ndarray,
        state: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """λ after each step (float32 ``[T, n_runs]``) and the state after the last, for ``kl``/``target`` of
    shape ``[T, n_runs]`` (or ``[T]``: one run), from ``lambda0`` and ``state`` (default: the start values)."""
    kl, target = np.asarray(kl, dtype=F32), np.asarray(target, dtype=F32)
    one = kl.ndim == 1
    if one:
        kl, target = kl[:, None], target[:, None]
    n = kl.shape[1]
    lam = np.broadcast_to(np.asarray(lambda0, dtype=F32), (n,)).copy()
    st = rule.start(n) if state is None else {k: np.asarray(v, dtype=F32).copy() for k, v in state.items()}
    out = np.empty(kl.shape, dtype=F32)
    step = _STEPS[rule.kind]
    with np.errstate(all="ignore"):
        for t in range(kl.shape[0]):
            lam, st = step(rule, lam, st, kl[t], target[t])
            out[t] = lam
    return (out[:, 0] if one else out), st
