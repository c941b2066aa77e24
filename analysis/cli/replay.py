"""Replay a recorded KL trace through the controllers: what λ would have done.

The trace format (a sample: ``tests/data/sample_trace.csv``): UTF-8 CSV (a byte-order mark and CRLF line
ends are accepted), a header line, one row per training step.

TRACE.csv has a header naming a ``kl`` column and, optionally, a ``kl_target``
column; without one, ``--target`` gives the target (not both). Values are read as
the float32 the kernel sees: NaN/inf, and finite values that overflow float32
(above 3.4e38), are refused with their line unless ``--allow-nonfinite`` feeds them
as recorded; a non-zero value below 1.4e-45 (it would become 0) is refused.
Each controller starts from its contract's seed λ; ``--kernel`` replays a
candidate beside them, started from the seed λ of ``--contract`` (default fixed).
Prints per controller: λ at the start and the end, its range, and how many steps
ramped, decayed or held λ. Exit 0, or 2 with one line for anything that stops it. With ``--kernel`` on the CPU
the replay runs in a confined child (:mod:`analysis.cli.confined`): a candidate that tries to write outside its
scratch folder, start a process or open a socket ends it with exit 2 and one line naming the attempt.
"""

from __future__ import annotations

from pathlib import Path

from analysis.cli import confined, policy
from analysis.judge.trace_moves import moves
from analysis.present import render
from repro.backends import backend_names, get_backend
from repro.core.contract import load
from repro.core.errors import SuiteError
from repro.core.outputs import Output, check_outputs, write_text
from repro.runners.runner import run_scenarios, to_frame
from repro.runners.scenarios import from_csv


def replay(path: Path, target: float | None, controllers: list[str], backend: str = "auto",
           kernel: Path | None = None, contract_name: str = "fixed", allow_nonfinite: bool = False):
    """Tidy trajectories of the trace under each controller (see :func:`repro.runners.runner.to_frame`).

    ``kernel``: a candidate replayed as ``candidate`` beside ``controllers``, from ``contract_name``'s seed λ.
    Every input is checked (trace, kernel sources) before the first kernel runs.
    """
    import pandas as pd

    contract = load()
    jobs = [(name, contract.controller(name), contract.source(name)) for name in controllers]
    if kernel is not None:
        jobs.append(("candidate", contract.controller(contract_name), contract.source(contract_name, kernel)))
    scenarios = {name: from_csv(path, target=target, lambda0=entry.value("seed_lambda"),
                                allow_nonfinite=allow_nonfinite) for name, entry, _ in jobs}
    be = get_backend(backend)
    compiled = {name: be.compile(source, contract.slots.with_state(entry.state)) for name, entry, source in jobs}
    frames = [to_frame(run_scenarios(compiled[name], [scenarios[name]]), name, be.name) for name, _, _ in jobs]
    return pd.concat(frames, ignore_index=True)


@policy.command("replay")
def main(argv: list[str] | None = None) -> int:
    parser = policy.Parser("replay", description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=policy.path)
    parser.add_argument("--target", type=float, help="KL target, when the file has no kl_target column")
    parser.add_argument("--controller", default="both", choices=("fixed", "original", "both", "none"),
                        help="in-repo controllers to replay (none: only --kernel)")
    parser.add_argument("--kernel", type=policy.path, help="a candidate kernel replayed beside the controllers")
    parser.add_argument("--contract", help="with --kernel: the contract entry whose seed λ starts it (default fixed)")
    parser.add_argument("--allow-nonfinite", action="store_true", help="feed NaN/inf values as recorded")
    parser.add_argument("--backend", default="auto", choices=backend_names())
    parser.add_argument("--csv", type=policy.path, help="write the tidy trajectories here")
    parser.add_argument("--plot", type=policy.path, help="draw KL and λ over steps into this PNG")
    parser.add_contracts()
    parser.add_argument("--require-sandbox", action="store_true",
                        help="with --kernel: exit 2 where the candidate cannot be confined here (docs/DESIGN.md)")
    args = parser.parse_args(argv)
    if args.require_sandbox:  # before any work
        confined.check(require=True)
    names = {"both": ["fixed", "original"], "none": []}.get(args.controller, [args.controller])
    if not names and args.kernel is None:
        raise SuiteError("nothing to replay: --controller none needs --kernel")
    if args.contract is not None and args.kernel is None:
        raise SuiteError(f"--contract {args.contract} names the seed λ of a --kernel; there is none")
    contract = load()
    entry = args.contract or "fixed"
    contract.controller(entry)  # the name checked before any work
    check_outputs([Output("--csv", args.csv), Output("--plot", args.plot, suffix=".png")],
                  inputs=[("trace", args.trace), ("kernel", args.kernel), ("contract", contract.path),
                          *(("kernel", contract.controller(n).kernel) for n in names)])

    def work(out: dict) -> int:
        frame = replay(args.trace, args.target, names, args.backend, args.kernel, entry, args.allow_nonfinite)
        print("\n".join(render.replay_line(m) for m in moves(frame)))
        if out["--csv"]:
            write_text(out["--csv"], frame.to_csv(index=False))
        if out["--plot"]:
            from analysis.present import plots

            plots.save(plots.replay(frame), out["--plot"])
        return 0

    outputs = {"--csv": args.csv, "--plot": args.plot}
    if args.kernel is None:
        return work(outputs)
    contract.source(entry, args.kernel)  # a missing or unreadable kernel: its one line before any work
    backend = get_backend(args.backend)
    return confined.run("replay", backend, work, outputs, require=args.require_sandbox)
