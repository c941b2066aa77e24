"""The contract (``kernels/contracts.toml``) as typed, read-only data.

One fact, one place: slot numbers and documented properties live in the TOML
file; this module only parses it and says where each fact stands (file:line),
so that a gate failure can name the line a deliberate change must edit.
"""

from __future__ import annotations

import contextlib
import math
import re
import tomllib
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from repro.core import stateful
from repro.core.errors import SuiteError
from repro.core.kernel_source import KernelSource, load_kernel
from repro.core.paths import ROOT, shown

#: The tracked contract file: what a command judges against without ``--contracts FILE``, and the tests without
#: pytest's ``--contracts`` (each caller names the file it loads: :func:`load` has no default).
CONTRACTS = ROOT / "kernels" / "contracts.toml"


@dataclass(frozen=True)
class StateSlot:
    """A slot a controller owns beyond λ (its integral, an EMA, a delay line): the harness seeds it with ``start``
    and the isolation row allows the controller's writes to it."""

    name: str
    slot: int
    start: float  # the value the harness writes before the first launch (in ``units``)
    holds: str  # what the value is, in a sentence
    units: str
    line: int = 0



@dataclass(frozen=True)
class Slots:
    """ISV slot indices (floats) owned by the harness, and the ISV layout."""

    lambda_: int
    kl: int
    target: int
    isv_len: int
    sentinel: int  # uint32 bit pattern that fills every slot at allocation
    #: (slot, start value) a controller owns beyond λ: seeded by the harness, its writes allowed (empty: λ alone)
    state: tuple[tuple[int, float], ...] = ()

    def with_state(self, owned: tuple[StateSlot, ...]) -> Slots:
        """These slots with the state a controller's entry declares (seeded, and its writes allowed)."""
        return replace(self, state=tuple((s.slot, s.start) for s in owned)) if owned else self

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


#: Rule kinds without state beyond λ a contract entry may declare (``rule = "…"``; default band).
#: band: hold inside [lower edge, upper edge], else λ·ramp or λ·decay (each applied by
#: its ``op``), clamped to the floor and ceiling where those exist.
#: proportional: λ·(1 + clip(KL/target − 1, ±clip)·n_steps/horizon) (Ziegler et al. 2019).
#: The stateful kinds are repro.core.stateful.KINDS (each with its equations, its state and its step), and a
#: contract's own: ``rule = "NAME"`` with ``model = "PATH.py"``, its spec model (repro.core.stateful.load_model).
STATELESS_RULES = ("band", "proportional")


def rule_kinds() -> tuple[str, ...]:
    """Every rule kind of the suite's own: the stateless ones, then repro.core.stateful.KINDS."""
    return (*STATELESS_RULES, *stateful.KINDS)


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
             "proportional": ("seed_lambda", "floor", "ceiling", "clip", "n_steps", "horizon")}  # stateful: Kind.required

# What a contract file may hold: anything else is an error naming its file and line (a typo is never ignored).
_TOP = ("base", "slots", "guards", "nonfinite")  # beside them, every table is a controller's entry
_SLOT_KEYS = ("lambda", "kl_ema", "kl_target", "isv_len", "sentinel")
_ENTRY_KEYS = ("kernel", "symbol", "rule", "model", "source", "release", "guarded", "guards_doc", "overlap", "bounds",
               "nonfinite", "state")
#: Documented properties an entry may state (each an inline table of _PROPERTY_FIELDS), the cold-start ones
#: (``warm_up_*``) included: every name listed, so a misspelt one is an error, never a silent extra.
PROPERTY_KEYS = ("seed_lambda", "floor", "ceiling", "ramp", "decay", "tolerance", "upper_edge", "lower_edge",
                 "steps_to_double", "steps_to_halve", "steps_to_floor", "decay_slowness", "clip", "n_steps", "horizon",
                 "k_p", "k_i", "k_d", "d_delay", "p_ema_alpha", "d_ema_alpha", "step_size", "alpha", "speedup",
                 "warm_up_loss", "warm_up_rate")  # and a model of one's own's PARAMS, for its entry
_PROPERTY_FIELDS = ("value", "doc", "rtol", "tolerance", "none", "form", "op", "dtype", "informational")
_STATE_FIELDS = ("slot", "start", "holds", "units", "count")
_RELEASE_FIELDS = ("project", "version", "commit", "path", "function")


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
    state: tuple[StateSlot, ...] = ()  # the slots it owns beyond λ (a stateful rule's integral, EMAs, delay line)
    file: Path | None = None  # the contract file that declares this entry (its lines are that file's)
    model: Path | None = None  # a stateful rule of one's own's spec model (``model = "PATH.py"``); None: the suite's

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

    @property
    def stateful(self) -> bool:
        """A rule with state of its own in ISV slots (repro.core.stateful.KINDS, or a spec model of one's own):
        judged by its own rows, not the band rule's."""
        return self.model is not None or self.rule in stateful.KINDS

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
        """Contract entries that carry a ``source`` and keep no state beyond λ: the published band and proportional
        rules compared with ours, in file order (the report's peer section, the gate's peer rows)."""
        return [n for n, c in self.controllers.items() if c.source and not c.stateful]

    def stateful_peers(self) -> list[str]:
        """Published rules with state of their own in ISV slots (the PID Lagrangian, GECO), in file order."""
        return [n for n, c in self.controllers.items() if c.source and c.stateful]

    def slots_of(self, name: str) -> Slots:
        """The ISV layout a controller runs in: the harness's slots and the state its entry declares."""
        return self.slots.with_state(self.controller(name).state)

    def default_entry(self) -> str:
        """The entry a candidate is judged against when none is named: ``fixed``, or where a contract file of one's
        own declares entries of its own and not ``fixed`` (``base = …`` plus a new rule), the first of them."""
        own = [n for n, c in self.controllers.items() if c.file is not None and c.file.resolve() == self.path.resolve()]
        return "fixed" if not own or "fixed" in own else own[0]

    def controller(self, name: str) -> Controller:
        try:
            return self.controllers[name]
        except KeyError:
            raise SuiteError(f"unknown contract {name!r} (known: {', '.join(sorted(self.controllers))})") from None


def _key_lines(text_lines: list[str]) -> dict[tuple[str, str], int]:
    """1-based line of each ``key = …`` by ``(section, key)``, the first one where a key repeats (one pass);
    a table header's own line by ``(section, "")``."""
    found: dict[tuple[str, str], int] = {}
    current = ""  # the file's top level, before the first table
    for number, line in enumerate(text_lines, start=1):
        header = re.match(r"^\s*\[([^\]]+)\]", line)
        if header:
            current = header.group(1).strip()
            found.setdefault((current, ""), number)
            continue
        key = re.match(r'^\s*"?([^"=\s]+)"?\s*=', line)
        if key:
            found.setdefault((current, key.group(1)), number)
    return found


def _section_line(text_lines: list[str], section: str) -> int:
    """1-based line of the ``[section]`` header (0 when absent)."""
    return next((n for n, line in enumerate(text_lines, start=1) if line.strip() == f"[{section}]"), 0)


class _File:
    """One contract file's text, for the lines its errors and properties name."""

    def __init__(self, path: Path, text: str):
        self.path, self.lines = path, text.splitlines()
        self.keys = _key_lines(self.lines)

    def line(self, section: str, key: str = "") -> int:
        """The line of ``key`` in ``[section]`` (or of a ``[section.key]`` table), else the section's header."""
        return (self.keys.get((section, key)) or self.keys.get((f"{section}.{key}", ""))
                or self.keys.get((section, "")) or 0)

    def error(self, section: str, key: str, what: str) -> SuiteError:
        return SuiteError(f"{shown(self.path)}:{self.line(section, key)}: {what}")

    def unknown(self, section: str, table: dict, allowed, what: str = "key", known: str = "",
                inside: str = "") -> None:
        """An error naming the first key of ``table`` outside ``allowed`` (by file and line; a field of an inline
        table ``inside`` is on that key's line)."""
        for key in table:
            if key not in allowed:
                where = f"[{section}]" if section else "the file's top level"
                raise self.error(section, inside or key, f"unknown {what} {key!r} in {where} "
                                 f"(known: {known or ', '.join(allowed)})")


def _documented(f: _File, section: str, key: str, spec: dict) -> Documented:
    if not isinstance(spec, dict):
        raise f.error(section, key, f"[{section}] {key} is a documented property: {{ value = …, doc = \"…\" }}")
    f.unknown(section, spec, _PROPERTY_FIELDS, what=f"field of {key}", inside=key)
    none = bool(spec.get("none", False))
    if not none and "value" not in spec:
        raise SuiteError(f"{f.path}: [{section}] {key} has neither a value nor none = true")
    form, op, dtype = spec.get("form", ""), spec.get("op", ""), spec.get("dtype", "")
    for what, given, allowed in (("dtype", dtype, EDGE_DTYPES), ("form", form, EDGE_FORMS), ("op", op, RATE_OPS)):
        if given and given not in allowed:
            raise SuiteError(f"{f.path}: [{section}] {key}: {what} {given!r} is not one of {', '.join(allowed)}")
    return Documented(name=key, value=math.nan if none else float(spec["value"]), doc=spec.get("doc", ""),
                      line=f.line(section, key), rtol=float(spec.get("rtol", 0.0)),
                      tolerance=float(spec.get("tolerance", 0.0)), none=none, form=form, op=op, dtype=dtype)


def _state(f: _File, name: str, table: dict, rule: str, wanted: tuple[str, ...]) -> tuple[StateSlot, ...]:
    """The state slots an entry declares (``[NAME.state.KEY]``: slot, start, holds, units, count)."""
    if not isinstance(table, dict):
        raise f.error(name, "state", f"[{name}] state is a table of [{name}.state.KEY] tables")
    owned = []
    for key, spec in table.items():
        section = f"{name}.state.{key}"
        if not isinstance(spec, dict):
            raise f.error(f"{name}.state", key, f"[{name}.state] {key}: a table of slot, start, holds, units")
        f.unknown(section, spec, _STATE_FIELDS)
        for need in ("slot", "start", "holds", "units"):
            if need not in spec:
                raise f.error(section, "", f"[{section}] lacks {need!r}")
        count = int(spec.get("count", 1))
        for i in range(count):
            owned.append(StateSlot(name=key if count == 1 else f"{key}[{i}]", slot=int(spec["slot"]) + i,
                                   start=float(spec["start"]), holds=str(spec["holds"]), units=str(spec["units"]),
                                   line=f.line(section)))
    missing = [k for k in wanted if k not in table]
    if missing:
        raise f.error(name, "rule", f"[{name}] rule {rule!r} keeps {', '.join(wanted)}: declare "
                      + ", ".join(f"[{name}.state.{k}]" for k in missing))
    if table and not wanted:
        raise f.error(name, "state", f"[{name}] rule {rule!r} keeps no state of its own (stateful rules: "
                      f"{', '.join(stateful.KINDS)}, or a rule of one's own with model = \"PATH.py\")")
    return tuple(owned)


def _kind(f: _File, name: str, entry: dict) -> tuple[str, Path | None, stateful.Kind | None]:
    """An entry's rule, its spec model's file (a rule of one's own) and its stateful kind (None: stateless)."""
    rule, model = entry.get("rule", "band"), entry.get("model")
    if model is None:
        if rule not in rule_kinds():
            raise f.error(name, "rule", f"[{name}] rule {rule!r} is not one of {', '.join(rule_kinds())} (a stateful "
                          f"rule of one's own: model = \"PATH.py\", its spec model; docs/commands.md)")
        return rule, None, stateful.KINDS.get(rule)
    if not isinstance(model, str) or not model.endswith(".py"):
        raise f.error(name, "model", f"[{name}] model names the spec model's Python file: model = \"PATH.py\"")
    if "rule" not in entry or rule in rule_kinds():
        raise f.error(name, "model", f"[{name}] a spec model of one's own is a rule of one's own: name it, "
                      f"rule = \"NAME\", not one of {', '.join(rule_kinds())}")
    try:
        kind = stateful.load_model(resolve(model))
    except SuiteError as err:
        raise f.error(name, "model", f"[{name}] {err}") from None
    clash = [k for k in kind.params if k in _ENTRY_KEYS or k in _TOP]
    if clash:
        raise f.error(name, "model", f"[{name}] {kind.origin}: PARAMS {', '.join(clash)} is an entry's own key")
    return rule, resolve(model), kind


def load(path: Path | str) -> Contract:
    """Parse the contract file at ``path`` (:data:`CONTRACTS`, or one of one's own); a malformed file is a
    :class:`SuiteError`.

    Paths inside a contract file (``kernel``, ``base``) are relative to the repository root (absolute ones
    as written), whichever folder the file lies in: a copy of the tracked file judges the same kernels.
    A file with ``base = "PATH"`` holds only what differs: its tables replace the base file's tables of
    the same name, whole, and add new entries; the rest is the base's (one fact, one place).
    """
    path = Path(path)
    try:
        raw_text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SuiteError(f"contract file not found: {shown(path)}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SuiteError(f"contract file {shown(path)} cannot be read: {err}") from None
    # the base file's text is part of the key: an edit to it is seen by the next load in the same process
    named = re.search(r'^\s*base\s*=\s*"([^"]*)"', raw_text, re.MULTILINE)
    base_text = None
    if named:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            base_text = resolve(named.group(1)).read_text(encoding="utf-8")
    return _parse(path, raw_text, base_text)


def resolve(text: str) -> Path:
    """A path written in a contract file: relative to the repository root, or absolute."""
    return (ROOT / text).resolve()


def _read(path: Path, raw_text: str) -> tuple[dict, _File]:
    try:
        data = tomllib.loads(raw_text)
    except tomllib.TOMLDecodeError as err:
        raise SuiteError(f"{shown(path)}: not valid TOML: {err}") from None
    return data, _File(path, raw_text)


@lru_cache(maxsize=16)  # the same text parses to the same (frozen) contract: the suite loads it ~150 times
def _parse(path: Path, raw_text: str, base_text: str | None = None) -> Contract:
    data, own = _read(path, raw_text)
    # every table's file: its own, or the base file's where this file leaves it out
    files = {name: own for name in data}
    if "base" in data:
        if not isinstance(data["base"], str):
            raise own.error("", "base", "base names the contract file this one adds to (a path)")
        base_path = resolve(data.pop("base"))
        if base_path == path.resolve():
            raise own.error("", "base", "base names this file itself")
        if base_text is None:  # load() read it where the line is plain; else read it here, or say it is missing
            try:
                base_text = base_path.read_text(encoding="utf-8")
            except OSError:
                raise own.error("", "base", f"base contract file not found: {shown(base_path)}") from None
        base_data, base_file = _read(base_path, base_text)
        if "base" in base_data:
            raise base_file.error("", "base", "a base file names no base of its own (one level)")
        files = {name: base_file for name in base_data} | {name: own for name in data}
        data = base_data | data
    for name, table in data.items():
        if not isinstance(table, dict):
            raise files[name].error("", name, f"unknown key {name!r} at the file's top level (tables: [slots], "
                                    "[guards], [nonfinite], one per controller; base = \"PATH\")")
    try:
        f = files["slots"]
        s = data["slots"]
        f.unknown("slots", s, _SLOT_KEYS)
        slots = Slots(s["lambda"], s["kl_ema"], s["kl_target"], s["isv_len"], s["sentinel"])
        files.get("guards", own).unknown("guards", data.get("guards", {}), ("doc",))
        shared_nonfinite = {k: v for k, v in data.get("nonfinite", {}).items() if k != "doc"}
        guards_doc = data.get("guards", {}).get("doc", "")
        controllers = {}
        for name, entry in data.items():
            if name in _TOP:
                continue
            f = files[name]
            if "kernel" not in entry or "symbol" not in entry:  # not an entry: a typo of a known table, or a stray one
                raise f.error(name, "", f"unknown table [{name}] (a controller's entry names its kernel and symbol; "
                              f"other tables: {', '.join('[' + t + ']' for t in _TOP[1:])})")
            rule, model, kind = _kind(f, name, entry)
            props = {}
            for key, spec in entry.items():
                if key in _ENTRY_KEYS:
                    continue
                if key not in PROPERTY_KEYS and key not in (kind.params if kind else ()):
                    f.unknown(name, {key: spec}, (), known=f"{', '.join(_ENTRY_KEYS)}, and the documented "
                              "properties the header of kernels/contracts.toml lists"
                              + (f" (and the model's PARAMS: {', '.join(kind.params)})" if model else ""))
                props[key] = _documented(f, name, key, spec)
            required = kind.required if kind else _REQUIRED[rule]
            if rule == "band" and not {"upper_edge", "lower_edge"} <= set(props):
                required += ("tolerance",)
            for key in required:
                if key not in props:
                    raise SuiteError(f"{f.path}: [{name}] lacks {key!r}")
            for key, allowed in (("overlap", OVERLAPS), ("bounds", BOUNDS)):
                if key in entry and entry[key] not in allowed:
                    raise SuiteError(f"{f.path}: [{name}] {key} {entry[key]!r} is not one of {', '.join(allowed)}")
            release = entry.get("release", {})
            f.unknown(name, release, _RELEASE_FIELDS, what="field of release", inside="release")
            if "source" in entry and not {"project", "version", "path", "function"} <= set(release):
                raise SuiteError(f"{f.path}: [{name}] a peer names its release: project, version, path, function")
            state = _state(f, name, entry.get("state", {}), rule, kind.state if kind else ())
            owned = {slots.lambda_, slots.kl, slots.target}
            for s_ in state:
                if s_.slot in owned or not 0 <= s_.slot < slots.isv_len:
                    raise SuiteError(f"{shown(f.path)}:{s_.line}: [{name}] state {s_.name} in slot {s_.slot}: "
                                     f"a slot of its own inside the ISV of {slots.isv_len} floats")
                owned.add(s_.slot)
            controllers[name] = Controller(
                name=name,
                kernel=resolve(entry["kernel"]),
                symbol=entry["symbol"],
                props=props,
                # a stateful rule's non-finite behaviour is its own (the shared cases describe the band rules)
                nonfinite={**({} if kind else shared_nonfinite),
                           **{k: v for k, v in entry.get("nonfinite", {}).items() if k != "doc"}},
                guards_doc=entry.get("guards_doc", guards_doc),
                rule=rule,
                nonfinite_line=_section_line(f.lines, f"{name}.nonfinite") or _section_line(f.lines, "nonfinite"),
                release=dict(release),
                guarded=bool(entry.get("guarded", True)),
                state=state,
                file=f.path,
                model=model,
                **{k: entry[k] for k in ("source", "overlap", "bounds") if k in entry},  # else the field's default
            )
    except KeyError as err:
        raise SuiteError(f"{shown(path)}: missing key {err}") from None
    slot_file = files["slots"]
    # a slot's line is shown against the contract's own file: where [slots] is the base's, no line is claimed
    slot_lines = {key: slot_file.line("slots", key) if slot_file is own else 0
                  for key in ("lambda", "kl_ema", "kl_target", "isv_len")}
    return Contract(path=path, slots=slots, controllers=controllers, slot_lines=slot_lines)
