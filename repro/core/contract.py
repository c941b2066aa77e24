"""The contract (``kernels/contracts.toml``) as typed, read-only data.

One fact, one place: slot numbers and documented properties live in the TOML
file; this module only parses it and says where each fact stands (file:line),
so that a gate failure can name the line a deliberate change must edit.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from repro.core.errors import SuiteError
from repro.core.kernel_source import KernelSource, load_kernel
from repro.core.paths import ROOT

CONTRACTS = ROOT / "kernels" / "contracts.toml"


@dataclass(frozen=True)
class Slots:
    """ISV slot indices (floats) owned by the harness, and the ISV layout."""

    lambda_: int
    kl: int
    target: int
    isv_len: int
    sentinel: int  # uint32 bit pattern that fills every slot at allocation

    def __post_init__(self) -> None:
        top = max(self.lambda_, self.kl, self.target)
        if len({self.lambda_, self.kl, self.target}) != 3:
            raise SuiteError("contract: the λ, KL and target slots must differ")
        if self.isv_len <= top:
            raise SuiteError(f"contract: ISV of {self.isv_len} floats is too small for slot {top}")


@dataclass(frozen=True)
class Documented:
    """A documented value (λ, a rate, or a count of steps) and where it is written."""

    name: str
    value: float
    doc: str
    line: int  # line of contracts.toml that holds it
    rtol: float = 0.0
    tolerance: float = 0.0  # absolute, in the value's own unit (steps)
    none: bool = False  # documented as absent (a rule with no floor): value is NaN
    form: str = ""  # how a band edge is computed from the target (EDGE_FORMS)
    op: str = ""  # how a rate is applied to λ: "mul" (λ·value) or "div" (λ/value)
    dtype: str = ""  # how a band edge is computed and compared (EDGE_DTYPES; empty: f32)

    @property
    def quote(self) -> str:
        """``doc`` as the source writes it: without the "kernel: " that marks a sentence of the kernel's own."""
        return self.doc.removeprefix("kernel: ")

    def accepts(self, measured: float) -> bool:
        """True when ``measured`` agrees with the documented value within its stated tolerance."""
        if self.tolerance:
            return abs(measured - self.value) <= self.tolerance
        if self.rtol:
            return math.isclose(measured, self.value, rel_tol=self.rtol, abs_tol=0.0)
        return measured == self.value


#: Rule kinds a contract entry may declare (``rule = "…"``; default band).
#: band: hold inside [lower edge, upper edge], else λ·ramp or λ·decay (each applied by
#: its ``op``), clamped to the floor and ceiling where those exist.
#: proportional: λ·(1 + clip(KL/target − 1, ±clip)·n_steps/horizon) (Ziegler et al. 2019).
RULE_KINDS = ("band", "proportional")
#: How a band edge is computed from the float32 target and the edge's value a (float32):
#: mul target·a, div target/a, mul_one_plus target·(1+a), mul_one_minus target·(1−a).
EDGE_FORMS = ("mul", "div", "mul_one_plus", "mul_one_minus")
RATE_OPS = ("mul", "div")
#: The arithmetic of a band edge, as the source does it, for float32 KL and target read from the ISV:
#: f32 the float32 product (or quotient) with the float32 constant, compared in float32;
#: f64 the double product with the double constant, compared in double (KL widened exactly);
#: f64_f32 the double product rounded once to float32, compared in float32 (a Python float threshold
#: against a float32 tensor: TensorFlow, NumPy ≥ 2).
EDGE_DTYPES = ("f32", "f64", "f64_f32")
#: What a band rule does where both its conditions hold (possible only for a target < 0, the edges crossed):
#: ramp / decay (if/elif: that test first), ramp_then_decay / decay_then_ramp (two independent tests, both
#: applied, in that order), unchanged (the source raises: TF-Agents' tf.case(exclusive=True)).
OVERLAPS = ("ramp", "decay", "ramp_then_decay", "decay_then_ramp", "unchanged")
#: How a band rule applies its floor and ceiling: clamp (the ceiling on λ·ramp, the floor on λ·decay, each by
#: fminf/fmaxf, NaN giving the bound) or clip_by_value (every branch's λ·factor, in band λ·1 too, clipped to
#: [floor, ceiling], NaN passing through: tf.clip_by_value since TensorFlow 2.4).
BOUNDS = ("clamp", "clip_by_value")
_REQUIRED = {"band": ("seed_lambda", "floor", "ceiling", "ramp", "decay"),
             "proportional": ("seed_lambda", "floor", "ceiling", "clip", "n_steps", "horizon")}


@dataclass(frozen=True)
class Controller:
    """One controller's contract: its kernel, its rule kind and constants, and documented properties."""

    name: str
    kernel: Path
    symbol: str
    props: dict[str, Documented]
    nonfinite: dict[str, str] = field(default_factory=dict)
    guards_doc: str = ""
    rule: str = "band"
    source: str = ""  # where a peer's rule comes from (project, file, function); empty for the suite's own
    nonfinite_line: int = 0  # line of the entry's [nonfinite] table header in contracts.toml
    release: dict = field(default_factory=dict)  # a peer's release followed: project, version, commit, path, function
    guarded: bool = True  # KL, target or λ ≤ 0 leave λ alone (the suite's convention; a peer only where its source has it)
    overlap: str = "ramp"  # OVERLAPS
    bounds: str = "clamp"  # BOUNDS

    def __getitem__(self, key: str) -> Documented:
        return self.props[key]

    def value(self, key: str) -> float:
        """The documented value of property ``key`` (an error where it is documented as absent)."""
        doc = self.props[key]
        if doc.none:
            raise SuiteError(f"contract [{self.name}]: {key} is documented as absent (none = true)")
        return doc.value

    def has(self, key: str) -> bool:
        return key in self.props

    def bound(self, key: str) -> float | None:
        """The floor or ceiling (λ), or None where the rule has none."""
        doc = self.props[key]
        return None if doc.none else doc.value

    @property
    def is_band(self) -> bool:
        return self.rule == "band"

    def release_text(self) -> str:
        """The release a peer follows, in one line: project version (commit) path function; empty for ours."""
        r = self.release
        if not r:
            return ""
        commit = f" ({r['commit'][:10]})" if r.get("commit") else ""
        return f"{r['project']} {r['version']}{commit} `{r['path']}` `{r['function']}`"


@dataclass(frozen=True)
class Contract:
    path: Path
    slots: Slots
    controllers: dict[str, Controller]
    slot_lines: dict[str, int] = field(default_factory=dict)  # contract key (lambda, kl_ema, …) -> line

    def source(self, name: str, path: Path | str | None = None) -> KernelSource:
        """Controller ``name``'s kernel source (or the candidate at ``path``, with the entry's symbol)."""
        entry = self.controller(name)
        return load_kernel(entry.kernel if path is None else path, entry.symbol)

    def peers(self) -> list[str]:
        """Contract entries that carry a ``source``: the published rules compared with ours, in file order."""
        return [n for n, c in self.controllers.items() if c.source]

    def controller(self, name: str) -> Controller:
        try:
            return self.controllers[name]
        except KeyError:
            raise SuiteError(f"unknown contract {name!r} (known: {', '.join(sorted(self.controllers))})") from None


def _key_lines(text_lines: list[str]) -> dict[tuple[str, str], int]:
    """1-based line of each ``key = …`` by ``(section, key)``, the first one where a key repeats (one pass)."""
    found: dict[tuple[str, str], int] = {}
    current = None
    for number, line in enumerate(text_lines, start=1):
        header = re.match(r"^\s*\[([^\]]+)\]", line)
        if header:
            current = header.group(1).strip()
            continue
        key = re.match(r'^\s*"?([^"=\s]+)"?\s*=', line)
        if current is not None and key:
            found.setdefault((current, key.group(1)), number)
    return found


def _section_line(text_lines: list[str], section: str) -> int:
    """1-based line of the ``[section]`` header (0 when absent)."""
    return next((n for n, line in enumerate(text_lines, start=1) if line.strip() == f"[{section}]"), 0)


def _documented(path: Path, section: str, key: str, spec: dict, lines: dict[tuple[str, str], int]) -> Documented:
    none = bool(spec.get("none", False))
    if not none and "value" not in spec:
        raise SuiteError(f"{path}: [{section}] {key} has neither a value nor none = true")
    form, op, dtype = spec.get("form", ""), spec.get("op", ""), spec.get("dtype", "")
    for what, given, allowed in (("dtype", dtype, EDGE_DTYPES), ("form", form, EDGE_FORMS), ("op", op, RATE_OPS)):
        if given and given not in allowed:
            raise SuiteError(f"{path}: [{section}] {key}: {what} {given!r} is not one of {', '.join(allowed)}")
    return Documented(name=key, value=math.nan if none else float(spec["value"]), doc=spec.get("doc", ""),
                      line=lines.get((section, key), 0), rtol=float(spec.get("rtol", 0.0)),
                      tolerance=float(spec.get("tolerance", 0.0)), none=none, form=form, op=op, dtype=dtype)


def load(path: Path | str = CONTRACTS) -> Contract:
    """Parse the contract file; a malformed file is a :class:`SuiteError`."""
    path = Path(path)
    try:
        raw_text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SuiteError(f"contract file not found: {path}") from None
    return _parse(path, raw_text)


@lru_cache(maxsize=16)  # the same text parses to the same (frozen) contract: the suite loads it ~150 times
def _parse(path: Path, raw_text: str) -> Contract:
    try:
        data = tomllib.loads(raw_text)
    except tomllib.TOMLDecodeError as err:
        raise SuiteError(f"{path}: not valid TOML: {err}") from None
    lines = raw_text.splitlines()
    key_lines = _key_lines(lines)
    try:
        s = data["slots"]
        slots = Slots(s["lambda"], s["kl_ema"], s["kl_target"], s["isv_len"], s["sentinel"])
        shared_nonfinite = {k: v for k, v in data.get("nonfinite", {}).items() if k != "doc"}
        guards_doc = data.get("guards", {}).get("doc", "")
        controllers = {}
        for name, entry in data.items():
            if name in ("slots", "nonfinite", "guards"):
                continue
            rule = entry.get("rule", "band")
            if rule not in RULE_KINDS:
                raise SuiteError(f"{path}: [{name}] rule {rule!r} is not one of {', '.join(RULE_KINDS)}")
            props = {
                key: _documented(path, name, key, spec, key_lines)
                for key, spec in entry.items()
                if isinstance(spec, dict) and key not in ("nonfinite", "release")
            }
            required = _REQUIRED[rule]
            if rule == "band" and not {"upper_edge", "lower_edge"} <= set(props):
                required += ("tolerance",)
            for key in required:
                if key not in props:
                    raise SuiteError(f"{path}: [{name}] lacks {key!r}")
            for key, allowed in (("overlap", OVERLAPS), ("bounds", BOUNDS)):
                if key in entry and entry[key] not in allowed:
                    raise SuiteError(f"{path}: [{name}] {key} {entry[key]!r} is not one of {', '.join(allowed)}")
            release = entry.get("release", {})
            if "source" in entry and not {"project", "version", "path", "function"} <= set(release):
                raise SuiteError(f"{path}: [{name}] a peer names its release: project, version, path, function")
            controllers[name] = Controller(
                name=name,
                kernel=(path.parent.parent / entry["kernel"]).resolve(),
                symbol=entry["symbol"],
                props=props,
                nonfinite={**shared_nonfinite, **{k: v for k, v in entry.get("nonfinite", {}).items() if k != "doc"}},
                guards_doc=entry.get("guards_doc", guards_doc),
                rule=rule,
                nonfinite_line=_section_line(lines, f"{name}.nonfinite") or _section_line(lines, "nonfinite"),
                release=dict(release),
                guarded=bool(entry.get("guarded", True)),
                **{k: entry[k] for k in ("source", "overlap", "bounds") if k in entry},  # else the field's default
            )
    except KeyError as err:
        raise SuiteError(f"{path}: missing key {err}") from None
    slot_lines = {key: key_lines.get(("slots", key), 0) for key in ("lambda", "kl_ema", "kl_target", "isv_len")}
    return Contract(path=path, slots=slots, controllers=controllers, slot_lines=slot_lines)
