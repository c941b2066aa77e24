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
ramped, decayed or held λ. The file is read in chunks, at most ``--max-rows`` data rows (10 million unless
raised; a million rows hold about 60 MB, 500 MB with ``--csv``); past a few seconds progress goes to stderr.
Exit 0, or 2 with one line for anything that stops it. With ``--kernel`` on the CPU the candidate's replay runs in
a confined child (:func:`analysis.cli.confined.measure`) that hands back its λ as plain data; the lines, the CSV
and the figure are drawn here. A candidate that tries to write outside its scratch folder, start a process or open
a socket ends it with exit 2 and one line naming the attempt.
"""

from __future__ import annotations

import time
from pathlib import Path

from analysis.cli import confined, policy
from analysis.judge.trace_moves import moves_of
from analysis.present import render
from repro.backends import backend_names, get_backend
from repro.core.contract import Contract, load
from repro.core.errors import SuiteError
from repro.core.outputs import Output, check_outputs, write_text
from repro.runners import trace_file
from repro.runners.runner import Run, run_scenarios, to_frame
from repro.runners.scenarios import replayed


def replay(path: Path, contract: Contract, target: float | None, controllers: list[str], backend: str = "auto",
           kernel: Path | None = None, contract_name: str = "fixed", allow_nonfinite: bool = False,
           max_rows: int = trace_file.MAX_ROWS, progress=None, require: bool = False) -> tuple[str, list[tuple[str, Run]]] | None:
    """(the backend's name, (controller, its run) for each controller, the candidate last); None: the candidate's
    confined child ended with exit 2, having said why. Kernels and seeds are ``contract``'s entries.

    ``kernel``: a candidate replayed as ``candidate`` beside ``controllers``, from ``contract_name``'s seed λ, in
    a confined child (:func:`analysis.cli.confined.measure`) that hands back its λ and stray writes as plain data;
    the contract's own kernels run here. Every input is checked (trace, kernel sources) before the first kernel
    runs; the trace is read once, here (at most ``max_rows`` rows). ``progress`` hears how it goes once the reading
    has taken a few seconds.
    """
    start = time.monotonic()
    jobs = [(name, contract.controller(name), contract.source(name)) for name in controllers]
    if kernel is not None:
        jobs.append(("candidate", contract.controller(contract_name), contract.source(contract_name, kernel)))
    trace = trace_file.read(path, target, allow_nonfinite, max_rows, progress)
    be = get_backend(backend)
    runs = []
    for name, entry, source in jobs:
        slots, scenario = contract.slots.with_state(entry.state), replayed(trace, entry.value("seed_lambda"))
        if name != "candidate":
            runs.append((name, run_scenarios(be.compile(source, slots), [scenario])[0]))
        else:
            run = confined.measure("replay", be,
                                   lambda out, s=source, sl=slots, sc=scenario: write_run(out / RUN, be.compile(s, sl), sc),
                                   lambda out, sc=scenario: read_run(out / RUN, sc), require=require)
            if run is None:
                return None
            runs.append((name, run))
        if progress is not None and time.monotonic() - start > trace_file.PROGRESS_AFTER_S:
            progress(f"{name}: {len(trace.kl):,} steps replayed in {time.monotonic() - start:.0f} s")
    return be.name, runs


#: What the candidate's confined child hands back: its run as plain data (:func:`write_run`).
RUN = "run.json"


def write_run(path: Path, kernel, scenario) -> None:
    """The candidate's run of ``scenario``, as plain data: λ after each step (float32) and the stray writes."""
    from repro.runners import plain

    run = run_scenarios(kernel, [scenario])[0]
    path.write_bytes(plain.dumps({"lam": run.lam, "stray": run.stray}))


def read_run(path: Path, scenario) -> Run:
    """The run a confined child wrote at ``path`` (:func:`write_run`), read against this process's own ``scenario``:
    λ float32 ``[steps]``, the stray writes a list of slots; SuiteError otherwise."""
    import numpy as np

    from repro.runners import plain

    try:
        got = plain.read(path, limit=16 * scenario.steps + (1 << 20))  # base64 of 4 bytes a step, and the strays
    except plain.Forged as err:
        raise SuiteError(f"the candidate's replay is no plain data ({err}): not read") from None
    lam, stray = (got.get("lam"), got.get("stray")) if isinstance(got, dict) and set(got) == {"lam", "stray"} \
        else (None, None)
    if not (isinstance(lam, np.ndarray) and lam.dtype == np.float32 and lam.shape == (scenario.steps,)
            and isinstance(stray, list) and all(type(s) is int for s in stray)):
        raise SuiteError(f"the candidate's replay is not λ for {scenario.steps} steps and its stray writes: not read")
    return Run(scenario, lam, stray)


def frame(backend: str, runs: list[tuple[str, Run]]):
    """The replays' tidy trajectories (see :func:`repro.runners.runner.to_frame`), controllers in order."""
    import pandas as pd

    return pd.concat([to_frame([run], name, backend) for name, run in runs], ignore_index=True)


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
    parser.add_require_sandbox()
    parser.add_argument("--max-rows", type=int, default=trace_file.MAX_ROWS, metavar="N",
                        help=f"refuse a trace of more than N data rows (default {trace_file.MAX_ROWS:,}, at most "
                        f"{trace_file.MAX_ROWS_LIMIT:,}; a million rows hold about 60 MB, 500 MB with --csv)")
    args = parser.parse_args(argv)
    confined.require_first(args.require_sandbox)
    names = {"both": ["fixed", "original"], "none": []}.get(args.controller, [args.controller])
    if not names and args.kernel is None:
        raise SuiteError("nothing to replay: --controller none needs --kernel")
    if args.contract is not None and args.kernel is None:
        raise SuiteError(f"--contract {args.contract} names the seed λ of a --kernel; there is none")
    contract = load(args.contracts)
    entry = args.contract or "fixed"
    contract.controller(entry)  # the name checked before any work
    check_outputs([Output("--csv", args.csv), Output("--plot", args.plot, suffix=".png")],
                  inputs=[("trace", args.trace), ("kernel", args.kernel), ("contract", contract.path),
                          *(("kernel", contract.controller(n).kernel) for n in names)])

    if args.kernel is not None:
        contract.source(entry, args.kernel)  # a missing or unreadable kernel: its one line before any work
    got = replay(args.trace, contract, args.target, names, args.backend, args.kernel, entry, args.allow_nonfinite, args.max_rows,
                 policy.progress("replay"), require=args.require_sandbox)
    if got is None:
        return 2
    backend, runs = got
    print("\n".join(render.replay_line(moves_of(name, run.scenario.lambda0, run.lam)) for name, run in runs))
    if args.csv or args.plot:  # the tidy frame only where it is written: 5 million steps take seconds
        table = frame(backend, runs)
        if args.csv:
            write_text(args.csv, table.to_csv(index=False))
        if args.plot:
            from analysis.present import plots

            plots.save(plots.replay(table), args.plot)
    return 0
