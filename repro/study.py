"""The learning-loop study: Q-learning and an actor on gymnasium toy-text tasks, the controller kernel driving λ.

    python -m repro.study [--env NAME[,NAME…]] [--controllers fixed,original[,…]] [--seeds A:B]
                          [--backend auto|host|cupy] [--json PATH] [--plot PATH] [--steps N]

Defaults come from the pre-registered file (studies/preregistered.toml): its environments, seeds, controllers
(``contract`` = every contract entry, ``const:X`` = λ held at X, ``ablation`` = the 14 ablation variants,
``ablation:floor+seed`` = one of them) and grid. ``--steps`` shortens the runs (the JSON then says it is not
the pre-registered study). Prints one line per environment × controller; exit 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from repro import cli
from repro.backends import NAMES, get_backend
from repro.errors import SuiteError
from repro.learning.study import PREREGISTERED, load_prereg, parse_seeds, run, table
from repro.outputs import check_writable


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m repro.study", description=__doc__.splitlines()[0])
    parser.add_argument("--env", help="gymnasium environment id(s), comma-separated (default: pre-registered)")
    parser.add_argument("--controllers", help="comma-separated controller names (default: pre-registered)")
    parser.add_argument("--seeds", help="A:B, seeds A..B-1 (default: pre-registered)")
    parser.add_argument("--backend", default="auto", choices=NAMES)
    parser.add_argument("--json", type=Path, help="write the study's JSON here")
    parser.add_argument("--plot", type=Path, help="draw collapse fractions and agreement over steps into this PNG")
    parser.add_argument("--steps", type=int, help="override the pre-registered steps per run (not the pre-registered study)")
    parser.add_argument("--prereg", type=Path, default=PREREGISTERED, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        prereg = load_prereg(args.prereg)
        if args.steps is not None and args.steps < prereg.learning.eval_every:
            raise SuiteError(f"--steps must be at least {prereg.learning.eval_every} (one evaluation)")
        envs = [e for e in (args.env.split(",") if args.env is not None else prereg.envs) if e]
        names = [n for n in (args.controllers.split(",") if args.controllers is not None else prereg.controllers) if n]
        if not envs or not names:
            raise SuiteError("--env and --controllers need at least one name each")
        seeds = parse_seeds(args.seeds or prereg.seeds)
        for path in (args.json, args.plot):
            check_writable(path)
        result = run(get_backend(args.backend), envs, names, seeds, prereg, steps=args.steps)
    except SuiteError as err:
        print(f"study: error: {err}", file=sys.stderr)
        return 2
    frame = table(result)
    for r in frame.itertuples():
        print(f"{r.env:16s} {r.controller:28s} collapse {r.collapse_fraction:6.1%} [{r.ci_low:.3f}, {r.ci_high:.3f}]  "
              f"min<thr {r.deep_collapse_fraction:6.1%} [{r.deep_ci_low:.3f}, {r.deep_ci_high:.3f}]  "
              f"diverged {r.diverged_fraction:6.1%}  ({r.runs} runs)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.plot:
        from analysis import plots, study_plots

        plots.save(study_plots.overview(result), args.plot)
    print(f"{result['backend']}: {sum(len(b['controllers']) for b in result['envs'].values())} env × controller "
          f"blocks in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
