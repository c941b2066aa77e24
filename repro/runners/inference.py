"""What a candidate kernel behaves as, measured from its behaviour alone (never from its source).

Which ISV slots change λ when perturbed (reads), which slots it writes, which
slot acts as the KL and which as the target, and the rule's constants: the
λ floor and ceiling it settles at, the per-step ramp and decay factors (the
float32 factor that reproduces every free step, where one does), and the
dead-zone edges (factor × target and whether the edge itself is inside the
band). ``analysis.judge.diagnosis`` compares this with the contract.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from repro.backends.base import CompiledKernel
from repro.core import libm
from repro.core.contract import Controller
from repro.core.f32 import F32, equal_bits
from repro.core.isv import new_isv, stray_writes
from repro.runners.probes import onsets, settled
from repro.runners.scenarios import FAR, PROBE_TARGETS, REF_TARGET

SETTLE_STEPS = 4000  # steps a λ0 grid runs to find where λ settles (decay 0.998 needs ~1500 from 1 to 0.05)


@dataclass(frozen=True)
class Edge:
    """A dead-zone edge: ``KL > target·factor`` (upper) or ``KL < target/factor`` (lower), or inclusive."""

    factor: float  # float32 factor, × for the upper edge, ÷ for the lower
    inclusive: bool  # the edge value itself moves λ (>=, <=)


@dataclass(frozen=True)
class Behaviour:
    """The rule a kernel behaves as. ``None`` where a quantity could not be measured."""

    reads: tuple[int, ...]  # slots whose value changes λ (λ's own included)
    writes: tuple[int, ...]  # slots other than λ's that it changes
    kl_slot: int | None  # the slot that acts as the observed KL (raising it ramps λ)
    target_slot: int | None  # the slot that acts as the target (raising it decays λ)
    floor: float | None = None  # λ, where it settles under sustained low KL
    ceiling: float | None = None  # λ, where it settles under sustained high KL
    ramp: float | None = None  # × per step
    ramp_exact: bool = False  # float32(λ·ramp) reproduces every free step
    decay: float | None = None
    decay_exact: bool = False
    upper: Edge | None = None
    lower: Edge | None = None
    notes: dict = field(default_factory=dict)
    history: bool = False  # λ from one ISV depends on the calls before it: state kept outside the ISV


def reads_and_roles(kernel: CompiledKernel, lambdas: tuple[float, ...],
                    tolerance: float) -> tuple[tuple[int, ...], int | None, int | None]:
    """Slots whose perturbation changes λ after one step, and the slots acting as KL and as target.

    Every slot but λ's starts at the reference target T (so a kernel reading its inputs
    from other slots still sees valid values); KL's contract slot is set far above, just above,
    in, just below and far below the documented band (``tolerance``), so a slot that only moves
    an edge shows too.
    A slot is read when multiplying it by 1e4 or 1e-4, or zeroing it, changes λ from any of
    ``lambdas`` (several, so that a λ0 sitting at a bound still shows the other direction).
    """
    s = kernel.slots
    n = s.isv_len
    tgt = F32(REF_TARGET)
    factors = (1e4, 1e-4, 0.0)
    near = 1.5 * tolerance
    regimes = (FAR, near, 1.0, 1.0 / near, 1.0 / FAR)
    others = np.array([slot for slot in range(n) if slot != s.lambda_])
    per_slot = np.repeat(others, len(factors))  # the slot each perturbed row changes
    scale = np.tile(np.asarray(factors, dtype=F32), others.size)
    configs = [(r, lam) for r in regimes for lam in lambdas]
    base = np.full((len(configs), n), tgt, dtype=F32)  # one per config
    base[:, s.lambda_] = [lam for _, lam in configs]
    base[:, s.kl] = [F32(tgt * regime) for regime, _ in configs]
    # A block per config: row 0 the baseline, then one perturbation each. One allocation for every block
    # (large enough for huge pages; a block alone is not).
    blocks = np.repeat(base[:, None, :], 1 + per_slot.size, axis=1)
    blocks[:, np.arange(1, 1 + per_slot.size), per_slot] = base[:, per_slot] * scale
    isv = blocks.reshape(-1, n)
    lam, _ = kernel.run_looped(isv, isv[None, :, s.kl].copy(), isv[None, :, s.target].copy())
    lam = lam[0].reshape(len(configs), -1)
    changed = ~equal_bits(lam[:, 1:], lam[:, :1])
    read = {s.lambda_, *(int(x) for x in per_slot[changed.any(axis=0)])}
    # Roles: from the in-band state (all inputs T), raise one slot ×100: a KL ramps λ, a target decays it.
    candidates = sorted(read - {s.lambda_})
    kl_slot = target_slot = None
    if candidates:
        role_keys = np.repeat(candidates, len(lambdas))  # the slot each row raises
        stacked = np.full((role_keys.size, n), tgt, dtype=F32)
        stacked[:, s.lambda_] = np.tile(lambdas, len(candidates))
        stacked[np.arange(role_keys.size), role_keys] = F32(tgt * FAR)
        lam1, _ = kernel.run_looped(stacked, stacked[None, :, s.kl], stacked[None, :, s.target])
        lam0 = stacked[:, s.lambda_]
        up = [int(slot) for slot in role_keys[lam1[0] > lam0]]
        down = [int(slot) for slot in role_keys[lam1[0] < lam0]]
        kl_slot = s.kl if s.kl in up else (up[0] if up else None)
        target_slot = s.target if s.target in down else (down[0] if down else None)
    return tuple(sorted(read)), kl_slot, target_slot


def depends_on_history(kernel: CompiledKernel, lambdas: tuple[float, ...], tolerance: float) -> bool:
    """Whether one ISV gives different λ after calls on other ISVs: the baselines of :func:`reads_and_roles`
    (each KL regime × each λ) run in one order and in the reverse order. A kernel whose step is a function of
    the ISV alone gives the same bits either way; one that keeps state elsewhere (a device variable) sees
    another call before each and may not (then every slot looks read: perturbing any row moves the next)."""
    s = kernel.slots
    tgt = F32(REF_TARGET)
    near = 1.5 * tolerance
    configs = [(r, lam) for r in (FAR, near, 1.0, 1.0 / near, 1.0 / FAR) for lam in lambdas]
    isv = np.full((len(configs), s.isv_len), tgt, dtype=F32)
    isv[:, s.lambda_] = [lam for _, lam in configs]
    isv[:, s.kl] = [F32(tgt * regime) for regime, _ in configs]
    out = []
    for rows in (isv, isv[::-1].copy()):
        lam, _ = kernel.run_looped(rows, rows[None, :, s.kl].copy(), rows[None, :, s.target].copy())
        out.append(lam[0])
    return not bool(np.all(equal_bits(out[0], out[1][::-1])))


def writes(kernel: CompiledKernel, lambda0: float) -> tuple[int, ...]:
    """Slots other than λ's whose bits change in one step from a sentinel-filled ISV (high, band, low KL)."""
    s = kernel.slots
    kl = np.array([[REF_TARGET * FAR, REF_TARGET, REF_TARGET / FAR]], dtype=F32)
    target = np.full(kl.shape, REF_TARGET, dtype=F32)
    _, isv = kernel.run_looped(new_isv(s, lambda0, 3), kl, target)
    return tuple(sorted({slot for _, slot in stray_writes(s, isv, kl[-1], target[-1])}))


def _run_in_layout(kernel: CompiledKernel, kl_slot: int, target_slot: int, lambda0: np.ndarray,
                   kl: float | np.ndarray, target: float | np.ndarray, steps: int) -> np.ndarray:
    """λ after each step ``[T, S]`` for constant per-run KL and target, in the inferred layout: KL and target
    written to the slots that act as them, every step."""
    lambda0 = np.asarray(lambda0, dtype=F32)
    runs = lambda0.size
    kl = np.broadcast_to(np.asarray(kl, dtype=F32), (runs,))
    target = np.broadcast_to(np.asarray(target, dtype=F32), (runs,))
    isv = new_isv(kernel.slots, lambda0)
    isv[:, kl_slot] = kl
    isv[:, target_slot] = target
    lam, _ = kernel.run_looped(isv, np.broadcast_to(kl, (steps, runs)), np.broadcast_to(target, (steps, runs)))
    return lam


def _factor(before: np.ndarray, after: np.ndarray) -> tuple[float | None, bool]:
    """The per-step factor: the float32 r with fl(λ·r) = next λ for every pair, else the median ratio."""
    if before.size == 0:
        return None, False
    ratio = after.astype(np.float64) / before.astype(np.float64)
    median = F32(np.median(ratio))
    guess = median.view(np.uint32).astype(np.int64)
    for offset in sorted(range(-32, 33), key=abs):
        r = np.array(guess + offset, dtype=np.uint32).view(F32)
        with np.errstate(all="ignore"):
            if equal_bits(F32(before * r), after).all():
                return float(r), True
    return float(median), False


def _edge(targets: np.ndarray, onset: np.ndarray, upper: bool) -> Edge | None:
    """The factor and inclusiveness that reproduce every target's onset (upper: t·k; lower: t/k)."""
    if not np.isfinite(onset).all():
        return None
    t = targets.astype(F32)
    ratio = np.median(onset.astype(np.float64) / t) if upper else np.median(t / onset.astype(np.float64))
    guess = F32(ratio).view(np.uint32).astype(np.int64)
    outward = F32(np.inf) if upper else F32(-np.inf)
    found: dict[bool, list] = {True: [], False: []}
    for offset in range(-64, 65):
        k = np.array(guess + offset, dtype=np.uint32).view(F32)
        edge = F32(t * k) if upper else F32(t / k)
        if equal_bits(onset, edge).all():
            found[True].append(k)
        if equal_bits(onset, np.nextafter(edge, outward)).all():
            found[False].append(k)
    every = found[False] + found[True]
    if not every:
        return None
    # the shortest: the factor a person would write (3.0 rather than 2.9999998 with the other comparison)
    k = min(every, key=lambda v: (len(np.format_float_positional(v, unique=True, trim="-")), float(v)))
    return Edge(float(k), not any(equal_bits(k, x) for x in found[False]))


def infer(kernel: CompiledKernel, controller: Controller) -> Behaviour:
    """Measure the rule ``kernel`` behaves as (about 0.2 s on the host backend)."""
    seed = controller.value("seed_lambda")
    floor_doc, ceiling_doc = controller.value("floor"), controller.value("ceiling")
    lambdas = (seed, float(np.sqrt(floor_doc * ceiling_doc)), 0.5 * ceiling_doc)
    read, kl_slot, target_slot = reads_and_roles(kernel, lambdas, controller.value("tolerance"))
    history = depends_on_history(kernel, lambdas, controller.value("tolerance"))
    written = writes(kernel, seed)
    if kl_slot is None or target_slot is None:
        return Behaviour(read, written, kl_slot, target_slot, history=history)
    run = functools.partial(_run_in_layout, kernel, kl_slot, target_slot)
    grid = np.unique(np.concatenate([libm.geomspace(1e-3, 1.0, 13), [floor_doc, ceiling_doc, seed,
                                                                   floor_doc * 1.01]]).astype(F32))
    tgt = F32(REF_TARGET)
    low = run(grid, tgt / F32(FAR), tgt, SETTLE_STEPS)
    high = run(grid, tgt * F32(FAR), tgt, SETTLE_STEPS // 10)
    # a rate moves λ every step, so two equal steps mean a clamp; a λ of 0, inf or NaN bounds nothing
    floors, ceilings = (np.where(np.isfinite(x) & (x > 0), x, F32(np.nan)) for x in (settled(low, 2), settled(high, 2)))
    floor = float(np.nanmin(floors)) if np.isfinite(floors).any() else None
    ceiling = float(np.nanmax(ceilings)) if np.isfinite(ceilings).any() else None
    lo = F32(floor) if floor is not None else F32(0)
    hi = F32(ceiling) if ceiling is not None else F32(np.inf)

    def free_pairs(lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        full = np.concatenate([grid[None, :], lam])
        before, after = full[:-1].ravel(), full[1:].ravel()
        keep = (before > lo) & (before < hi) & (after > lo) & (after < hi) & ~equal_bits(before, after)
        return before[keep], after[keep]

    ramp, ramp_exact = _factor(*free_pairs(high))
    decay, decay_exact = _factor(*free_pairs(low))
    targets = np.asarray(PROBE_TARGETS, dtype=F32)
    probe_lambda = F32(np.sqrt(float(lo if floor else floor_doc) * float(hi if ceiling else ceiling_doc)))

    def one_step(_kernel, lambda0, kl, target) -> np.ndarray:
        """λ after one step from ``lambda0`` for each KL, in the inferred layout (the probes' stepper)."""
        return run(np.full(np.size(kl), lambda0, dtype=F32), kl, target, 1)[0]

    found = onsets(kernel, targets, probe_lambda, one_step=one_step)
    return Behaviour(read, written, kl_slot, target_slot, floor, ceiling, ramp, ramp_exact, decay, decay_exact,
                     _edge(targets, found["ramp"], upper=True), _edge(targets, found["decay"], upper=False),
                     {"onset_targets": targets.tolist(), "onsets": {k: v.tolist() for k, v in found.items()}},
                     history)
