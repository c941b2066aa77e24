"""The five words a study's verdict on the commit's claim is given in (issue 42 item 4), per cell and overall.

The claim (commit 96abc364b5): the original controller lets λ sink to its floor while the KL it sees is quiet,
π then drifts from Q and its agreement collapses, and the fix prevents that collapse. A verdict answers three
questions in order, each read from a study's data by the study's own judge:

1. Did the precondition occur: did the original's λ sit at its floor (the state the incident needs)?
2. Did the original collapse more often than a reference arm that holds π (constant λ at its ceiling)?
3. Did the fixed kernel hold: collapse no more often than that reference?

:func:`verdict` maps the answers to one :class:`Verdict`; :data:`MEANING` says what each word asserts.
"""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    """A verdict word; its value is the word as the report prints it."""

    PRECONDITION_ABSENT = "precondition absent"
    NOT_REPRODUCED = "not reproduced"
    REPRODUCED_FIX_HOLDS = "reproduced, the fix holds"
    REPRODUCED_FIX_FAILS = "reproduced, the fix does not hold"
    CONTRADICTED = "contradicted"


#: What each word asserts about a cell (or about a study, read over its cells).
MEANING = {
    Verdict.PRECONDITION_ABSENT: "the original's λ did not sit at its floor, so the incident could not happen: the "
    "cell says nothing about the original or the fix",
    Verdict.NOT_REPRODUCED: "the original's λ sat at its floor, yet the original collapsed no more often than the "
    "reference, and the fixed kernel held",
    Verdict.REPRODUCED_FIX_HOLDS: "the original's λ sat at its floor, the original collapsed more often than the "
    "reference, and the fixed kernel collapsed no more often than the reference: the claim holds here",
    Verdict.REPRODUCED_FIX_FAILS: "the original's λ sat at its floor and the original collapsed more often than the "
    "reference, and so did the fixed kernel: the incident occurs and the fix does not prevent it",
    Verdict.CONTRADICTED: "the original's λ sat at its floor and the original held, but the fixed kernel collapsed "
    "more often than the reference: the fix does harm here",
}


def verdict(precondition: bool, original_collapsed_more: bool | None = None,
            fixed_held: bool | None = None) -> Verdict:
    """The verdict word for one cell. ``precondition``: the original's λ sat at its floor (question 1);
    ``original_collapsed_more``: the original collapsed more often than the reference (question 2);
    ``fixed_held``: the fixed kernel collapsed no more often than the reference (question 3). The last two are
    read only where the precondition occurred; there they must be given (ValueError otherwise)."""
    if not precondition:
        return Verdict.PRECONDITION_ABSENT
    if original_collapsed_more is None or fixed_held is None:
        raise ValueError("a cell whose precondition occurred needs both the original's and the fixed kernel's answers")
    if original_collapsed_more:
        return Verdict.REPRODUCED_FIX_HOLDS if fixed_held else Verdict.REPRODUCED_FIX_FAILS
    return Verdict.NOT_REPRODUCED if fixed_held else Verdict.CONTRADICTED
