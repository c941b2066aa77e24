"""``python -m analysis study --explore-4``: the fourth study's EXPLORATORY regime search (studies/exploration_4.toml,
issue 42): the collapse map's runs, their judged summary (the declared selection rule) and the map's figures.

Runs the declared grid (2 tasks × 5 KL targets × 4 τ × 2 KL sites × 3 aux × 3 π learning rates, arms original and
fixed per cell, constant λ 0 / 0.001 / 0.05 / 0.2 / 1 per (task, τ, aux, lr) group, 16 seeds, 20000 steps: 28 800
runs, 576 M run-steps) as batched loops of whole groups (``--chunk-rows``: rows per batch; results do not depend
on it), writes the per-run measures to ``--json`` (deterministic: the same bytes for the same declaration, device
and chunking), prints the judged map. ``--shard I/N`` runs a deterministic slice of the chunks; ``--merge A.json
B.json … --json OUT`` joins shards into the unsharded JSON, byte for byte. ``--ray N`` runs the N shards as Ray
tasks over a cluster's GPUs (one GPU each on cupy, one CPU each on host; ``--ray-address``: which cluster) and
merges them into ``--json`` in the driver: the unsharded JSON, byte for byte, where every GPU is of one kind
(repro/learning/deep/explore_ray.py; the ``ray`` dependency group). ``--from-json J`` judges a search
already run: ``--judged`` (JSON), ``--plot`` (one PNG per task: ``<stem>_<task>.png``). ``--reduced``: the CPU
smoke form (both tasks, one group each, 2 seeds, 500 steps; well under a minute). ``--bench 1024,4096,16384``:
run-steps/s of the search's loop at those batch sizes (``--bench-steps`` timed steps after a warm-up; GPU).

Exit 0; bad input one line, exit 2. Progress on stderr. Only the search as declared (no ``--reduced``) may write
under studies/results/exploration_4_*.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from analysis.cli import policy
from analysis.cli.study_json import judge_and_show, read_study
from analysis.present import render
from repro.core.errors import SuiteError
from repro.core.outputs import Output, check_outputs, committed_results, write_text
from repro.core.paths import ROOT


def parser() -> policy.Parser:
    p = policy.Parser("study", description="the fourth study's exploratory regime search (--explore-4)")
    p.add_argument("--explore-4", dest="explore_4", action="store_true", required=True)
    p.add_argument("--declaration", type=policy.path, help="the declaration (default studies/exploration_4.toml)")
    p.add_argument("--reduced", action="store_true", help="the CPU smoke form (CI)")
    p.add_argument("--backend", default="auto", choices=("auto", "host", "cupy"))
    p.add_argument("--json", type=policy.path, help="write the search's per-run JSON here")
    p.add_argument("--shard", help="I/N: run the chunks k with k mod N = I − 1 (merge the N JSONs with --merge)")
    p.add_argument("--chunk-rows", type=int, default=16384, help="most runs in one batched loop (whole groups; "
                   "default 16384; results do not depend on it)")
    p.add_argument("--eager", action="store_true", help="no CUDA graph (GPU)")
    p.add_argument("--budget", type=float, help="seconds after which no further chunk starts (its groups: not run)")
    p.add_argument("--ray", type=int, metavar="N", help="run the N shards as Ray tasks (one GPU each on cupy, one "
                   "CPU each on host) and merge them into --json (pip install --group ray)")
    p.add_argument("--ray-address", metavar="ADDR", help="with --ray: the cluster (default: Ray's own choice, "
                   "$RAY_ADDRESS, else a new local Ray; local: always a new local one)")
    p.add_argument("--merge", type=policy.path, nargs="+", help="shard JSONs to join into --json")
    p.add_argument("--from-json", type=policy.path, help="judge this search JSON instead of running")
    p.add_argument("--judged", type=policy.path, help="write the judged map (selection applied) as JSON here")
    p.add_argument("--plot", type=policy.path, help="draw the map, one PNG per task: <stem>_<task>.png")
    p.add_argument("--bench", help="comma-separated batch sizes: run-steps/s of the search's loop (no search runs)")
    p.add_argument("--bench-steps", type=int, default=200, help="timed steps per batch size (after 20 untimed)")
    p.add_argument("--bench-matmul", choices=("highest", "high"), help="with --bench: float32 matmul precision to time "
                   "(default: the declaration's; high = TF32, which the search runs only if its declaration says so)")
    return p


def body(argv: list[str], owns) -> int:
    """The command; ``owns(name)``: whether a file of studies/results/ is this study's own (analysis/cli/studies.py)."""
    args = parser().parse_args(argv)
    start = time.perf_counter()
    if args.chunk_rows < 1:
        raise SuiteError("--chunk-rows must be at least 1")
    modes = [m for m, given in (("--merge", args.merge), ("--from-json", args.from_json), ("--bench", args.bench),
                                ("--ray", args.ray is not None)) if given]
    if len(modes) > 1:
        raise SuiteError(f"give one of {', '.join(modes)}")
    if args.merge:
        return merge(args, owns)
    if args.from_json:
        return from_json(args, owns)
    if args.ray_address is not None and args.ray is None:
        raise SuiteError("--ray-address picks the cluster of --ray N: give --ray")
    if args.ray is not None:
        return ray_search(args, start, owns)
    try:
        import torch
    except ImportError:
        raise SuiteError("--explore-4 needs PyTorch: pip install --group deep (or the machine's own torch)") from None
    from repro.backends import get_backend
    from repro.core.contract import CONTRACTS, load
    from repro.learning.deep import explore
    from repro.learning.deep.explore import parse_shard
    from repro.learning.deep.loop import device_for

    shard = parse_shard(args.shard)
    decl = explore.load(args.declaration or explore.DECLARATION, reduced=args.reduced)
    if args.bench:
        return bench(args, decl)
    decl = _ready(args, decl, owns)
    backend = get_backend(args.backend)
    device = device_for(backend)
    say = policy.progress("study")
    deadline = start + args.budget if args.budget else None
    say(_announce(decl, f"{backend.name} ({device})", args.chunk_rows)
        + (f", shard {shard[0]}/{shard[1]}" if shard else ""))
    head = {**explore.header(decl, backend.name, backend.describe(), torch.__version__),
            "shard": args.shard if shard else None}

    def partial(groups, not_run):  # after each chunk: a call cut off keeps the chunks it finished
        if args.json:
            write_text(args.json, dump({**head, "groups": groups, "not_run": not_run}))

    raw = explore.run_search(decl, backend, load(CONTRACTS), device=device, graph=device == "cuda" and not args.eager,
                             chunk_rows=args.chunk_rows, shard=shard, progress=say, deadline=deadline,
                             on_chunk=partial)
    result = {**head, "groups": raw["groups"], "not_run": raw["not_run"]}
    if args.json:
        write_text(args.json, dump(result))
    if raw["seconds"]:
        print(f"loop: {raw['run_steps'] / 1e6:.1f} M run-steps in {raw['seconds']:.1f} s = "
              f"{raw['run_steps'] / raw['seconds'] / 1e6:.3f} M run-steps/s")
    if shard is None:
        show(result, args)
    print(f"{backend.name}: done in {time.perf_counter() - start:.1f} s")
    return 0


def ray_search(args, start: float, owns) -> int:
    """``--ray N``: the search as N shards, one Ray task each (repro/learning/deep/explore_ray.py), merged into
    ``--json`` as the shards arrive (a run cut off keeps those done), then judged and printed as the unsharded run.
    The driver needs Ray, not PyTorch (the tasks need both)."""
    from repro.backends import get_backend
    from repro.learning.deep import explore, explore_ray

    if args.ray < 1:
        raise SuiteError(f"--ray {args.ray}: give at least 1 shard")
    if args.shard:
        raise SuiteError("--ray runs every shard: give no --shard")
    explore_ray.import_ray()  # one line where Ray is not installed, before anything is read or run
    decl = _ready(args, explore.load(args.declaration or explore.DECLARATION, reduced=args.reduced), owns)
    # auto: what answers here (a cluster whose driver has no GPU names --backend cupy)
    name = args.backend if args.backend != "auto" else get_backend("auto").name
    say = policy.progress("study")
    say(_announce(decl, name, args.chunk_rows) + f", {args.ray} shard(s) on Ray")
    until = time.time() + args.budget - (time.perf_counter() - start) if args.budget else None

    def partial(result):  # after each shard: the shards done so far, the others' groups under not_run
        if args.json:
            write_text(args.json, dump(result))

    got = explore_ray.search(decl, name, args.ray, chunk_rows=args.chunk_rows, eager=args.eager, until=until,
                             address=args.ray_address, progress=say, on_shard=partial)
    result = got["result"]
    if got["seconds"]:
        print(f"loop: {got['run_steps'] / 1e6:.1f} M run-steps in {got['seconds']:.1f} s of shards' loops = "
              f"{got['run_steps'] / got['seconds'] / 1e6:.3f} M run-steps/s per shard")
    show(result, args)
    print(f"{name}: done in {time.perf_counter() - start:.1f} s on {args.ray} Ray shard(s)")
    return 0


def _ready(args, decl, owns):
    """``decl`` with its calibration read in, once the outputs are checked against the inputs (nothing run yet)."""
    from repro.learning.deep import explore

    decl = explore.calibrated(decl)
    calibrations = [("calibration", ROOT / t.calibration) for t in decl.tasks.values() if t.calibration]
    check_outputs(_outputs(args), inputs=[("declaration", args.declaration or explore.DECLARATION), *calibrations],
                  committed=_committed(args, [args.json, args.judged], owns))
    return decl


def _announce(decl, where: str, chunk_rows: int) -> str:
    """The search's first progress line: its size and where it runs."""
    runs = len(decl.groups) * decl.rows_per_group
    return (f"exploration_4{' (reduced)' if decl.reduced else ''}: {len(decl.groups)} groups, {runs} runs × "
            f"{decl.loop['steps']} steps on {where}, chunks of ≤ {chunk_rows} rows")


def dump(result: dict) -> str:
    """The search's JSON text: compact, keys in insertion order, NaN as null (deterministic)."""
    return render.strict_json(result, separators=(",", ":")) + "\n"


def _outputs(args) -> list[Output]:
    return [Output("--json", args.json, suffix=".json"), Output("--judged", args.judged, suffix=".json"),
            Output("--plot", args.plot, suffix=".png")]


def _committed(args, paths, owns) -> list:
    """Paths under studies/results/exploration_4_* that this run may write: the search as declared only."""
    return [] if args.reduced else committed_results(paths, owns)


def show(result: dict, args) -> None:
    """Judge ``result``, print the map's lines, write ``--judged`` and ``--plot`` where given."""
    from analysis.judge import explore_study

    judged = judge_and_show(result, explore_study, args.judged)
    if args.plot:
        from analysis.present import explore_plots, plots
        from repro.core.paths import JUDGED_CONFIRMATION

        confirmed = json.loads(JUDGED_CONFIRMATION.read_text(encoding="utf-8")) if JUDGED_CONFIRMATION.is_file() else None
        for task, fig in explore_plots.maps(judged, confirmed).items():
            target = Path(args.plot).with_name(f"{Path(args.plot).stem}_{task}.png")
            plots.save(fig, target)
            print(f"wrote {target}")


def merge(args, owns) -> int:
    from repro.learning.deep.explore import merge as join

    if not args.json:
        raise SuiteError("--merge writes the joined search: give --json")
    given = [o for o in ("shard", "from_json", "bench", "reduced", "judged", "plot", "bench_matmul", "ray_address")
             if getattr(args, o)]
    if given:
        raise SuiteError(f"--merge takes no {', '.join('--' + o.replace('_', '-') for o in given)}")
    check_outputs([Output("--json", args.json, suffix=".json")], inputs=[("shard", p) for p in args.merge],
                  committed=_committed(args, [args.json], owns))
    result = join([read_study(p, "exploration_4") for p in args.merge])
    write_text(args.json, dump(result))
    print(f"merged {len(args.merge)} shard(s): {len(result['groups'])} of {result['groups_total']} groups"
          + (f"; not run: {len(result['not_run'])}" if result["not_run"] else ""))
    return 0


def from_json(args, owns) -> int:
    given = [o for o in ("json", "shard", "reduced", "budget", "ray_address") if getattr(args, o)]
    if given:
        raise SuiteError(f"--from-json takes no {', '.join('--' + o.replace('_', '-') for o in given)}")
    check_outputs(_outputs(args), inputs=[("search JSON", args.from_json)], committed=_committed(args, [args.judged], owns))
    result = read_study(args.from_json, "exploration_4")
    if result.get("shard"):
        raise SuiteError(f"{args.from_json}: one shard ({result['shard']}): merge the shards first (--merge)")
    show(result, args)
    return 0


def bench(args, decl) -> int:
    """Run-steps/s of the search's loop per task: the first ``size`` rows of a chunk of the first (τ, aux, lr)'s
    settings (a task without its calibration borrows another's τ unit and β: the speed does not depend on them)."""
    from dataclasses import replace

    import torch

    from repro.backends import get_backend
    from repro.learning.deep import explore
    from repro.learning.deep.loop import DeepLoop

    try:
        sizes = [int(x) for x in args.bench.split(",") if x.strip()]
    except ValueError:
        raise SuiteError("--bench takes comma-separated batch sizes") from None
    if not sizes or min(sizes) < 1 or args.bench_steps < 1:
        raise SuiteError("--bench needs batch sizes ≥ 1 and --bench-steps ≥ 1")
    with_unit = next(t for t in decl.tasks.values() if t.tau_unit is not None)  # speed does not depend on τ's unit
    tasks = {k: t if t.tau_unit is not None else replace(t, tau_unit=with_unit.tau_unit, beta=with_unit.beta)
             for k, t in decl.tasks.items()}
    decl = replace(decl, matmul=args.bench_matmul or decl.matmul, tasks=tasks)
    backend = get_backend(args.backend)
    device = "cuda" if backend.name == "cupy" else "cpu"
    if device == "cpu":
        torch.set_num_threads(1)
    graph = device == "cuda" and not args.eager
    say = policy.progress("study")
    from repro.core.contract import CONTRACTS, load

    contract = load(CONTRACTS)
    for task in decl.tasks:
        per = decl.rows_per_group
        for size in sizes:
            groups = [explore.Group(k, task, decl.taus[0], decl.auxes[0], decl.lrs[0]) for k in range(-(-size // per))]
            rows, _ = explore.build_rows(decl, groups, backend, contract, limit=size)
            cfg = decl.loop_config(task)
            torch.set_float32_matmul_precision(decl.matmul)
            torch.backends.cuda.matmul.allow_tf32 = decl.matmul == "high"
            loop = DeepLoop(cfg, rows, backend, contract.slots, device=device, minibatch_stats=False)
            if graph:
                loop.capture()
            loop.advance(20)
            if device == "cuda":
                torch.cuda.synchronize()
            began = time.perf_counter()
            loop.advance(args.bench_steps)
            if device == "cuda":
                torch.cuda.synchronize()
            secs = time.perf_counter() - began
            R = len(rows)
            print(f"{task} {R} runs ({'graph' if graph else 'eager'}, matmul {decl.matmul}): "
                  f"{args.bench_steps / secs:.1f} steps/s = {R * args.bench_steps / secs / 1e6:.3f} M run-steps/s")
            say(f"{task} {R} runs done")
            del loop
            if device == "cuda":
                torch.cuda.empty_cache()
        sys.stdout.flush()
    return 0
