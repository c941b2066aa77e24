"""The spec model of the stateful rules: one registry (:data:`KINDS`), each kind's step beside its equations, and
the spec models of one's own that a contract entry names (``model = "PATH.py"``: :func:`load_model`).

Written from the update equations each kind documents (the sources are cited in each entry), not from the kernels:
per step, the state is read from its float32 slots, updated in the source's arithmetic (the PID Lagrangian in
double, as rlpyt's Python floats; GECO in float32, as genesis's tensors, its exponential in double rounded once),
and written back rounded to float32, as the kernel must. Vectorised over runs: every operation is elementwise, so
each run is bit-identical to running it alone.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from repro.core import libm
from repro.core.errors import SuiteError
from repro.core.f32 import F32
from repro.core.paths import shown

#: The documented properties every stateful rule's step is given beside its own (floor and ceiling: None where
#: documented as absent); each is required of its entry.
COMMON = ("seed_lambda", "floor", "ceiling")


@dataclass(frozen=True)
class Kind:
    """A stateful rule kind: the state its entry must declare, the documented properties its step reads, and the
    step (the spec model).

    ``step(p, lam, state, kl, target) -> (lam, state)``, elementwise over runs: ``p`` maps each of COMMON and
    ``params`` to the contract's value (a Python float, as the contract writes it: a kernel's ``f`` literal is
    ``np.float32(p[...])``); ``lam``, ``kl``, ``target`` are float32 ``[n_runs]``; ``state`` maps each state slot's
    name (``KEY``, or ``KEY[i]`` for a ``count`` of slots) to float32 ``[n_runs]``. It returns λ and every state
    slot after the step, float32 ``[n_runs]``, as the kernel leaves them in the ISV.
    """

    state: tuple[str, ...]  # the [NAME.state.KEY] tables an entry of this kind must declare
    params: tuple[str, ...]  # documented properties the step reads beyond COMMON, each required of the entry
    step: Callable
    path: Path | None = None  # the model file a kind of one's own was read from (its errors name it); None: the suite's

    @property
    def origin(self) -> str:
        return "" if self.path is None else shown(self.path)

    @property
    def required(self) -> tuple[str, ...]:
        return COMMON + tuple(k for k in self.params if k not in COMMON)


@dataclass(frozen=True)
class StatefulRule:
    """A stateful rule's kind and parameters (the contract's values), and its state slots' start values."""

    kind: str
    params: tuple[tuple[str, float | None], ...]
    state: tuple[tuple[str, float], ...]  # (name, start) in slot order; a delay line's slots as name[i]
    floor: float | None
    ceiling: float | None
    model: Kind | None = None  # None: KINDS[kind]

    @classmethod
    def of(cls, c, **overrides: float) -> StatefulRule:
        """The rule of contract entry ``c`` (a repro.core.contract.Controller, which imports this module); ``overrides``
        replace named values."""
        model = None if c.model is None else load_model(c.model)
        kind = model or KINDS[c.rule]
        params = {k: c.bound(k) if k in ("floor", "ceiling") else c.value(k) for k in kind.required} | overrides
        return cls(kind=c.rule, params=tuple(params.items()), state=tuple((s.name, s.start) for s in c.state),
                   floor=params["floor"], ceiling=params["ceiling"], model=model)

    @property
    def rule(self) -> Kind:
        return self.model or KINDS[self.kind]

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


def _pid_step(p, lam, st: dict, kl, target):
    delay = int(p["d_delay"])
    ep, limit = kl.astype(np.float64), target.astype(np.float64)
    delta = ep - limit
    pid_i = _max0(st["integral"].astype(np.float64) + delta * p["k_i"])
    a_p, a_d = p["p_ema_alpha"], p["d_ema_alpha"]
    delta_p = st["delta_p"].astype(np.float64) * a_p
    delta_p = delta_p + (1 - a_p) * delta
    cost_d = st["cost_d"].astype(np.float64) * a_d
    cost_d = cost_d + (1 - a_d) * ep
    at = st["ring_pos"]
    pos = np.where((at >= 0) & (at < delay), np.nan_to_num(at, nan=0.0), 0).astype(np.int64)
    ring = np.stack([st[f"ring[{i}]"] for i in range(delay)]) if delay > 1 else st["ring"][None, :]
    runs = np.arange(ring.shape[1])
    pid_d = _max0(cost_d - ring[pos, runs].astype(np.float64))
    pid_o = p["k_p"] * delta_p + pid_i + p["k_d"] * pid_d
    new = dict(st)
    new["integral"], new["delta_p"], new["cost_d"] = pid_i.astype(F32), delta_p.astype(F32), cost_d.astype(F32)
    ring = ring.copy()
    ring[pos, runs] = cost_d.astype(F32)
    for i in range(delay):
        new[f"ring[{i}]" if delay > 1 else "ring"] = ring[i]
    new["ring_pos"] = ((pos + 1) % delay).astype(F32)
    return _max0(pid_o).astype(F32), new


def _geco_step(p, lam, st: dict, kl, target):
    err, goal = kl.astype(F32), target.astype(F32)
    a = F32(p["alpha"])
    one_minus = F32(1.0 - p["alpha"])
    ema = np.where(st["started"] == 0, err, (one_minus * err).astype(F32) + (a * st["err_ema"]).astype(F32)).astype(F32)
    constraint = (goal - ema).astype(F32)
    scale = np.where(constraint > 0, F32(p["speedup"] * p["step_size"]), F32(p["step_size"])).astype(F32)
    arg = (scale * constraint).astype(F32)
    factor = _exp_f32(arg)
    new_lam = (lam.astype(F32) / factor).astype(F32)
    lo, hi = F32(p["floor"]), F32(p["ceiling"])
    new_lam = np.where(new_lam < lo, lo, np.where(new_lam > hi, hi, new_lam)).astype(F32)  # NaN passes (torch.clamp)
    return new_lam, dict(st, err_ema=ema, started=np.ones_like(st["started"]))


#: The stateful rule kinds of the suite's own (``rule = "…"``): a new kind is one entry here, its step beside it.
#: The contract takes its name, requires its state tables and its documented properties from the entry alone.
KINDS = {
    #: The PID Lagrangian of Stooke, Achiam, Abbeel 2020 as rlpyt ships it (CppoPID.optimize_agent):
    #: Δ = KL − target; I ← max(0, I + K_I·Δ); P ← α_p·P + (1 − α_p)·Δ; D̄ ← α_d·D̄ + (1 − α_d)·KL;
    #: λ = max(0, K_P·P + I + K_D·max(0, D̄ − D̄[t − d_delay])) (a ring of d_delay slots holds the past D̄).
    "pid_lagrangian": Kind(state=("integral", "delta_p", "cost_d", "ring_pos", "ring"),
                           params=("k_p", "k_i", "k_d", "d_delay", "p_ema_alpha", "d_ema_alpha"), step=_pid_step),
    #: GECO (Rezende & Viola 2018) as applied-ai-lab/genesis ships it (utils/geco.py GECO.loss), on the KL:
    #: e ← KL on the first step, else (1 − α)·KL + α·e; c = e − target; λ ← clamp(λ·exp(s·η·c), floor, ceiling)
    #: with s = speedup where c < 0 (the constraint met; the source's goal − err > 0), else 1.
    "geco": Kind(state=("err_ema", "started"), params=("step_size", "alpha", "speedup"), step=_geco_step),
}

#: What a model of one's own defines (docs/commands.md, "A stateful rule of one's own").
MODEL_NAMES = ("STATE", "PARAMS", "step")


def load_model(path: Path | str) -> Kind:
    """The stateful rule kind a contract entry's ``model = "PATH.py"`` defines: ``STATE`` (the state keys its entry
    declares), ``PARAMS`` (the documented properties its step reads beyond COMMON) and ``step`` (see :class:`Kind`).

    The file is the contract author's code, run in this process as any Python module (not confined: the
    candidate's kernel is, its judge is not). Read again when its text changes (a key of its digest). A missing
    file, a wrong definition or an exception while loading is a :class:`SuiteError` naming the file (and line).
    """
    path = Path(path).resolve()
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise SuiteError(f"spec model file not found: {shown(path)}") from None
    except OSError as err:
        raise SuiteError(f"spec model file {shown(path)} cannot be read: {err.strerror}") from None
    return _load(path, hashlib.sha256(text).hexdigest(), text)


@lru_cache(maxsize=16)
def _load(path: Path, digest: str, text: bytes) -> Kind:
    name = f"rlq_model_{digest[:16]}"
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, path))
    sys.modules[name] = module  # a dataclass or a pickled function of the model finds its module
    try:
        exec(compile(text, str(path), "exec"), module.__dict__)  # the text digested, not a later copy
    except Exception as err:  # the author's code: any exception is the file's error, in one line
        sys.modules.pop(name, None)
        raise _raised(path, err, "while loading") from None
    where = shown(path)
    missing = [k for k in MODEL_NAMES if k not in module.__dict__]
    if missing:
        raise SuiteError(f"{where}: a spec model defines {', '.join(MODEL_NAMES)}; it lacks {', '.join(missing)}")
    state, params, step = module.STATE, module.PARAMS, module.step
    for what, names in (("STATE", state), ("PARAMS", params)):
        if not isinstance(names, tuple | list) or not all(isinstance(n, str) and n.isidentifier() for n in names):
            raise SuiteError(f"{where}: {what} is a tuple of names (identifiers), not {names!r}")
    if not state:
        raise SuiteError(f"{where}: STATE names at least one state slot (a rule without state is a band rule)")
    try:
        inspect.signature(step).bind(None, None, None, None, None)
    except (TypeError, ValueError):
        raise SuiteError(f"{where}: step takes (p, lam, state, kl, target), not {_signature(step)}") from None
    return Kind(state=tuple(state), params=tuple(params), step=step, path=path)


def _signature(f) -> str:
    try:
        return f"{getattr(f, '__name__', 'step')}{inspect.signature(f)}"
    except (TypeError, ValueError):
        return repr(f)


def _raised(path: Path, err: BaseException, when: str) -> SuiteError:
    """The error a model's exception becomes: the model file and its line that raised, and the exception."""
    line = getattr(err, "lineno", None) if isinstance(err, SyntaxError) else None
    if line is None:
        frames = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename) == path]
        line = frames[-1].lineno if frames else None
    message = str(err).splitlines()[0] if str(err) else ""
    return SuiteError(f"{shown(path)}{f':{line}' if line else ''}: the spec model raised {type(err).__name__}"
                      f"{': ' + message if message else ''} {when}")


def _checked(rule: StatefulRule, out, n: int, names: tuple[str, ...]) -> tuple[np.ndarray, dict]:
    """A model of one's own's step result, as the step's contract says (else a one-line error naming the file)."""
    where = rule.model.origin

    def array(what: str, a) -> np.ndarray:
        if not isinstance(a, np.ndarray) or a.dtype != F32 or a.shape != (n,):
            got = f"{a.dtype} {list(a.shape)}" if isinstance(a, np.ndarray) else type(a).__name__
            raise SuiteError(f"{where}: step returned {what} as {got}: float32 [{n}] (one value per run) expected")
        return a

    if not isinstance(out, tuple) or len(out) != 2 or not isinstance(out[1], dict):
        raise SuiteError(f"{where}: step returns (λ, state): a float32 array and a dict of the state's arrays")
    lam, st = out
    if tuple(sorted(st)) != tuple(sorted(names)):
        raise SuiteError(f"{where}: step returned the state {sorted(st)}, not the contract's {sorted(names)}")
    return array("λ", lam), {k: array(f"state {k!r}", v) for k, v in st.items()}


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
    p, step, own = dict(rule.params), rule.rule.step, rule.model is not None
    names = tuple(st)
    with np.errstate(all="ignore"):
        for t in range(kl.shape[0]):
            if not own:
                lam, st = step(p, lam, st, kl[t], target[t])
            else:  # the author's code: given copies (it may write in place), its answer checked
                try:
                    got = step(dict(p), lam.copy(), {k: v.copy() for k, v in st.items()}, kl[t].copy(), target[t].copy())
                except Exception as err:  # any exception is the model file's error, in one line
                    raise _raised(rule.model.path, err, f"at step {t}") from None
                lam, st = _checked(rule, got, n, names)
            out[t] = lam
    return (out[:, 0] if one else out), st
