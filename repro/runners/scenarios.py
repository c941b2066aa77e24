"""The scenario catalogue: named, parameterised, seeded KL traces, and replay of recorded ones.

A scenario is what the training loop would write into the ISV, step by step:
the observed KL (slot 488), the KL target (slot 491), and the λ it starts
from. Every value is float32; every random scenario takes a seed and the same
seed gives the same bits. Traces that sit at the dead zone's edges take the
controller's documented tolerance from the contract.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from repro.core.contract import Controller
from repro.core.errors import SuiteError
from repro.core.f32 import F32
from repro.core.spec import Rule, band_edges, steps_to_double, steps_to_settle

#: The KL target the scripted training loop writes (nats). The rule is
#: scale-free (it compares KL with target·tol), so any positive value serves.
REF_TARGET = 0.02
#: How far outside the band "high" and "low" KL sit (×, ÷ the target).
FAR = 100.0
REGIMES = {"high": FAR, "low": 1.0 / FAR, "band": 1.0}


@dataclass(frozen=True)
class Scenario:
    """A KL trace to feed the controller. ``kl``/``target`` are float32 ``[T]`` (T steps)."""

    name: str
    family: str
    kl: np.ndarray
    target: np.ndarray
    lambda0: float  # λ in slot 486 before step 1
    description: str
    params: dict = field(default_factory=dict)
    inputs: tuple[tuple[str, str], ...] = ()  # a case's unusual inputs as written: (slot, text), in order

    @property
    def steps(self) -> int:
        return int(self.kl.shape[0])

    def __post_init__(self) -> None:
        kl = np.array(self.kl, dtype=F32)
        target = np.broadcast_to(np.asarray(self.target, dtype=F32), kl.shape).copy()
        kl.flags.writeable = target.flags.writeable = False  # shared: the gate builds each catalogue once
        object.__setattr__(self, "kl", kl)
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "lambda0", F32(self.lambda0))


def _const(value: float, steps: int) -> np.ndarray:
    return np.full(steps, value, dtype=F32)


def _blocks(values: list[float], each: int) -> np.ndarray:
    return np.repeat(np.asarray(values, dtype=F32), each)


def case(controller: Controller, spec: str, steps: int = 4) -> Scenario:
    """A short scenario for one unusual input, e.g. ``"lambda=nan,kl=high"`` or ``"target=-0"``.

    Slots not named take a valid default: λ = the seed, target = REF_TARGET,
    KL = the target (in band). KL may name a regime (high, low, band) or a value;
    any value is parsed by ``float`` (nan, +inf, -0, 1e-40 …).
    """
    values = {"lambda": controller.value("seed_lambda"), "target": REF_TARGET, "kl": "band"}
    inputs = []
    for part in spec.split(","):
        key, _, raw = part.partition("=")
        key, raw = key.strip(), raw.strip()
        if key not in values or not raw:
            raise SuiteError(f"malformed case {spec!r}: expected slot=value with slot in lambda, kl, target")
        values[key] = raw if key == "kl" and raw in REGIMES else _parse_value(raw, spec)
        inputs.append((key, raw))
    target, kl = values["target"], values["kl"]
    if isinstance(kl, str):  # a regime: relative to the target, or to REF_TARGET where the target is unusual
        kl = F32((target if np.isfinite(target) and target > 0 else REF_TARGET) * REGIMES[kl])
    return Scenario(spec, "bad_values", _const(kl, steps), _const(target, steps), values["lambda"],
                    f"unusual input {spec}", {"case": spec}, tuple(inputs))


def _parse_value(raw: str, spec: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise SuiteError(f"malformed case {spec!r}: {raw!r} is not a number") from None


#: Values that the guards (KL, target or λ ≤ 0) must leave λ unchanged for.
GUARD_VALUES = ("0", "-0", "-1", "-1e-40", "-inf")
#: Unusual inputs in the catalogue's bad-value family.
BAD_VALUES = ("nan", "+inf", "-inf", "0", "-0", "-1", "1e-40", "-1e-40")


def guard_cases() -> list[str]:
    """Case specs for the guard property: each non-positive value in each slot, in each KL regime."""
    cases = [f"kl={v}" for v in GUARD_VALUES]
    for slot in ("target", "lambda"):
        cases += [f"{slot}={v},kl={r}" for v in GUARD_VALUES for r in REGIMES]
    return cases


#: Where a rule has no floor (ceiling), the ramp (decay) scenarios start this factor below
#: (above) the seed λ instead: a power of two, so the start is exact. Not a bound.
UNBOUNDED_START = 1024.0


def start_points(controller: Controller) -> tuple[float, float]:
    """λ0 of ``ramp_from_floor`` and ``decay_from_ceiling``: the floor and the ceiling, or the seed ÷/× 1024 where absent."""
    seed = controller.value("seed_lambda")
    floor, ceiling = controller.bound("floor"), controller.bound("ceiling")
    return (seed / UNBOUNDED_START if floor is None else floor, seed * UNBOUNDED_START if ceiling is None else ceiling)


def catalogue(controller: Controller, seed: int = 0) -> list[Scenario]:
    """Every catalogue scenario for ``controller`` (its seed λ, bounds and band).

    Sustained scenarios last long enough to double (halve) λ twice at the rule's
    rates, the high-KL ones also to climb from the low start back to the seed λ,
    and never less than the in-repo controllers' lengths (60, 1000, 1600).
    """
    lam0 = controller.value("seed_lambda")
    low, high = start_points(controller)
    rule = Rule.of(controller)
    climb = math.ceil(math.log(lam0 / low) / math.log(rule.rate("ramp"))) + 10  # from the low start back to the seed
    if controller.bound("ceiling") is not None:  # and on to the ceiling (TF-Agents: 1e-15 to 1e17 at ×1.5)
        climb = max(climb, math.ceil(math.log(high / low) / math.log(rule.rate("ramp"))) + 10)
    up_steps = max(60, 2 * steps_to_double(rule.rate("ramp")), climb)
    down_steps = max(1000, 2 * steps_to_double(1 / rule.rate("decay")))
    tgt = REF_TARGET
    hi, lo = tgt * FAR, tgt / FAR
    rng = np.random.default_rng(seed)
    out = [
        Scenario("aligned", "sustained", _const(lo, down_steps), tgt, lam0,
                 "KL far below the band (the collapse: Q and π agree, λ decays)", {"kl_over_target": 1 / FAR}),
        Scenario("diverged", "sustained", _const(hi, up_steps), tgt, lam0,
                 "KL far above the band (λ ramps to the ceiling)", {"kl_over_target": FAR}),
        Scenario("in_band", "sustained", _const(tgt, 200), tgt, lam0, "KL at the target (dead zone)"),
        Scenario("ramp_from_floor", "sustained", _const(hi, up_steps), tgt, low,
                 "KL far above the band, starting at the floor (doubling, then the ceiling)"),
        Scenario("decay_from_ceiling", "sustained", _const(lo, max(1600, down_steps)), tgt, high,
                 "KL far below the band, starting at the ceiling (halving, then the floor)"),
    ]
    if controller.is_band:
        e = band_edges(tgt, rule)
        order = ["upper", "above", "inside_upper", "lower", "below", "inside_lower"]
        out.append(Scenario("band_edges", "band", _blocks([e[k] for k in order], 10), tgt, lam0,
                            "10 steps each at the documented band's edges and their neighbouring floats: "
                            + ", ".join(order), {"edges": ",".join(order)}))
    out += [
        Scenario("step_up", "step", np.concatenate([_const(tgt, 100), _const(hi, 100)]), tgt, lam0,
                 "in band for 100 steps, then far above"),
        Scenario("step_down", "step", np.concatenate([_const(tgt, 100), _const(lo, 400)]), tgt, lam0,
                 "in band for 100 steps, then far below"),
        Scenario("square_wave", "oscillation", np.tile(_blocks([tgt * 5, tgt / 5], 20), 10), tgt, lam0,
                 "KL alternating 20 steps at 5× and 20 steps at 1/5× the target", {"period": 40, "factor": 5.0}),
        Scenario("drift", "drift", (tgt * np.geomspace(0.1, 10.0, 400)).astype(F32), tgt, lam0,
                 "KL drifting log-linearly from target/10 to 10·target", {"from": 0.1, "to": 10.0}),
    ]
    for sigma in (0.25, 0.5, 1.0):
        noise = rng.standard_normal(500)
        out.append(Scenario(f"lognormal_sigma{sigma}", "noise", (tgt * np.exp(sigma * noise)).astype(F32), tgt, lam0,
                            f"log-normal KL noise around the target, σ = {sigma}", {"sigma": sigma, "seed": seed}))
    base = tgt * np.exp(0.1 * rng.standard_normal(500))
    spikes = rng.random(500) < 0.02
    out.append(Scenario("spikes", "noise", np.where(spikes, base * 50, base).astype(F32), tgt, lam0,
                        "KL near the target with rare (p = 0.02) spikes of 50×", {"p": 0.02, "factor": 50.0, "seed": seed}))
    for slot in ("kl", "target"):
        out += [case(controller, f"{slot}={v}") for v in BAD_VALUES]
    out += [case(controller, f"lambda={v},kl={r}") for v in BAD_VALUES for r in REGIMES]
    return out


def vanishing(controller: Controller) -> Scenario:
    """Aligned KL (target/100) from the seed λ until the documented rule's λ settles (0, the floor, or a
    float32 fixed point), ten steps more, then as many steps far above the band: does anything bring λ back?"""
    rule = Rule.of(controller)
    lam0, tgt = controller.value("seed_lambda"), REF_TARGET
    n = steps_to_settle(rule, lam0, tgt / FAR, tgt) + 10
    kl = np.concatenate([_const(tgt / FAR, n), _const(tgt * FAR, n)])
    return Scenario("vanishing", "vanishing", kl, tgt, lam0,
                    f"{n} steps of KL = target/{FAR:g} (λ settles), then {n} steps at {FAR:g}·target",
                    {"aligned_steps": n})


def from_csv(path: Path | str, target: float | None = None, lambda0: float = 0.1,
             allow_nonfinite: bool = False) -> Scenario:
    """Replay a recorded KL trace: a CSV with a header naming a ``kl`` column (and optionally ``kl_target``).

    The target comes from the ``kl_target`` column or from ``target`` (exactly one of them;
    positive and finite). NaN/inf values are refused with their line unless ``allow_nonfinite``.
    """
    path = Path(path)
    try:
        if path.is_dir():
            raise SuiteError(f"trace file {path} is a folder; name the CSV file in it")
        if not path.is_file():
            raise SuiteError(f"trace file {path} is not a regular file" if path.exists() else
                             f"trace file not found: {path}")
    except OSError as err:  # a name too long
        raise SuiteError(f"cannot read trace file {path}: {err.strerror or err}") from None
    if target is not None:
        with np.errstate(over="ignore"):
            as32 = float(F32(target))  # what the kernel reads: 1e39 would be inf, 1e-50 would be 0
        if not (math.isfinite(as32) and as32 > 0):
            raise SuiteError(f"--target must be a positive finite KL that float32 holds (1.4e-45 to 3.4e38), not {target!r}")
    try:  # utf-8-sig: a byte-order mark (as spreadsheet programs save CSV) is dropped; csv reads CRLF lines
        with path.open(newline="", encoding="utf-8-sig") as fh:
            rows = [(n, r) for n, r in enumerate(csv.reader(fh), start=1) if r and any(c.strip() for c in r)]
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise SuiteError(f"cannot read trace file {path}: {getattr(err, 'strerror', None) or err}") from None
    if not rows:
        raise SuiteError(f"{path}: empty trace file")
    header = [c.strip().lower() for c in rows[0][1]]
    if _is_number(rows[0][1][0]):
        raise SuiteError(f"{path}:{rows[0][0]}: no header; the first line must name the columns (kl[,kl_target])")
    if "kl" not in header:
        raise SuiteError(f"{path}: no 'kl' column (columns: {', '.join(header)})")
    kl_col = header.index("kl")
    tgt_col = header.index("kl_target") if "kl_target" in header else None
    if tgt_col is not None and target is not None:
        raise SuiteError(f"{path}: has a kl_target column and --target was given; use one of them")
    if tgt_col is None and target is None:
        raise SuiteError(f"{path}: no 'kl_target' column; give the target (--target)")
    kl, tg = [], []
    for line, row in rows[1:]:
        kl.append(_cell(row, kl_col, path, line, allow_nonfinite))
        tg.append(target if tgt_col is None else _cell(row, tgt_col, path, line, allow_nonfinite))
    if not kl:
        raise SuiteError(f"{path}: no KL values")
    with np.errstate(over="ignore"):  # an overflow to inf was refused above unless asked for
        kl32, tg32 = np.array(kl, dtype=F32), np.array(tg, dtype=F32)
    return Scenario(path.stem, "replay", kl32, tg32, lambda0,
                    f"recorded KL trace from {path.name}", {"file": path.name})


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _cell(row: list[str], col: int, path: Path, line: int, allow_nonfinite: bool) -> float:
    """``row[col]``, refused (one line) when it is no number or when float32, as the kernel will read it, changes
    its kind: finite to ±inf (above 3.4e38), or non-zero to 0 (below 1.4e-45). NaN/inf as written pass only with
    ``allow_nonfinite``, and so does a finite value that overflows (it is fed as the inf it becomes)."""
    try:
        value = float(row[col])
    except (IndexError, ValueError):
        shown = row[col] if col < len(row) else "(missing)"
        raise SuiteError(f"{path}:{line}: not a number: {shown!r}") from None
    what = f"{path}:{line}: {row[col].strip()!r}"
    with np.errstate(over="ignore"):
        as32 = float(F32(value))
    if not math.isfinite(value) and not allow_nonfinite:
        raise SuiteError(f"{what} is not finite (--allow-nonfinite feeds it as recorded)")
    if math.isfinite(value) and not math.isfinite(as32) and not allow_nonfinite:
        raise SuiteError(f"{what} overflows float32 (largest {float(np.finfo(F32).max):.4g}): it would be fed as inf "
                         "(--allow-nonfinite feeds it so)")
    if value != 0 and as32 == 0:
        raise SuiteError(f"{what} is below float32's smallest subnormal (1.4e-45): it would be fed as 0 "
                         "(write 0 if 0 is meant)")
    return value


#: Targets (nats) at which the band is probed: the rule must not depend on scale.
PROBE_TARGETS = (1e-4, REF_TARGET, 0.37, 5.0)
#: How many floats above REF_TARGET :func:`onset_targets` searches for a missing rounding direction.
_ROUNDING_SEARCH = 4096


def _edges(controller: Controller) -> list[tuple[str, str, float]]:
    """The band edges that are one inexact float32 operation of the target: (side, mul|div, a)."""
    edges = []
    for side in ("upper", "lower"):
        key = f"{side}_edge"
        if controller.has(key):
            form = controller[key].form or "mul"
            if form in ("mul", "div"):
                edges.append((side, form, controller.value(key)))
        elif controller.has("tolerance"):
            edges.append((side, "mul" if side == "upper" else "div", controller.value("tolerance")))
    # a power of two: every product and quotient is exact, so there is no rounding to probe
    return [(side, form, a) for side, form, a in edges if math.frexp(a)[0] != 0.5]


def _roundings(target: np.float32, edges: list[tuple[str, str, float]]) -> set[tuple[str, int]]:
    """Which way fl32 rounds each edge at ``target``: ``(side, +1)`` up, ``(side, -1)`` down; exact adds nothing."""
    out = set()
    for side, form, a in edges:
        t, a32 = Fraction(float(target)), Fraction(float(F32(a)))
        exact = t * a32 if form == "mul" else t / a32
        got = Fraction(float(F32(target) * F32(a) if form == "mul" else F32(target) / F32(a)))
        if got != exact:
            out.add((side, 1 if got > exact else -1))
    return out


def onset_targets(controller: Controller) -> np.ndarray:
    """The targets (float32, nats) of the onset probes: :data:`PROBE_TARGETS`, plus the first floats above
    REF_TARGET at which fl32(target·a) and fl32(target/a) round up and round down where the probes so far
    miss a direction. An edge compared in another precision (``(double)kl > (double)target * 3.0``) moves
    the onset only where fl32 rounds one way (up for a ``>`` edge, down for a ``<`` edge): both are probed."""
    targets = [F32(t) for t in PROBE_TARGETS]
    edges = _edges(controller) if controller.is_band else []
    seen = set().union(*(_roundings(t, edges) for t in targets))
    wanted = {(side, d) for side, _, _ in edges for d in (1, -1)}
    t = F32(REF_TARGET)
    for _ in range(_ROUNDING_SEARCH):
        if wanted <= seen:
            break
        t = np.nextafter(t, F32(np.inf))
        new = _roundings(t, edges) - seen
        if new:
            targets.append(t)
            seen |= new
    return np.asarray(targets, dtype=F32)


def dead_zone_probes(controller: Controller, steps: int = 1000) -> list[Scenario]:
    """Constant KL inside the documented band (edges included), per target and starting λ.

    KL: both edges, their inner neighbours, the target and six interior points;
    λ0: floor, seed, ceiling and their geometric means. λ must hold bit for bit.
    """
    floor, ceiling = start_points(controller)
    seed = controller.value("seed_lambda")
    lambdas = sorted({floor, seed, ceiling, math.sqrt(floor * seed), math.sqrt(seed * ceiling)})
    rule = Rule.of(controller)
    out = []
    for target in PROBE_TARGETS:
        e = band_edges(target, rule)
        interior = np.geomspace(float(e["lower"]), float(e["upper"]), 8)[1:-1]
        kls = [e["lower"], e["inside_lower"], F32(target), e["inside_upper"], e["upper"], *interior.astype(F32)]
        out += [Scenario(f"dead_zone t={target:g} kl={float(kl):.9g} λ0={lam:.4g}", "dead_zone", _const(kl, steps),
                         target, lam, "constant KL inside the band", {"target": target, "kl": float(kl)})
                for kl in kls for lam in lambdas]
    return out


def start_lambdas(controller: Controller) -> dict[str, np.float32]:
    """The starting λ the guard and non-finite cases are also run from, besides the seed (the pinned cases'):
    the floor, the float just above it, mid-band (halfway between floor and ceiling) and the ceiling (where a
    rule has no floor or ceiling, :func:`start_points`' stand-ins). A start equal to the seed is left out."""
    low, high = (F32(x) for x in start_points(controller))
    starts = {"floor": low, "above floor": np.nextafter(low, F32(np.inf)), "mid-band": F32((float(low) + float(high)) / 2),
              "ceiling": high}
    seed = F32(controller.value("seed_lambda"))
    return {name: lam for name, lam in starts.items() if lam.view(np.uint32) != seed.view(np.uint32)}


def start_cases(controller: Controller, steps: int = 4) -> list[Scenario]:
    """The guard cases and the non-finite cases that leave λ valid (every case naming KL or the target, each
    catalogue bad value of KL and of the target), from each of :func:`start_lambdas`. Named
    ``CASE from λ0 VALUE (START)``; ``params``: the case, the start's name, the row that judges it (:func:`start_kind`)."""
    names = [*guard_cases(), *controller.nonfinite, *(f"{slot}={v}" for slot in ("kl", "target") for v in BAD_VALUES)]
    specs = [c for c in dict.fromkeys(names) if not c.startswith("lambda=") and start_kind(c)]
    out = []
    for start, lam in start_lambdas(controller).items():
        text = np.format_float_positional(lam, unique=True, trim="-")
        for spec in specs:
            sc = case(controller, f"lambda={text},{spec}", steps)
            out.append(Scenario(f"{spec} from λ0 {text} ({start})", "bad_starts", sc.kl, sc.target, sc.lambda0,
                                f"unusual input {spec} from λ0 {text} ({start})",
                                {"case": spec, "start": start, "row": start_kind(spec)}, sc.inputs[1:]))
    return out


def start_kind(spec: str) -> str:
    """Which row judges a case from other starting λ: ``nonfinite`` (a NaN or ±inf input), ``guards`` (a value
    ≤ 0), "" (neither: an ordinary value, left to the catalogue)."""
    values = [float(raw) for key, _, raw in (p.partition("=") for p in spec.split(","))
              if not (key.strip() == "kl" and raw.strip() in REGIMES)]
    if any(not math.isfinite(v) for v in values):
        return "nonfinite"
    return "guards" if any(v <= 0 for v in values) else ""
