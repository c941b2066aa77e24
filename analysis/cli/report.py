"""The report: figures and a summary that explain the collapse and the fix.

Writes ``DIR/summary.md``, PNG figures beside it, and ``DIR/data/`` (tidy
trajectories as CSV, measured properties as JSON, the tables behind the
figures). Every number in the summary comes from this run's measurements.
``--kernel`` puts a candidate in the fixed controller's place (judged
against the fixed contract), so a report can show what a change breaks; on the CPU its gate runs are the
gate's confined workers and the rest runs in a confined child (:mod:`analysis.cli.confined`): an attempt to
write outside its scratch folder, start a process or open a socket ends the report with exit 2 and one line.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.cli import confined, policy
from analysis.cli.evaluate import evaluate, static_for_behaviour
from analysis.cli.study_runs import preregistered_first, reduced_first, reduced_second, run_second
from analysis.judge import bench_verdict, design_measures, peer_measures, report_measures
from analysis.judge.report_measures import CONTROLLERS, Report
from analysis.judge.verdict import judge
from analysis.present import design_section, explore_section, peers_section, plots, render, summary
from repro import toy as closed_loop
from repro.backends import Backend, backend_names, entry, get_backend
from repro.core.contract import Contract, load
from repro.core.errors import SuiteError
from repro.core.kernel_source import KernelSource
from repro.core.outputs import Output, check_outputs
from repro.core.paths import ROOT, shown, suite_commit
from repro.learning.prereg import read_result
from repro.learning.study2 import EXPLORATORY_RESULTS, load_prereg2
from repro.runners import design_runs, experiments
from repro.runners.evidence import Evidence
from repro.runners.gather import gather
from repro.runners.runner import to_frame

SIGMAS = tuple(np.round(np.arange(0, 1.51, 0.1), 2))
STRETCHES = (5, 10, 20, 50, 100, 200, 500, 1000, 2000)
#: The committed report's folder: the one tracked folder the report may rewrite, and only when --out names it.
COMMITTED = ROOT / "reports"
#: The default --out: a folder git ignores, so the main job leaves the checkout as it found it.
DEFAULT_OUT = ROOT / "out" / "report"


def gate_runs(backend: Backend, sources: dict[str, KernelSource], contract: Contract, progress=print) -> dict:
    """What :func:`measure` runs in the gate's isolated (confined) workers, and the suite's commit (``git``: a
    program): the part of the report that ``report --kernel`` runs in its own process, before the rest runs in a
    confined child (:mod:`analysis.cli.confined`), which may start no worker and no program."""
    entries = {name: contract.controller(name) for name in CONTROLLERS}
    progress(f"[1/5] gate: both controllers against their contracts on {backend.name} ({backend.describe()}); "
             f"peers: {', '.join(contract.peers())}")
    evidence, verdicts = {}, {}
    # The report is about behaviour: the gate's static (PTX) and coverage rows are the gate's business, but for
    # outside_state on a device backend (static_for_behaviour).
    static = static_for_behaviour(backend)
    for name in CONTROLLERS:  # the gate's one gathering; the report's sections need no inference of these two
        start = time.perf_counter()
        evidence[name] = gather(backend, sources[name], contract.slots_of(name), entries[name], static=static,
                                coverage=False)
        verdicts[name] = judge(evidence[name], sources[name], name, contract, time.perf_counter() - start)
        _runs_here(sources[name], evidence[name])
    cross = evaluate(sources["original"], "fixed", backend, contract, static=static, coverage=False)
    own = {n: evaluate(contract.source(n), n, backend, contract, static=static, coverage=False)
           for n in (*contract.peers(), *contract.stateful_peers())}  # each against its own entry
    peers = {n: own[n] for n in contract.peers()}
    # the peers with state of their own (PID Lagrangian, GECO): their catalogue runs feed the design measures
    stateful = {n: own[n] for n in contract.stateful_peers()}
    return {"evidence": evidence, "verdicts": verdicts, "cross": cross, "peers": peers, "stateful": stateful,
            "commit": suite_commit()}


def measure(backend: Backend, sources: dict[str, KernelSource], contract: Contract, progress=print,
            closed_loop_seeds: int = 20, grid: dict | None = None, studies: dict[str, Path] | None = None,
            gated: dict | None = None) -> Report:
    """Run every experiment the report needs on ``sources`` (one per controller in CONTROLLERS; nothing is written).

    ``sources["fixed"]`` may be a candidate: every section (gate, experiments,
    closed loop, ablation, robustness) runs the kernel given here. ``closed_loop_seeds``
    and ``grid`` size the closed-loop studies (the tests pass a reduced grid). ``studies``: kind → the JSON of
    a study made before (read first, before any work: a missing or swapped file costs nothing). ``gated``:
    :func:`gate_runs`' result, where the caller ran it already.
    """
    read = {k: read_result(path, k) for k, path in (studies or {}).items()}
    entries = {name: contract.controller(name) for name in CONTROLLERS}
    gated = gated or gate_runs(backend, sources, contract, progress)
    evidence, verdicts, cross, peers = (gated[k] for k in ("evidence", "verdicts", "cross", "peers"))
    kernels = {name: backend.compile(sources[name], contract.slots_of(name)) for name in CONTROLLERS}
    traj = pd.concat([to_frame(evidence[n].catalogue, n, backend.name) for n in CONTROLLERS], ignore_index=True)
    progress(f"[2/5] experiments: noise tolerance ({len(SIGMAS)} σ values), recovery ({len(STRETCHES)} stretches)")
    noise = {n: experiments.noise_tolerance(kernels[n], entries[n], SIGMAS) for n in CONTROLLERS}
    recovery = {n: experiments.recovery(kernels[n], entries[n], STRETCHES) for n in CONTROLLERS}
    grid = grid or closed_loop.GRID
    n_grid = int(np.prod([len(v) for v in grid.values()]))
    progress(f"[3/5] closed loop: default runs, ablation of 16 variants × {n_grid} grid points × {closed_loop_seeds} seeds")
    subjects = {n: closed_loop.compile_subject(backend, sources[n], contract.slots_of(n), entries[n].value("seed_lambda"))
                for n in CONTROLLERS}
    loops = {n: closed_loop.one_run(backend, n, subjects[n]) for n in CONTROLLERS}
    candidate = sources["fixed"].sha256 != contract.source("fixed").sha256
    ablation = closed_loop.ablation(backend, sources["original"], contract.slots, entries["original"], entries["fixed"],
                                    seeds=closed_loop_seeds, grid=grid,
                                    extra={f"candidate ({sources['fixed'].origin})": subjects["fixed"]} if candidate else None)
    progress(f"      peers: {', '.join(contract.peers())} in the toy (their gate runs: [1/5])")
    # One robustness study for ours and the peers (every controller on the same noise); ours are its first rows.
    def subject(n: str) -> closed_loop.Subject:
        return closed_loop.compile_subject(backend, contract.source(n), contract.slots_of(n),
                                           contract.controller(n).value("seed_lambda"))

    subjects |= {n: subject(n) for n in contract.peers()}
    peer_toy = closed_loop.robustness(backend, subjects, seeds=closed_loop_seeds, grid=grid)
    robustness = peer_toy[peer_toy.controller.isin(CONTROLLERS)].reset_index(drop=True)
    measures = peer_measures.measure_all({**verdicts, **peers})
    stateful = gated["stateful"]
    subjects |= {n: subject(n) for n in stateful}  # after the robustness study, which holds the band rules only
    design = _design(backend, contract, entries, subjects,
                     {**evidence, **{n: v.evidence for n, v in {**peers, **stateful}.items()}}, loops, progress)
    header = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "suite_commit": gated["commit"],
        "backend": backend.name,
        "device": backend.describe(),
        "kernels": {n: {"path": sources[n].origin, "sha256": sources[n].sha256} for n in CONTROLLERS},
    }
    if studies:  # the full studies as committed (made on the H200), not re-run here
        progress(f"      learning loop: both studies read from {', '.join(str(shown(p)) for p in studies.values())}")
        study, study2 = read["first"], read["second"]
        # the second study's exploratory runs (not pre-registered), committed beside it: shown as exploratory
        exploratory = {k: read_result(path, kind) for k, (path, kind) in EXPLORATORY_RESULTS.items() if path.exists()}
        where = {k: str(shown(p)) for k, p in studies.items()}
    else:
        full = entry(backend.name).device  # the pre-registered studies where they were made: on a device
        progress("      learning loop: " + ("both pre-registered studies" if full else "the reduced studies (CPU)"))
        study = (preregistered_first if full else reduced_first)(
            backend, contract, sources={"fixed": sources["fixed"]} if candidate else None)
        # the second study runs the contract's kernels (a candidate is judged by the first study and the gate)
        study2 = run_second(backend, contract, load_prereg2()) if full else reduced_second(backend, contract)
        where = {"first": "run here", "second": "run here"}
        exploratory = None
    header["studies"] = {k: f"{where[k]} (backend {s['backend']}, {'as pre-registered' if s['as_preregistered'] else 'reduced'})"
                         for k, s in (("first", study), ("second", study2))}
    return Report(evidence=evidence, verdicts=verdicts, cross=cross, trajectories=traj, noise=noise, recovery=recovery,
                  outcomes=report_measures.bad_input_outcomes(evidence), closed_loop=loops, ablation=ablation,
                  robustness=robustness, header=header, contract=contract, peers=peers, peer_loop=peer_toy, study=study,
                  study2=study2, study2_exploratory=exploratory, measures=measures, design=design)


# --- issue 35: cold starts and the design measures, for every controller the report runs -------------------------
def _design(backend: Backend, contract: Contract, entries: dict, subjects: dict, evidence: dict, loops: dict,
            progress) -> design_measures.DesignSection:
    """The cold-start sweep, the half-loss rate's bisection and a traced toy run per controller (the fixed and
    original ones' toy runs are ``loops``), judged with their catalogue runs (``evidence``)."""
    names = list(evidence)
    progress(f"      cold starts and design measures: {', '.join(names)}")
    ctrl = {n: entries.get(n) or contract.controller(n) for n in names}
    half = {n: design_runs.half_loss_rate(subjects[n].kernel, ctrl[n]) for n in names}
    sweeps = {n: design_runs.sweep(subjects[n].kernel, ctrl[n]) for n in names}
    toy = {n: (loops.get(n) or closed_loop.one_run(backend, n, subjects[n]))["trace"]["lambda"] for n in names}
    return design_measures.section(evidence, half, sweeps, toy)
# --- end issue 35 ---------------------------------------------------------------------------------------------------


def _runs_here(source: KernelSource, evidence: Evidence) -> None:
    """The sections after the gate run the kernel in this process (the experiments, the toy): a kernel that
    crashed or hung in its isolated runs would end the report there, so it stops here, in one line."""
    if evidence.faults:
        f = evidence.faults[0]
        did = {"crash": f"crashes ({f.detail})", "timeout": "hangs",
               "sandbox": f"was ended by its sandbox ({f.detail})"}.get(f.kind, "did not finish in its time budget")
        at = f"{f.group}{', ' + f.scenario if f.scenario else ''}"
        raise SuiteError(f"{source.origin} {did} in {at}: the report runs only a kernel that runs; "
                         f"`python -m analysis gate {source.origin}` shows every row")


def draw(report: Report, out: Path, progress=print, processes: int = 1) -> list[Path]:
    """Write every figure into ``out``; the paths written. ``processes`` > 1: drawn side by side in that many
    forked children (each figure is drawn from this process's data alone: the same bytes as drawn here); a
    figure a child did not write is then drawn here, so that its error is this process's, as one line."""
    figures = summary.figures(report)
    done: list[str] = []

    def drawn(name: str) -> None:
        done.append(name)
        progress(f"      figure {len(done)}/{len(figures)}: {name}")

    if processes > 1:
        _draw_forked(figures, out, processes, drawn)
    for name, make in figures.items():
        if name not in done:
            plots.save(make(), out / name)
            drawn(name)
    return [out / name for name in figures]


#: s a child drawing figures may go without landing one before its share is drawn by the command instead (a child
#: stuck on a lock another thread of the command held at the fork); the slowest figure takes about 6 s on 2 cores.
FIGURE_WAIT = 120.0


def _draw_forked(figures: dict, out: Path, processes: int, drawn) -> None:
    """``figures`` shared round-robin among ``processes`` forked children; ``drawn(name)`` as each lands. A child
    ignores Ctrl-C and SIGTERM (this process answers them and kills the children: they are blocked from before
    each fork until the child is recorded) and leaves by ``os._exit``: nothing of this process's (its atexit
    handlers, CUDA's state, its garbage: frozen before the forks) runs in it. A child that fails stops there,
    silently; a fork that fails, or children silent for :data:`FIGURE_WAIT` s, end the forking: what is left undrawn
    :func:`draw` draws in this process."""
    import gc
    import select
    import signal

    names = list(figures)
    stops = {signal.SIGINT, signal.SIGTERM}
    read, write = os.pipe()
    children = []
    gc.freeze()  # this process's objects out of the children's collections (a finalizer would run there too)
    try:
        for first in range(min(processes, len(names))):
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
            try:
                pid = os.fork()
            except OSError:  # no more processes to be had: this process draws the rest
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                break
            if pid == 0:  # pragma: no cover - the child
                code = 1
                try:
                    for sig in stops:
                        signal.signal(sig, signal.SIG_IGN)
                    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                    os.close(read)
                    for name in names[first::processes]:
                        plots.save(figures[name](), out / name)
                        os.write(write, b"%d\n" % names.index(name))
                    code = 0
                finally:
                    os._exit(code)
            children.append(pid)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a stop held since the fork is answered here
        os.close(write)
        write = None
        pending = b""
        while True:  # until every child has closed its end (done or gone), or none speaks for FIGURE_WAIT s
            if not select.select([read], [], [], FIGURE_WAIT)[0]:
                break
            chunk = os.read(read, 4096)
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                drawn(names[int(line)])
    finally:
        gc.unfreeze()
        for fd in (read, write):
            if fd is not None:
                os.close(fd)
        for pid in children:  # Ctrl-C, an error here, a silent child: the children go too
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == 0:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def write_data(report: Report, out: Path, peers: pd.DataFrame) -> list[Path]:
    """Write ``out/data/`` (``peers``: the peer table); every file in it."""
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    per_controller = {name: pd.concat([f.assign(controller=n) for n, f in frames.items()], ignore_index=True)
                      for name, frames in (("noise_tolerance.csv", report.noise), ("recovery.csv", report.recovery))}
    tables = {"trajectories.csv": report.trajectories, **per_controller, "bad_inputs.csv": report.outcomes,
              "ablation.csv": report.ablation, "robustness.csv": report.robustness, "peers.csv": peers,
              "peers_aligned.csv": peers_section.aligned_traces(report.measures),
              "peers_closed_loop.csv": report.peer_loop,  # None: the report ran no peers in the toy
              **design_section.data(report.design)}  # issue 35: the cold-start and design-measure tables
    for name, table in tables.items():
        if table is not None:
            table.to_csv(data / name, index=False)
    props = {n: report.verdicts[n].as_dict() for n in CONTROLLERS}
    props["original_vs_fixed_contract"] = report.cross.as_dict()
    (data / "properties.json").write_text(render.strict_json({"header": report.header, "verdicts": props}, indent=2))
    (data / "closed_loop.json").write_text(render.strict_json(report.closed_loop, indent=1))
    (data / "study.json").write_text(render.strict_json(report.study, indent=1))
    (data / "study2.json").write_text(render.strict_json(report.study2, separators=(",", ":")))
    return sorted(data.iterdir())


def write(report: Report, out: Path, progress=print, at: Path | None = None, processes: int = 1) -> list[Path]:
    """Figures, ``data/`` and ``summary.md`` into ``out``; the paths written. ``at``: where they will live, when
    ``out`` is a confined run's scratch folder (the summary's links and benchmark section are made for it).
    ``processes``: how many forked children draw the figures (:func:`draw`; 1: this process alone)."""
    out.mkdir(parents=True, exist_ok=True)
    home = Path(os.path.realpath(at or out))
    progress(f"[4/5] figures → {shown(at or out)}")
    written = draw(report, out, progress, processes)
    progress(f"[5/5] data and summary → {shown(at or out)}")
    toy = None if report.peer_loop is None else peer_measures.toy_outcomes(report.measures, report.peer_loop)
    peers = peers_section.table(report.measures, toy)
    written += write_data(report, out, peers)
    # The committed benchmark (reports/bench), linked from a summary inside the repository; one written
    # outside it has no link that survives a move, and no benchmark section.
    bench_dir = COMMITTED / "bench"
    inside = home.is_relative_to(ROOT)
    bench = bench_verdict.committed(bench_dir) if inside else None
    drift = None if bench is None or bench[1] is None else bench_verdict.run_to_run(bench[0], bench[1])
    link = Path(os.path.relpath(bench_dir, home)).as_posix()
    (out / "summary.md").write_text(summary.text(report, report_measures.numbers(report), peers, bench, drift,
                                                 bench_dir, link, judged_map=explore_section.committed()))
    return [*written, out / "summary.md"]


@policy.command("report")
def main(argv: list[str] | None = None) -> int:
    parser = policy.Parser("report", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=policy.path, default=DEFAULT_OUT, help="output folder (default: out/report/, "
                        "which git ignores; --out reports rewrites the committed report; any other folder holding "
                        "files of the repository is refused)")
    parser.add_argument("--backend", default="auto", choices=backend_names())
    parser.add_argument("--kernel", type=policy.path, help="candidate kernel to report in the fixed controller's place "
                        "(with a --contracts file that adds an entry: beside the fixed kernel, in OUT/candidate.md)")
    parser.add_argument("--studies", nargs=2, type=policy.path, metavar=("FIRST", "SECOND"),
                        help="read both learning-loop studies from these JSONs (the committed H200 results) "
                        "instead of running them")
    parser.add_contracts()
    parser.add_require_sandbox()
    args = parser.parse_args(argv)
    confined.require_first(args.require_sandbox)
    start = time.perf_counter()
    contract = load(args.contracts)
    studies = dict(zip(("first", "second"), args.studies, strict=True)) if args.studies else None
    check_outputs([Output("--out", args.out, folder=True)],
                  inputs=[("kernel", args.kernel), ("contract", contract.path),
                          *((f"{k} study", v) for k, v in (studies or {}).items())], committed=[COMMITTED])
    if args.studies and args.kernel:
        raise SuiteError("--studies reads the contract kernels' studies; a --kernel candidate needs them run")
    entry = contract.default_entry()
    if entry != "fixed":  # a --contracts file's own entry (a stateful rule, another band): beside the fixed kernel
        if args.kernel is None:
            raise SuiteError(f"{shown(contract.path)} adds [{entry}]: give its kernel with --kernel")
        from analysis.cli import candidate_report

        progress = policy.progress("report")
        backend = get_backend(args.backend)
        gated = candidate_report.gate(backend, contract, entry, args.kernel, progress)  # workers: before the fork

        def work_beside(out: dict) -> int:
            data, verdicts = candidate_report.build(backend, contract, entry, args.kernel, progress, gated)
            entries = {"candidate": entry, "fixed": "fixed"}
            texts = {k: render.verdict(v, shown(contract.controller(entries[k]).file or contract.path))
                     for k, v in verdicts.items()}
            candidate_report.write(data, texts, out["--out"])
            print(f"done in {time.perf_counter() - start:.1f} s: {shown(args.out / 'candidate.md')}, "
                  f"data in {shown(args.out / 'data' / 'candidate.json')}")
            return 0

        return confined.run("report", backend, work_beside, {"--out": args.out}, require=args.require_sandbox,
                            folders=("--out",))
    sources = {n: contract.source(n) for n in CONTROLLERS}
    if args.kernel:
        sources["fixed"] = contract.source("fixed", args.kernel)
    progress = policy.progress("report")
    backend = get_backend(args.backend)
    gated = gate_runs(backend, sources, contract, progress) if args.kernel else None  # workers: before the fork

    # The figures side by side, a process per core, where the contract's own kernels run here; a confined run
    # (--kernel) may start no process: one after another there.
    processes = 1 if args.kernel else len(os.sched_getaffinity(0))

    def work(out: dict) -> int:
        report = measure(backend, sources, contract, progress=progress, studies=studies, gated=gated)
        figs = sum(p.suffix == ".png" for p in write(report, out["--out"], progress=progress, at=args.out,
                                                     processes=processes))
        print(f"done in {time.perf_counter() - start:.1f} s: {shown(args.out / 'summary.md')}, {figs} figures, "
              f"data in {shown(args.out / 'data')}")
        return 0

    if args.kernel is None:  # the contract's own kernels: trusted, run here
        return work({"--out": args.out})
    return confined.run("report", backend, work, {"--out": args.out}, require=args.require_sandbox, folders=("--out",))
