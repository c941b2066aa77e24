"""The gate's rows as data: a property's documented and measured values, where it fails, and why.

Fields only; text is made at the edge (``analysis.present.render``: the gate's table,
JUnit, annotations, pytest messages). Nothing parses formatted text.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True, kw_only=True)
class Where:
    """Where a failure first shows.

    ``event`` names what happened there (``crossed``, ``never_settles``, ``ratio``,
    ``no_free_step``, ``count``, ``onset``, ``moved``, ``differs``, ``stray``,
    ``cases``); ``lam`` is the λ the kernel produced at ``step`` (1-based), ``expected``
    the λ (or value) the ``reference`` gives there.
    """

    scenario: str
    event: str
    step: int | None = None
    lam: float | None = None
    expected: float | None = None
    reference: str = ""
    kl: float | None = None
    target: float | None = None
    slots: tuple[int, ...] = ()
    cases: tuple[tuple[str, str, str], ...] = ()  # (case, seen, pinned) for the non-finite table


@dataclass(frozen=True, kw_only=True)
class Difference:
    """One way the candidate's measured behaviour differs from its contract (from ``analysis.judge.diagnosis``).

    ``kind``: ``constant`` (a documented value), ``edge`` (a dead-zone edge's inclusiveness),
    ``slot`` (the ISV slot an input is read from, or a slot written), ``nonfinite`` (NaN/inf semantics),
    ``guard``. ``contract_key``/``line`` name the contract line a deliberate change edits (0: none).
    ``source_line`` is the candidate's line that holds the differing constant or comparison (0: unknown).
    """

    kind: str
    name: str
    documented: float | str | None
    measured: float | str | None
    unit: str = ""
    contract_key: str = ""
    line: int = 0
    source_line: int = 0
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One row of the gate: a property, its documented, predicted and measured values, a verdict.

    ``unit`` is the unit of ``documented``/``predicted``/``measured`` (``λ``, ``×/step``, ``steps``,
    ``×target``, ``probes``, ``cases``, ``runs``, ``steps compared``). ``detail`` holds the
    property's other measurements (JSON-able; ``detail["not_measured"]`` says why a row has no
    evidence: such a row fails). ``causes`` are the diagnosis's: the measured differences that
    explain a failure (a new row: :func:`dataclasses.replace`).
    """

    key: str
    title: str
    ok: bool
    unit: str
    documented: float | None
    predicted: float | None
    measured: float | None
    detail: dict = field(default_factory=dict)
    where: Where | None = None
    line: int = 0  # line of contracts.toml holding the documented value (0: none)
    doc: str = ""  # the sentence that documents it
    causes: tuple[Difference, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "ok", bool(self.ok))  # NumPy bools do not serialise
        object.__setattr__(self, "causes", tuple(self.causes))
        for name in ("documented", "predicted", "measured"):
            value = getattr(self, name)
            object.__setattr__(self, name, None if value is None else float(value))

    def as_dict(self) -> dict:
        return asdict(self)
