"""The README's sample gate output is what the gate prints today on the fixed kernel, row by row, with the
README's elisions (``…`` stands for text left out; a row of its own for rows left out) and the time left out."""

from __future__ import annotations

import re

from repro.core.paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
KERNEL = "kernels/rl_q_distill_lambda_controller.cu"


def _sample() -> list[str]:
    """The lines of the README's text block after "On the fixed kernel", up to its closing fence."""
    lines = README.splitlines()
    start = lines.index("```text", next(i for i, line in enumerate(lines) if line.startswith("On the fixed kernel"))) + 1
    return lines[start:lines.index("```", start)]


def _table(lines: list[str]) -> dict[str, list[str]]:
    """A gate table's rows by property: the cells, cut where the dash line under the header puts the columns."""
    dashes = next(i for i, line in enumerate(lines) if line.startswith("---"))
    spans = [m.span() for m in re.finditer(r"-+", lines[dashes])]
    spans[-1] = (spans[-1][0], None)  # the verdict column: to the line's end
    rows = {}
    for line in lines[dashes + 1:]:
        if not line.strip():
            break
        cells = [line[a:b].strip() for a, b in spans]
        rows[cells[0]] = cells
    return rows


def _shows(pasted: str, printed: str) -> bool:
    """``pasted`` is ``printed`` with text left out at each ``…``: its first part a prefix, the others in order."""
    first, *rest = pasted.split("…")
    if not printed.startswith(first):
        return False
    at = len(first)
    for part in (p.strip() for p in rest):
        found = printed.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return True


def test_the_readme_sample_is_what_the_gate_prints_on_the_fixed_kernel(capsys):
    from analysis.cli import gate

    assert gate.main([KERNEL, "--backend", "host"]) == 0
    printed = capsys.readouterr().out.splitlines()
    pasted = _sample()
    assert pasted[0] == printed[0] and pasted[1] == printed[1], (pasted[:2], printed[:2])  # the kernel and its contract
    assert pasted[2].startswith("backend  host: ") and printed[2].startswith("backend  host: ")  # the machine's own
    behaves = [line for line in pasted if line.startswith("behaves as:")]
    assert behaves and behaves[0] in printed
    shown, ran = _table(pasted), _table(printed)
    elided = shown.pop("…")
    assert elided[1] == f"({len(ran)} rows)", (elided, len(ran))
    for prop, cells in shown.items():
        assert prop in ran, f"the README shows a row the gate does not print: {prop}"
        got = ran[prop]
        assert _shows(cells[1], got[1]) and _shows(cells[2], got[2]) and cells[3] == got[3], (cells, got)
    time = re.compile(r" in (…|[\d.]+) s$")
    assert time.sub("", pasted[-1]) == time.sub("", printed[-1]), (pasted[-1], printed[-1])
