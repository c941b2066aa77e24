"""``python -m analysis study --deep``: the third pre-registered study (studies/preregistered_3.toml) — the
incident end to end in a PyTorch loop with the controller kernel on the ISV (issue 34).

Without ``--kernel``: the pre-registered study (every declared cell and arm, 100 seeds each, 20000 steps; about
3 minutes on one H200 with ``--backend cupy``), or ``--reduced``, its CPU smoke form (primary cell, original and
fixed, 4 seeds, 1200 steps). Prints per cell each arm's collapse fraction (the primary endpoint) with its exact
95 % interval and the paired exact McNemar test of the original against the fixed kernel (Holm-adjusted over the
declared family), then the headline read from the primary cell. Exit 0.

With ``--kernel K.cu`` — the closed-loop check (issue 42 item 6): the candidate beside the fixed kernel in the
collapse map's sentinel cells (:data:`MAP`; analysis/judge/explore_study.py ``sentinels``: where the fixed kernel
holds and λ held at 0.001 drifts), in the fourth study's loop (the map's search declaration), on fresh seeds
(:data:`CHECK_SEED`), each cell's drift threshold its map group's midpoint, and per cell the pairs that give known
power (exact McNemar at α / cells) to catch a controller held at the floor, at the map's discordance between λ held
at 0.001 and the fixed kernel (analysis/judge/sentinel_check.py: its POWER, at most MOST pairs, the power reached
printed). One line per cell (drift counts, discordant pairs, p, Holm p, power). Exit 1 when in any sentinel cell
the candidate drifts in more runs than the fixed kernel with Holm-adjusted exact McNemar p < α (the third
pre-registration's α); else 0.
Without a map, or a map without a sentinel cell: one line, exit 2 (the primary cell cannot tell: the original
itself does not collapse there). ``--map OUT.png`` draws the candidate's drift per sentinel cell beside the fixed
kernel's. With ``--reduced`` or ``--cells``: the third study's cells instead (the primary cell, or those named), its
collapse endpoint, exit 1 when the candidate collapses in more runs than the fixed kernel with exact McNemar p < α
in the primary cell (a smoke form, no known power). The candidate is seeded with the fixed kernel's λ. On the host
its C++ build runs in a confined child (:func:`analysis.cli.confined.measure`) that runs the loops and hands back
what they measured as plain data; this process reads it against its own plan and judges (cupy: NVRTC on the GPU,
in this process).

Bad input: one line, exit 2. Progress on stderr. Only the study as pre-registered (no ``--reduced``, ``--kernel``,
``--cells``, ``--seeds``, ``--steps``) may write the committed results (studies/results/preregistered_3_*).
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

from analysis.cli import confined, policy
from analysis.present import deep_section, render
from repro.core.errors import SuiteError
from repro.core.outputs import Output, check_outputs, committed_results, write_text
from repro.core.paths import JUDGED_CONFIRMATION, JUDGED_MAP, ROOT


def parser() -> policy.Parser:
    p = policy.Parser("study", description="the third pre-registered study (--deep)")
    p.add_argument("--deep", action="store_true", required=True)
    p.add_argument("--kernel", type=policy.path, help="candidate kernel .cu, run beside the fixed kernel")
    p.add_argument("--reduced", action="store_true", help="the CPU smoke form (CI)")
    p.add_argument("--backend", default="auto", choices=("auto", "host", "cupy"))
    p.add_argument("--json", type=policy.path, help="write the study's JSON here")
    p.add_argument("--traces", type=policy.path, help="write the loop's KL/λ trace windows (.npz) here")
    p.add_argument("--cells", help="comma-separated declared cells to run (not the pre-registered study)")
    p.add_argument("--seeds", type=int, help="seeds per cell (not the pre-registered study; 2..1000)")
    p.add_argument("--steps", type=int, help="steps per run (not the pre-registered study)")
    p.add_argument("--mode", default="batched", choices=("batched", "per_row"),
                   help="the controller once for all rows of an arm (batched) or once per row")
    p.add_argument("--eager", action="store_true", help="no CUDA graph (GPU)")
    p.add_argument("--budget", type=float, help="seconds after which no further loop starts (see [trim])")
    p.add_argument("--prereg", type=policy.path, help="pre-registration TOML (default studies/preregistered_3.toml)")
    p.add_argument("--markdown", type=policy.path, help="write the study's section here, its two figures beside it")
    p.add_argument("--from-json", type=policy.path, help="with --markdown: draw from this study JSON instead of running")
    p.add_argument("--map", type=policy.path, help="with --kernel: draw the closed-loop check's sentinel cells here (.png)")
    p.add_require_sandbox()
    return p


def body(argv: list[str], owns) -> int:
    """The command; ``owns(name)``: whether a file of studies/results/ is this study's own (analysis/cli/studies.py)."""
    args = parser().parse_args(argv)
    confined.require_first(args.require_sandbox)
    start = time.perf_counter()
    say = policy.progress("study")
    try:
        import torch
    except ImportError:
        raise SuiteError("--deep needs PyTorch: pip install --group deep (or the machine's own torch)") from None
    from analysis.judge import deep_study as judge
    from repro.backends import get_backend
    from repro.core.contract import CONTRACTS
    from repro.core.contract import load as load_contract
    from repro.core.kernel_source import load_kernel
    from repro.learning.deep import prereg as prereg3
    from repro.learning.deep import study
    from repro.learning.deep.loop import device_for

    contract = load_contract(CONTRACTS)  # the tracked contract: the third study's controllers as pre-registered
    if args.from_json:
        return from_json(args, contract, owns)
    prereg = prereg3.load(args.prereg or prereg3.PREREGISTERED_3)
    cells = [c.strip() for c in args.cells.split(",") if c.strip()] if args.cells is not None else None
    if cells == []:
        raise SuiteError("--cells needs at least one name")
    if args.seeds is not None and not 2 <= args.seeds <= 1000:
        raise SuiteError("--seeds must lie in 2..1000")
    warmup = prereg.reduced.get("warmup", prereg.loop.warmup) if args.reduced else prereg.loop.warmup
    if args.steps is not None and not (warmup < args.steps <= 10**6 and args.steps % prereg.loop.eval_every == 0):
        raise SuiteError(f"--steps must be a multiple of {prereg.loop.eval_every} above the warm-up ({warmup}), "
                         "at most 10^6")
    check = bool(args.kernel) and cells is None and not args.reduced  # the closed-loop check on the map
    if args.map and not check:
        raise SuiteError("--map draws the closed-loop check's sentinel cells: give --kernel, without --reduced or "
                         "--cells")
    extra = [f"--{o}" for o in ("traces", "seeds", "steps", "budget") if check and getattr(args, o) is not None] \
        + (["--mode per_row"] if check and args.mode != "batched" else [])
    if extra:
        raise SuiteError(f"the closed-loop check takes no {', '.join(extra)}: its pairs come from the power "
                         "computation, its loop from the map's search")
    as_preregistered = not (args.reduced or args.kernel or cells or args.seeds or args.steps)
    committed = committed_results((args.json, args.traces), owns) if as_preregistered else []
    data = os.path.realpath(ROOT / "tests" / "data")
    if args.traces and as_preregistered and Path(os.path.realpath(args.traces)).is_relative_to(data):
        committed.append(args.traces)
    inputs = [("pre-registration", args.prereg or prereg3.PREREGISTERED_3)] + ([("kernel", args.kernel)] if args.kernel else []) \
        + ([("collapse map", MAP)] if check else [])
    check_outputs([Output("--json", args.json), Output("--traces", args.traces, suffix=".npz"),
                   Output("--markdown", args.markdown, suffix=".md"), Output("--map", args.map, suffix=".png")],
                  inputs=inputs, committed=committed)
    candidate = None
    if args.kernel and args.markdown:
        raise SuiteError("--markdown draws the original against the fixed kernel; with --kernel write --json")
    if args.kernel:
        candidate = load_kernel(args.kernel, contract.controller("fixed").symbol)
        if check:
            return closed_loop_check(args, contract, candidate, prereg.endpoint.alpha, start, say)
        if cells is None:
            cells = ["primary"]
    backend = get_backend(args.backend)
    device = device_for(backend)
    graph = device == "cuda" and not args.eager
    trace_of = (lambda arm, cell, i: cell.name == "primary" and arm in ("original", "fixed")
                or cell.name == "resume" and arm in ("original", "fixed") and i == 0) if args.traces or as_preregistered \
        else (lambda arm, cell, i: cell.name == "primary" and i == 0)
    deadline = start + args.budget if args.budget else None

    def measure() -> dict:
        return study.run_study(backend, contract, prereg, device=device, graph=graph, reduced=args.reduced, candidate=candidate,
                               cells=cells, seeds=args.seeds, steps=args.steps, mode=args.mode, trace_of=trace_of,
                               progress=say, deadline=deadline)

    def work(result_raw: dict, out: dict) -> int:
        pair = ("candidate", "fixed") if candidate is not None else ("original", "fixed")
        with warnings.catch_warnings():  # all-NaN medians before the probe batch exists are NaN, as meant
            warnings.simplefilter("ignore", RuntimeWarning)
            result = judge.judge(result_raw, prereg, pair)
        result.update(study="preregistered_3", prereg=prereg.path, backend=backend.name, device=backend.describe(),
                      torch=torch.__version__, reduced=bool(args.reduced), as_preregistered=as_preregistered,
                      kernel=str(args.kernel) if args.kernel else None, mode=args.mode, graph=graph,
                      loop_seconds={k: v["seconds"] for k, v in result_raw["loops"].items()},
                      steps={k: v["cfg"].steps for k, v in result_raw["loops"].items()})
        for name, c in result["cells"].items():
            arms = "  ".join(f"{a} {v['fraction']:6.1%} [{v['ci_low']:.3f}, {v['ci_high']:.3f}]" for a, v in c["arms"].items()
                             if a in (*pair, "const:0", "const:0.05", "const:1"))
            m = c.get("mcnemar")
            test = (f"  discordant {m['only_first']}:{m['only_second']} p {m['p']:.3g}"
                    + (f" p_holm {m['p_holm']:.3g}" if "p_holm" in m else " (exploratory)")) if m else ""
            print(f"{name:12s} {arms}{test}")
        h = result["headline"]
        note = " [reduced or partial run: a smoke test, not the pre-registered evidence]" if not as_preregistered else ""
        if candidate is None:
            print(f"headline ({pair[0]} vs {pair[1]}, primary cell): {h['verdict']}{note}"
                  + (f" — {h['first']:.1%} vs {h['second']:.1%}, p {h['p']:.3g}" if "p" in h else ""))
            primary = deep_section.five_words(result, deep_section.levels(result["pair"], contract)).get("primary", {})
            if primary.get("verdict"):  # the pre-registered words above; the five words (issue 42 item 4) beside them
                k, n = primary["floor_evaluations"]
                print(f"re-read in five words (after the fact): primary cell: {primary['verdict']} (the original's "
                      f"median λ at its floor at {k} of {n} evaluations after the warm-up)")
        elif "p" in h:
            print(f"candidate vs fixed, primary cell: {h['first']:.1%} vs {h['second']:.1%} collapse, discordant "
                  f"{h['discordant'][0]}:{h['discordant'][1]}, exact McNemar p {h['p']:.3g}{note}")
        if result["not_run"]:
            print(f"not run (budget): {', '.join(result['not_run'])}")
        if out["--json"]:
            write_text(out["--json"], render.strict_json(result, separators=(",", ":")))
        if out["--traces"]:
            write_traces(out["--traces"], result_raw)
        if out["--markdown"]:
            write_markdown(out["--markdown"], result, contract)
        print(f"{backend.name}: done in {time.perf_counter() - start:.1f} s")
        return 1 if candidate is not None and judge.candidate_worse(result, prereg.endpoint.alpha) else 0

    outputs = {"--json": args.json, "--traces": args.traces, "--markdown": args.markdown}
    if candidate is None:
        return work(measure(), outputs)
    # The candidate's host build runs its own code: the loops run in a confined child that hands back what they
    # measured as plain data (repro.learning.deep.study.write_measured), read here against this process's own plan;
    # the judgement, the verdict (exit 1) and the outputs are this process's, never the child's. torch's optimisers
    # import torch._dynamo on first use, whose cache folder asks NSS for the user's name (a socket to nscd):
    # imported here, before the sandbox.
    import torch._dynamo  # noqa: F401
    planned = study.plan(prereg, args.reduced, True, cells, args.seeds, args.steps)
    raw = confined.measure("study", backend, lambda folder: study.write_measured(folder / study.MEASURED, measure()),
                           lambda folder: study.read_measured(folder / study.MEASURED, planned, trace_of),
                           require=args.require_sandbox)
    return 2 if raw is None else work(raw, outputs)


#: The collapse map the closed-loop check reads its sentinel cells from (the fourth study's judged search).
MAP = JUDGED_MAP
#: The closed-loop check's key seed: its runs' keys hash it (repro/learning/deep/confirm.py run_key), fresh
#: against the search's and the confirmation's.
CHECK_SEED = 4600


def _shown(path: Path) -> str:
    where = Path(os.path.realpath(path))
    return where.relative_to(os.path.realpath(ROOT)).as_posix() if where.is_relative_to(os.path.realpath(ROOT)) \
        else str(path)


def sentinel_cells(path: Path | None = None) -> tuple[dict, list[dict]]:
    """The judged map at ``path`` (default :data:`MAP`) and its sentinel cells (analysis/judge/explore_study.py
    sentinels): cells where a controller that lets λ sink is caught. None, or no map: one line, exit 2 — the third
    study's primary cell cannot tell (the original itself does not collapse there), so a 0 from it would say
    nothing."""
    import json

    from analysis.judge.explore_study import sentinels

    path = Path(path or MAP)
    why = "no sentinel regime: the closed-loop check cannot tell a harmful controller here"
    if not path.is_file():
        raise SuiteError(f"{why} (no collapse map: {_shown(path)} is absent; the fourth study's search draws it)")
    # the committed confirmation's 'the fix holds' cells join the committed map's (a confirmation belongs to its map)
    confirmed = JUDGED_CONFIRMATION if path.resolve() == JUDGED_MAP.resolve() else None
    try:
        judged = json.loads(path.read_text(encoding="utf-8"))
        extra = json.loads(confirmed.read_text(encoding="utf-8"))["cells"] if confirmed and confirmed.is_file() else None
        found = sentinels(judged, extra)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise SuiteError(f"{_shown(path)}: not a judged collapse map ({err})") from None
    if not found:
        raise SuiteError(f"{why} (the map has no cell where the fixed kernel holds and λ held at 0.001 drifts)")
    return judged, found


def closed_loop_check(args, contract, candidate, alpha: float, start: float, say) -> int:
    """``study --deep --kernel K.cu``: the candidate beside ``contract``'s fixed kernel in the map's sentinel cells
    (the module's docstring); exit 1 where it drifts in more runs (Holm p < ``alpha``), else 0."""
    import torch

    from analysis.judge import sentinel_check
    from repro.backends import get_backend
    from repro.learning.deep import confirm, explore
    from repro.learning.deep.loop import device_for

    judged_map, found = sentinel_cells(MAP)
    try:
        planned = sentinel_check.plan(judged_map, found, alpha)
        search = ROOT / (judged_map.get("source") or {}).get("declaration", explore.DECLARATION)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise SuiteError(f"{_shown(MAP)}: cannot plan the closed-loop check ({err})") from None
    decl = confirm.closed_loop(search, planned, CHECK_SEED, alpha)
    backend = get_backend(args.backend)
    device = device_for(backend)
    graph = device == "cuda" and not args.eager
    say(f"closed-loop check: {len(decl.cells)} sentinel cell(s) of {_shown(MAP)}, "
        f"{sum(c.pairs for c in decl.cells)} pairs × {decl.loop['steps']} steps on {backend.name} ({device})")
    import torch._dynamo  # noqa: F401 — before the sandbox (see body)

    raw = confined.measure(
        "study", backend,
        lambda folder: confirm.write_measured(folder / confirm.MEASURED, confirm.run(
            decl, backend, contract, device=device, graph=graph, progress=say, sources={"candidate": candidate})),
        lambda folder: confirm.read_measured(folder / confirm.MEASURED, decl), require=args.require_sandbox)
    if raw is None:
        return 2
    judged = sentinel_check.judge(raw, planned, alpha)
    judged.update(kernel=str(args.kernel), map=_shown(MAP), declaration=decl.path, seed=decl.seed,
                  backend=backend.name, device=backend.describe(), torch=torch.__version__,
                  loop_seconds=raw["seconds"], run_steps=raw["run_steps"])
    for line in sentinel_check.lines(judged):
        print(line)
    if args.json:
        write_text(args.json, render.strict_json(judged, separators=(",", ":")))
    if args.map:
        from analysis.present import explore_plots, plots

        plots.save(explore_plots.check(judged, Path(args.kernel).name), args.map)
    print(f"{backend.name}: done in {time.perf_counter() - start:.1f} s")
    return 1 if judged["worse"] else 0


def write_traces(path: Path, raw: dict) -> None:
    """The KL EMA the controller saw and the λ it wrote, per step, in three windows (cold start: the first 2000
    steps; resume: 500 steps before the EMA restart to 1500 after; steady: the last 2000), for seed 0 of the
    original and fixed kernels (primary cell; resume cell for the resume window). ``.npz``, float32."""
    import io

    import numpy as np

    arrays = {}
    for loop in raw["loops"].values():
        if loop.get("trace_rows") is None:
            continue
        rows = list(loop["trace_rows"])
        steps = loop["cfg"].steps
        for k, (arm, cell, _u, i) in enumerate(loop["entries"]):
            if k not in rows or i != 0 or arm not in ("original", "fixed"):
                continue
            j = rows.index(k)
            kl, lam = loop["trace_kl"][:, j], loop["trace_lambda"][:, j]
            windows = {"cold": slice(0, min(2000, steps)), "steady": slice(max(0, steps - 2000), steps)} \
                if cell == "primary" else {"resume": slice(steps // 2 - 500, steps // 2 + 1500)} if cell == "resume" else {}
            for name, w in windows.items():
                arrays[f"{arm}__{name}__kl"] = kl[w].astype(np.float32)
                arrays[f"{arm}__{name}__lambda"] = lam[w].astype(np.float32)
                arrays[f"{arm}__{name}__start"] = np.int64(w.start)
    if not arrays:
        raise SuiteError("--traces: no trace window was recorded (run the primary cell)")
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())


def write_markdown(path: Path, result: dict, contract) -> None:
    """The report's section on the study (the compared controllers' levels from ``contract``), with its figures
    drawn beside ``path`` (``<stem>_<figure>``)."""
    from analysis.present import deep_plots, deep_section, plots

    drawn = {}
    for name, draw in (("cells", lambda: deep_plots.cells(result)),
                       ("incident", lambda: deep_plots.incident(result, deep_section.primary_kl_target()))):
        target = path.with_name(f"{path.stem}_{name}.png")
        plots.save(draw(), target)
        drawn[name] = target.name
    lines = deep_section.section(result, contract, figures=False)
    lines += [f"![{deep_section.FIGURES['fig_deep_' + k + '.png']}]({v})" for k, v in drawn.items()] + [""]
    write_text(path, "\n".join(lines))


def from_json(args, contract, owns) -> int:
    """``--from-json J --markdown M``: the section and figures of a study already run (no loop runs), read against
    ``contract``."""
    import json

    if not args.markdown:
        raise SuiteError("--from-json draws the section: give --markdown")
    given = [o for o in ("json", "traces", "kernel", "cells", "seeds", "steps", "budget", "map") if getattr(args, o)]
    if given or args.reduced:
        raise SuiteError(f"--from-json takes no {', '.join('--' + o for o in given + (['reduced'] if args.reduced else []))}")
    committed = committed_results([args.markdown], owns)
    check_outputs([Output("--markdown", args.markdown, suffix=".md")], inputs=[("study JSON", args.from_json)],
                  committed=committed)
    try:
        result = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SuiteError(f"--from-json {args.from_json}: cannot read the study JSON ({err})") from None
    if result.get("study") != "preregistered_3":
        raise SuiteError(f"--from-json {args.from_json}: not a third-study JSON")
    write_markdown(args.markdown, result, contract)
    print(f"wrote {args.markdown}")
    return 0
