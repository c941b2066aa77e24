"""The scenario catalogue: named, parameterised, seeded KL traces, and replay of recorded ones.

A scenario is what the training loop would write into the ISV, step by step:
the observed KL (slot 488), the KL target (slot 491), and the λ it starts
from. Every value is float32; every random scenario takes a seed and the same
seed gives the same bits. Traces that sit at the dead zone's edges take the
controller's documented tolerance from the contract.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from repro.core import libm
from repro.core.contract import Controller
from repro.core.errors import SuiteError
from repro.core.f32 import F32, bits
from repro.core.spec import Rule, band_edges, steps_to_double, steps_to_settle
from repro.runners import trace_file

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
    title: str = ""  # a few plain words for a figure's panel (the name where empty)

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
        object.__setattr__(self, "title", self.title or self.name)


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


#: EMA rates (per step) of the catalogue's cold starts, and the level (× target) the EMA warms up toward.
WARM_UP_RATES = (0.1, 0.01, 0.001)
WARM_UP_LEVEL = 1.1
#: The EMA rate of the resumes, and the steps of settled KL before the checkpoint in ``resume_ema_reset``.
RESUME_RATE = 0.01
RESUME_AFTER = 100
#: Steps each warm-up runs on after the EMA has come within 1 % of its level (a recovery may show there). Short:
#: the spec model replays every catalogue scenario for every gate, and a warm-up's KL changes on every step.
WARM_UP_TAIL = 200


def warm_up_steps(alpha: float) -> int:
    """Steps an EMA of rate ``alpha`` (per step) needs to come within 1 % of its input, from 0."""
    return math.ceil(math.log(100.0) / -math.log1p(-alpha))


def ema_from_zero(alpha: float, level: float, steps: int) -> np.ndarray:
    """An EMA of rate ``alpha`` warming up from 0 toward the constant ``level`` (nats): its value after each of
    ``steps`` updates, level·(1 − (1 − α)^t) for t = 1 … steps, computed in float64 and rounded once to float32."""
    t = np.arange(1, steps + 1, dtype=np.float64)
    return (level * -np.expm1(t * math.log1p(-alpha))).astype(F32)


def warm_up(controller: Controller, alpha: float, level: float = WARM_UP_LEVEL, steps: int | None = None) -> Scenario:
    """The cold start: the KL EMA warming up from 0 at rate ``alpha`` toward ``level``·target, from the seed λ;
    the EMA's warm-up (:func:`warm_up_steps`) and :data:`WARM_UP_TAIL` steps more unless ``steps`` is given."""
    n = warm_up_steps(alpha) + WARM_UP_TAIL if steps is None else steps
    return Scenario(f"warm_up_a{alpha:g}", "warm_up", ema_from_zero(alpha, level * REF_TARGET, n), REF_TARGET,
                    controller.value("seed_lambda"),
                    f"cold start: the KL EMA warming up from 0 at rate {alpha:g} toward {level:g}·target",
                    {"alpha": alpha, "level": level, "restart": 0, "warm_up_steps": warm_up_steps(alpha)},
                    title=f"KL EMA from 0 at rate {alpha:g} (cold start)")


def resumes(controller: Controller) -> list[Scenario]:
    """The two resumes from a checkpoint that saved one of the controller's inputs and not the other."""
    tgt, level, a = REF_TARGET, WARM_UP_LEVEL, RESUME_RATE
    n = warm_up_steps(a) + WARM_UP_TAIL
    settled = _const(level * tgt, RESUME_AFTER)
    lam0 = controller.value("seed_lambda")
    return [
        Scenario("resume_ema_reset", "resume", np.concatenate([settled, ema_from_zero(a, level * tgt, n)]), tgt, lam0,
                 f"{RESUME_AFTER} steps at {level:g}·target, then a resume that restores λ while the KL EMA restarts "
                 f"from 0 at rate {a:g}", {"alpha": a, "level": level, "restart": RESUME_AFTER,
                                           "warm_up_steps": warm_up_steps(a)},
                 title="KL EMA from 0 after a resume, λ restored"),
        Scenario("resume_lambda_reset", "resume", _const(level * tgt, n), tgt, lam0,
                 f"a resume that restarts λ from its seed while the KL EMA is kept at {level:g}·target",
                 {"level": level}, title="KL EMA kept after a resume, λ from its seed"),
    ]


def catalogue(controller: Controller, seed: int = 0) -> list[Scenario]:
    """Every catalogue scenario for ``controller`` (its seed λ, bounds and band).

    Sustained scenarios last long enough to double (halve) λ twice at the rule's
    rates, the high-KL ones also to climb from the low start back to the seed λ,
    and never less than the in-repo controllers' lengths (60, 1000, 1600).
    """
    lam0 = controller.value("seed_lambda")
    low, high = start_points(controller)
    rule = Rule.of(controller)
    if controller.stateful:  # no per-step rate to size them by: the in-repo controllers' lengths
        up_steps, down_steps = 200, 1000
    else:
        climb = math.ceil(math.log(lam0 / low) / math.log(rule.rate("ramp"))) + 10  # from the low start to the seed
        if controller.bound("ceiling") is not None:  # and on to the ceiling (TF-Agents: 1e-15 to 1e17 at ×1.5)
            climb = max(climb, math.ceil(math.log(high / low) / math.log(rule.rate("ramp"))) + 10)
        up_steps = max(60, 2 * steps_to_double(rule.rate("ramp")), climb)
        down_steps = max(1000, 2 * steps_to_double(1 / rule.rate("decay")))
    tgt = REF_TARGET
    hi, lo = tgt * FAR, tgt / FAR
    rng = np.random.default_rng(seed)
    out = [
        Scenario("aligned", "sustained", _const(lo, down_steps), tgt, lam0,
                 "KL far below the band (the collapse: Q and π agree, λ decays)", {"kl_over_target": 1 / FAR},
                 title=f"KL at target/{FAR:g} (the collapse)"),
        Scenario("diverged", "sustained", _const(hi, up_steps), tgt, lam0,
                 "KL far above the band (λ ramps to the ceiling)", {"kl_over_target": FAR},
                 title=f"KL at {FAR:g}× target"),
        Scenario("in_band", "sustained", _const(tgt, 200), tgt, lam0, "KL at the target (dead zone)",
                 title="KL at target (the dead zone)"),
        Scenario("ramp_from_floor", "sustained", _const(hi, up_steps), tgt, low,
                 "KL far above the band, starting at the floor (doubling, then the ceiling)",
                 title=f"KL at {FAR:g}× target, λ from the floor"),
        Scenario("decay_from_ceiling", "sustained", _const(lo, max(1600, down_steps)), tgt, high,
                 "KL far below the band, starting at the ceiling (halving, then the floor)",
                 title=f"KL at target/{FAR:g}, λ from the ceiling"),
    ]
    if controller.is_band:
        e = band_edges(tgt, rule)
        order = ["upper", "above", "inside_upper", "lower", "below", "inside_lower"]
        out.append(Scenario("band_edges", "band", _blocks([e[k] for k in order], 10), tgt, lam0,
                            "10 steps each at the documented band's edges and their neighbouring floats: "
                            + ", ".join(order), {"edges": ",".join(order)}, title="KL on the band's edges"))
    out += [
        Scenario("step_up", "step", np.concatenate([_const(tgt, 100), _const(hi, 100)]), tgt, lam0,
                 "in band for 100 steps, then far above", title=f"KL steps up to {FAR:g}× target"),
        Scenario("step_down", "step", np.concatenate([_const(tgt, 100), _const(lo, 400)]), tgt, lam0,
                 "in band for 100 steps, then far below", title=f"KL steps down to target/{FAR:g}"),
        Scenario("square_wave", "oscillation", np.tile(_blocks([tgt * 5, tgt / 5], 20), 10), tgt, lam0,
                 "KL alternating 20 steps at 5× and 20 steps at 1/5× the target", {"period": 40, "factor": 5.0},
                 title="KL alternates 5× and 1/5× target"),
        Scenario("drift", "drift", (tgt * libm.geomspace(0.1, 10.0, 400)).astype(F32), tgt, lam0,
                 "KL drifting log-linearly from target/10 to 10·target", {"from": 0.1, "to": 10.0},
                 title="KL drifts from target/10 to 10×"),
    ]
    for sigma in (0.25, 0.5, 1.0):
        noise = rng.standard_normal(500)
        out.append(Scenario(f"lognormal_sigma{sigma}", "noise", (tgt * np.exp(sigma * noise)).astype(F32), tgt, lam0,
                            f"log-normal KL noise around the target, σ = {sigma}", {"sigma": sigma, "seed": seed},
                            title=f"KL noisy around target (σ = {sigma})"))
    base = tgt * np.exp(0.1 * rng.standard_normal(500))
    spikes = rng.random(500) < 0.02
    out.append(Scenario("spikes", "noise", np.where(spikes, base * 50, base).astype(F32), tgt, lam0,
                        "KL near the target with rare (p = 0.02) spikes of 50×", {"p": 0.02, "factor": 50.0, "seed": seed},
                        title="KL near target, rare 50× spikes"))
    out += [warm_up(controller, a) for a in WARM_UP_RATES] + resumes(controller)
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
             allow_nonfinite: bool = False, max_rows: int | None = None) -> Scenario:
    """Replay a recorded KL trace: a CSV with a header naming a ``kl`` column (and optionally ``kl_target``),
    read by :func:`repro.runners.trace_file.read` (its checks, its row limit unless ``max_rows``).

    The target comes from the ``kl_target`` column or from ``target`` (exactly one of them;
    positive and finite). NaN/inf values are refused with their line unless ``allow_nonfinite``.
    """
    return replayed(trace_file.read(path, target, allow_nonfinite,
                                    trace_file.MAX_ROWS if max_rows is None else max_rows), lambda0)


def replayed(trace: trace_file.Trace, lambda0: float) -> Scenario:
    """A recorded trace as the scenario it replays, from ``lambda0``."""
    return Scenario(trace.path.stem, "replay", trace.kl, trace.target, lambda0,
                    f"recorded KL trace from {trace.path.name}", {"file": trace.path.name})


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
        interior = libm.geomspace(float(e["lower"]), float(e["upper"]), 8)[1:-1]
        kls = [e["lower"], e["inside_lower"], F32(target), e["inside_upper"], e["upper"], *interior.astype(F32)]
        out += [Scenario(f"dead_zone t={target:g} kl={float(kl):.9g} λ0={lam:.4g}", "dead_zone", _const(kl, steps),
                         target, lam, "constant KL inside the band", {"target": target, "kl": float(kl)})
                for kl in kls for lam in lambdas]
    return out


#: The KL targets (nats) the range probes run at: one per decade from 1e-8 to 1e3, both ends included. The rule is
#: scale-free, so a kernel that acts otherwise only for small or large targets shows at one of these.
RANGE_TARGETS = tuple(float(f"1e{e}") for e in range(-8, 4))
_TINY, _HUGE = np.finfo(F32).smallest_subnormal, np.finfo(F32).max
#: KL values (float32) at the ends of the type, run at every range target: 0 (the guard's edge), subnormals from
#: the smallest up to the largest, the smallest normal (FLT_MIN), and huge finite values up to FLT_MAX.
EXTREME_KL = {"0": F32(0), "smallest subnormal": _TINY, "1e-44": F32(1e-44), "1e-42": F32(1e-42),
              "1e-40": F32(1e-40), "largest subnormal": np.nextafter(np.finfo(F32).tiny, F32(0)),
              "FLT_MIN": np.finfo(F32).tiny, "1e-30": F32(1e-30), "1e30": F32(1e30), "FLT_MAX": _HUGE}
#: The targets (nats) at which λ starts on each of its documented boundaries: both ends of the range and the reference.
BOUNDARY_TARGETS = (RANGE_TARGETS[0], REF_TARGET, RANGE_TARGETS[-1])
#: Steps of each range probe: constant inputs, so a step that acts and one that repeats it are both seen.
RANGE_STEPS = 4


def _range_kls(controller: Controller, rule: Rule, target: float) -> dict[str, np.float32]:
    """The ordinary KL values probed at ``target``: far above (×FAR) and below (÷FAR) it, the target itself, and
    for a band rule both documented edges exactly and the float on either side of each (:func:`band_edges`)."""
    t = F32(target)
    kls = {"high": F32(t * F32(FAR)), "target": t, "low": F32(t / F32(FAR))}
    if controller.is_band:
        e = band_edges(target, rule)
        kls |= {name: e[name] for name in ("above", "upper", "inside_upper", "inside_lower", "lower", "below")}
    return kls


def range_boundary_lambdas(controller: Controller) -> dict[str, np.float32]:
    """λ0 on each documented boundary of λ and one float either side: the floor and the ceiling (where the rule
    has them), and the smallest positive float (the first λ past the guard's λ ≤ 0, or past 0 where unguarded)."""
    out = {}
    for key in ("floor", "ceiling"):
        b = controller.bound(key)
        if b is not None:
            b = F32(b)
            out |= {f"below {key}": np.nextafter(b, F32(-np.inf)), key: b, f"above {key}": np.nextafter(b, F32(np.inf))}
    if not any(bits(lam) == bits(_TINY) for lam in out.values()):  # a floor of 0: already "above floor"
        out["smallest positive"] = _TINY
    return out


def range_probes(controller: Controller) -> list[Scenario]:
    """The ranges users meet, each value held for :data:`RANGE_STEPS` steps; spec_agreement compares them with
    the spec model bit for bit.

    From the seed λ, at each :data:`RANGE_TARGETS` target: the ordinary KL values (:func:`_range_kls`: the band's
    edges and their neighbours included) and the :data:`EXTREME_KL` values. At each :data:`BOUNDARY_TARGETS`
    target, from each :func:`range_boundary_lambdas` start: the ordinary KL values."""
    rule = Rule.of(controller)
    seed = controller.value("seed_lambda")
    out = []

    def probe(target: float, kl_name: str, kl: np.float32, lam_name: str, lam: np.float32) -> Scenario:
        lam_text = np.format_float_positional(F32(lam), unique=True, trim="-")
        name = f"KL {kl_name} ({float(kl):.9g}) at target {target:g} from λ0 {lam_text} ({lam_name})"
        return Scenario(name, "ranges", _const(kl, RANGE_STEPS), target, lam,
                        f"KL {kl_name} at target {target:g}, λ0 {lam_name}",
                        {"target": target, "kl": kl_name, "start": lam_name})

    for target in RANGE_TARGETS:
        kls = _range_kls(controller, rule, target) | EXTREME_KL
        out += [probe(target, name, kl, "seed", seed) for name, kl in kls.items()]
    for target in BOUNDARY_TARGETS:
        kls = _range_kls(controller, rule, target)
        out += [probe(target, name, kl, start, lam) for start, lam in range_boundary_lambdas(controller).items()
                for name, kl in kls.items()]
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
