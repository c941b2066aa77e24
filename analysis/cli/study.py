"""The learning-loop study: Q-learning and an actor on gymnasium toy-text tasks, the controller kernel driving λ.

Defaults come from the pre-registered file (studies/preregistered.toml): its environments, seeds, controllers
(``contract`` = every contract entry, ``const:X`` = λ held at X, ``ablation`` = the 14 ablation variants,
``ablation:floor+seed`` = one of them) and grid. ``--steps`` shortens the runs (the JSON then says it is not
the pre-registered study). Prints one line per environment × controller (progress on stderr); ``--markdown``
writes the report's section on the study with the figures drawn here linked; exit 2 on bad input.

``--second`` runs the second pre-registered study (studies/preregistered_2.toml: where the controller's
KL is measured, criteria that can fire, paired tests) with the same output flags (``--plot``: collapse per regime,
``--grid-plot``: the incident figure) and ``--env``/``--controllers``/``--seeds``/``--steps``; ``--calibrate``
runs its calibration (constant λ only, seeds 500:508) and writes ``--json``; ``--exploratory target`` or
``cold-start`` runs a declared exploratory run (not pre-registered: :data:`repro.learning.study2.EXPLORATORY_TARGET`,
the KL target at 1.0; :data:`~repro.learning.study2.EXPLORATORY_COLD_START`, the signature's λ side in the first
evaluation window) and writes ``--json``; ``--remake-incident`` with ``--from-json`` runs that study's incident
figure again on ``--backend``
(refused unless every series it held comes back bit for bit) and writes the JSON with it to ``--json``.

The committed CPU result is ``python -m analysis study --backend host`` with ``--json``, ``--plot``, ``--grid-plot``
and ``--markdown`` under ``studies/results/preregistered_host*``; only the study as pre-registered (no ``--env``,
``--controllers``, ``--seeds`` or ``--steps``) may write there. Bounds: ``--steps`` at most 10⁷, ``--seeds`` at
most 10⁶ seeds below 2⁶⁴. The pre-registered study takes about 9 minutes on 2 cores (524 s measured).
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

from analysis.cli import policy, studies, study_runs
from analysis.judge.first_study import merge
from analysis.present import render, study_section
from repro.backends import backend_names, get_backend
from repro.core.contract import load
from repro.core.errors import SuiteError
from repro.core.outputs import Output, check_outputs, committed_results, write_text
from repro.learning import controllers as ctl
from repro.learning.env import make
from repro.learning.prereg import MAX_SEEDS, MAX_STEPS, PREREGISTERED, grid_columns, load_prereg, parse_seeds, read_result


@policy.command("study")
def main(argv: list[str] | None = None) -> int:
    own = studies.chosen(argv)  # a study with a parser of its own (analysis/cli/studies.py)
    if own is not None:
        return own.run(argv)
    parser = policy.Parser("study", description=__doc__.splitlines()[0])
    parser.add_argument("--env", help="gymnasium environment id(s), comma-separated (default: pre-registered)")
    parser.add_argument("--controllers", help="comma-separated controller names (default: pre-registered)")
    parser.add_argument("--seeds", help=f"A:B, seeds A..B-1 (default: pre-registered; at most {MAX_SEEDS})")
    parser.add_argument("--backend", default="auto", choices=backend_names())
    parser.add_argument("--json", type=policy.path, help="write the study's JSON here")
    parser.add_argument("--plot", type=policy.path, help="draw collapse fractions and agreement over steps into this PNG")
    parser.add_argument("--grid-plot", type=policy.path, help="draw the per-grid-point collapse heatmap into this PNG")
    parser.add_argument("--markdown", type=policy.path, help="write the study's section (tables, brackets) as markdown here")
    parser.add_argument("--steps", type=int, help="override the pre-registered steps per run (not the pre-registered "
                        f"study; at most {MAX_STEPS})")
    parser.add_argument("--prereg", type=policy.path, default=None, help=argparse.SUPPRESS)
    for study in studies.STUDIES.values():
        if study.flag:
            parser.add_argument(study.flag, action="store_true", help=study.what + (
                f" (its own options: {study.flag} --help)" if study.run else ""))
    parser.add_argument("--calibrate", action="store_true", help="with --second: its calibration (constant λ only)")
    parser.add_argument("--from-json", type=policy.path, help="with --second: draw --plot/--grid-plot/--markdown from "
                        "this study JSON instead of running (the committed H200 result)")
    parser.add_contracts()
    parser.add_argument("--exploratory", choices=("target", "cold-start"), help="with --second: a declared "
                        "exploratory run (not pre-registered) into --json: the KL target at 1.0, or the signature's λ "
                        "side in the first evaluation window")
    parser.add_argument("--remake-incident", action="store_true", help="with --second --from-json: run its incident "
                        "again on --backend (bit for bit) and write the JSON with every incident series to --json")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    for flag, given in (("--calibrate", args.calibrate), ("--from-json", args.from_json),
                        ("--exploratory", args.exploratory), ("--remake-incident", args.remake_incident)):
        if given and not args.second:  # else the first study would run in full, ignoring it
            raise SuiteError(f"{flag} is the second study's: give --second with it")
    if args.calibrate and args.from_json:
        raise SuiteError("--calibrate runs the calibration; --from-json draws a study already run: give one of them")
    if args.remake_incident and not (args.from_json and args.json):
        raise SuiteError("--remake-incident runs the incident of --from-json's study again: give --from-json and --json")
    if args.exploratory and (args.calibrate or args.from_json):
        raise SuiteError("--exploratory runs its own declared study: give it without --calibrate and --from-json")
    if args.second:
        return second(args, start)
    args.prereg = args.prereg or PREREGISTERED
    prereg = load_prereg(args.prereg)
    L = prereg.learning
    _check_steps(args.steps, L.eval_every, prereg.collapse.warmup)
    envs = _names(args.env, prereg.envs)
    names = _names(args.controllers, prereg.controllers)
    if not envs or not names:
        raise SuiteError("--env and --controllers need at least one name each")
    seeds = parse_seeds(args.seeds if args.seeds is not None else prereg.seeds)
    _check_outputs(args, [("pre-registration", args.prereg)], _as_preregistered(args), "first")
    backend = get_backend(args.backend)
    for env in envs:  # every environment and controller checked before the first run: no work lost to a typo
        make(env, L.default_max_episode_steps)
    contract = load(args.contracts)
    names = ctl.expand(names, contract)
    for name in names:
        ctl.group(backend, name, contract)  # a bad name or a kernel that does not compile, as one line
    say = policy.progress("study")
    # One run per environment × controller, merged (merge() equals the joint study: tests/test_study.py),
    # so that progress shows from the start and after each block.
    parts, blocks = [], len(envs) * len(names)
    runs = len(seeds) * len(grid_columns(prereg.grid)["pi_view"])
    for n, (env, name) in enumerate(itertools.product(envs, names), start=1):
        say(f"[{n}/{blocks}] {env} × {name}: {runs} runs × {args.steps or L.steps} steps on {backend.name} …")
        began = time.perf_counter()
        parts.append(study_runs.run_first(backend, contract, [env], [name], seeds, prereg, steps=args.steps))
        say(f"[{n}/{blocks}] {env} × {name} done in {time.perf_counter() - began:.1f} s "
            f"({time.perf_counter() - start:.0f} s so far)")
    result = merge(parts)
    for env, block in result["envs"].items():
        for name, e in block["controllers"].items():
            print(f"{env:16s} {name:28s} collapse {e['collapse_fraction']:6.1%} [{e['ci_low']:.3f}, {e['ci_high']:.3f}]  "
                  f"min<thr {e['deep_collapse_fraction']:6.1%} [{e['deep_ci_low']:.3f}, {e['deep_ci_high']:.3f}]  "
                  f"diverged {e['diverged_fraction']:6.1%}  ({e['runs']} runs)")
    if args.json:
        write_text(args.json, render.strict_json(result, indent=1))
    figures = _draw(result, {args.plot: "overview", args.grid_plot: "grid_heatmap"})
    if args.markdown:
        write_text(args.markdown, study_section.document(result, args.markdown, args.json, figures))
    print(f"{result['backend']}: {sum(len(b['controllers']) for b in result['envs'].values())} env × controller "
          f"blocks in {time.perf_counter() - start:.1f} s")
    return 0


def second(args, start: float) -> int:
    """``--second``: the second study (or ``--calibrate``, its calibration)."""
    from repro.learning import study2

    args.prereg = args.prereg or study2.PREREGISTERED_2
    prereg = study2.load_prereg2(args.prereg)
    _check_steps(args.steps, prereg.learning.eval_every, prereg.criteria.warmup)
    inputs = [("pre-registration", args.prereg)] + ([("study JSON", args.from_json)] if args.from_json else [])
    if args.exploratory or args.remake_incident:
        return _rerun(args, prereg, start)
    ignored = {"--from-json": ["--json", "--env", "--controllers", "--seeds", "--steps"],
               "--calibrate": ["--env", "--controllers", "--steps", "--grid-plot", "--plot", "--markdown"]}
    for flag, given in (("--from-json", args.from_json), ("--calibrate", args.calibrate)):
        unused = [o for o in ignored[flag] if given and getattr(args, o[2:].replace("-", "_")) is not None]
        if unused:  # each would be ignored without a word
            raise SuiteError(f"{flag} takes no {', '.join(unused)}" + (
                " (it draws the study already in the JSON)" if flag == "--from-json" else
                " (the calibration runs the pre-registered tasks and steps on constant λ and writes --json)"))
    _check_outputs(args, inputs, _as_preregistered(args) or bool(args.from_json),
                   "calibration" if args.calibrate else "second")
    backend = None if args.from_json else get_backend(args.backend)
    say = policy.progress("study")
    if args.calibrate:
        if prereg.criteria.consecutive < 0:
            raise SuiteError("consecutive must be at least 0")
        seeds = parse_seeds(args.seeds if args.seeds is not None else "500:508")
        result = study_runs.calibrate(backend, load(args.contracts), prereg, seeds, progress=say)
        print(f"calibration: consecutive = {result['chosen_consecutive']}; trip rates at the effective points "
              f"{result['pooled_effective_points']}")
    else:
        if prereg.criteria.consecutive < 1:
            raise SuiteError(f"{prereg.path}: [criteria] consecutive is not set (run --calibrate first)")
        envs = _names(args.env, prereg.envs) if args.env is not None else None
        names = _names(args.controllers, prereg.controllers) if args.controllers is not None else None
        if envs == [] or names == []:
            raise SuiteError("--env and --controllers need at least one name each")
        if args.from_json:
            result = read_result(args.from_json, "second")
        else:
            result = study_runs.run_second(backend, load(args.contracts), prereg, envs=envs, names=names,
                                seeds=parse_seeds(args.seeds) if args.seeds is not None else None, steps=args.steps,
                                progress=say)
        for env, block in result["envs"].items():
            for name, e in block["controllers"].items():
                r, m, s = (e[k] for k in study2.CRITERIA)
                print(f"{env:16s} {name:36s} relative {r['fraction']:6.1%} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]  "
                      f"min<thr {m['fraction']:6.1%}  signature {s['fraction']:6.1%}  ({e['runs']} runs)")
        figures = _draw(result, {args.plot: "second_overview", args.grid_plot: "incident"})
        if args.markdown:  # the pre-registered study's section shows its committed exploratory run beside it
            exploratory = {k: read_result(path, kind) for k, (path, kind) in study2.EXPLORATORY_RESULTS.items()
                           if result["as_preregistered"] and path.exists()}
            write_text(args.markdown, study_section.document(result, args.markdown, args.json or args.from_json, figures,
                                                             second=True, exploratory=exploratory))
    if args.json and not args.from_json:  # compact: the per-run verdicts of 72 000 runs per task
        write_text(args.json, render.strict_json(result, separators=(",", ":")))
    print(f"{result.get('backend', args.backend)}: done in {time.perf_counter() - start:.1f} s")
    return 0


def _rerun(args, prereg, start: float) -> int:
    """``--exploratory`` or ``--remake-incident``: a second-study JSON into ``--json``, nothing else."""
    flag = f"--exploratory {args.exploratory}" if args.exploratory else "--remake-incident"
    unused = [o for o in ("--env", "--controllers", "--seeds", "--steps", "--plot", "--grid-plot", "--markdown")
              if getattr(args, o[2:].replace("-", "_")) is not None]
    if unused:  # each would be ignored without a word
        raise SuiteError(f"{flag} takes no {', '.join(unused)} (it writes --json only)")
    inputs = [("pre-registration", args.prereg)] + ([("study JSON", args.from_json)] if args.from_json else [])
    _check_outputs(args, inputs, bool(args.exploratory), "exploratory" if args.exploratory else "second")
    backend = get_backend(args.backend)
    if args.exploratory:
        run = study_runs.exploratory_target if args.exploratory == "target" else study_runs.exploratory_cold_start
        result = run(backend, load(args.contracts), prereg, progress=policy.progress("study"))
    else:
        result = study_runs.remake_incident(backend, load(args.contracts), read_result(args.from_json, "second"), prereg)
    if args.json:
        write_text(args.json, render.strict_json(result, separators=(",", ":")))
    print(f"{backend.name}: {flag} done in {time.perf_counter() - start:.1f} s")
    return 0


def _check_steps(steps: int | None, eval_every: int, warmup: int) -> None:
    """``--steps`` (steps per run): a multiple of the evaluation interval above the warm-up, at most MAX_STEPS."""
    if steps is not None and not (warmup < steps <= MAX_STEPS and steps % eval_every == 0):
        raise SuiteError(f"--steps must be a multiple of {eval_every} (the evaluation interval) above the "
                         f"warm-up of {warmup} steps (else no evaluation is judged), at most {MAX_STEPS}")


def _as_preregistered(args) -> bool:
    return all(v is None for v in (args.env, args.controllers, args.seeds, args.steps))


def _check_outputs(args, inputs: list, may_rewrite_results: bool, kind: str) -> None:
    """The four output flags checked before any work; the committed results (studies/results/) are written only
    where ``may_rewrite_results`` (the study as pre-registered, or figures redrawn from its JSON), and only
    ``kind``'s own (:func:`analysis.cli.studies.owns`): no study writes over another's."""
    outputs = (args.json, args.plot, args.grid_plot, args.markdown)
    committed = committed_results(outputs, studies.owns(kind)) if may_rewrite_results else []
    check_outputs([Output("--json", args.json), Output("--plot", args.plot, suffix=".png"),
                   Output("--grid-plot", args.grid_plot, suffix=".png"), Output("--markdown", args.markdown)],
                  inputs=inputs, committed=committed)


def _draw(result: dict, figures: dict[Path | None, str]) -> list[Path]:
    """Each given path ← the :mod:`analysis.present.study_plots` figure named beside it; the paths drawn."""
    drawn = [p for p in figures if p]
    if drawn:
        from analysis.present import plots, study_plots

        for path in drawn:
            plots.save(getattr(study_plots, figures[path])(result), path)
    return drawn


def _names(text: str | None, default) -> list[str]:
    """Comma-separated names, stripped, empty ones and repeats dropped (order kept); ``default`` when not given."""
    return list(dict.fromkeys(n.strip() for n in (text.split(",") if text is not None else default) if n.strip()))
