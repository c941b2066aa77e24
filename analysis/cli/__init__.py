"""The suite's command lines, one module each, behind one entry: ``python -m analysis COMMAND [ARGS]``.

Each module's ``main(argv) -> int`` parses, calls the layers below and prints; :mod:`.policy` holds the one
error policy they share (exit 0 holds, 1 a property is violated, 2 could not judge: one line).
"""

from __future__ import annotations

#: Command → (module, what it does). The modules import lazily: ``--help`` costs no numpy.
COMMANDS = {
    "gate": ("analysis.cli.gate", "judge a kernel file against the contract"),
    "report": ("analysis.cli.report", "the main job: out/report/summary.md, figures and data (--out reports: the committed one)"),
    "bench": ("analysis.cli.bench", "launch-overhead benchmark gated on the machine's baseline"),
    "replay": ("analysis.cli.replay", "replay a recorded KL trace through the controllers"),
    "toy": ("analysis.cli.toy", "the closed-loop toy with a kernel driving λ"),
    "study": ("analysis.cli.study", "the pre-registered learning-loop study"),
    "timings": ("analysis.cli.timings", "time the suite's commands here; --page rewrites docs/performance.md"),
}
