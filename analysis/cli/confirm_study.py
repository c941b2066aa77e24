"""``python -m analysis study --confirm-4``: the fourth study's confirmatory replication (issue 42 item 3).

Three steps, each its own invocation:

- ``--plan SEARCH.json --out PREREG.toml``: the pre-registration, written from the exploratory search BEFORE any
  confirmatory run: the selected cells, each cell's drift threshold (the search's constant-λ midpoint), the pairs
  per cell for ``--power`` at the search's discordant counts (exact McNemar at α / cells), the arms, α and Holm,
  the precondition, the verdict rule and what falsifies the claim. Never overwrites a file.
- run: ``[--declaration PREREG.toml] --json OUT.json``: every cell × arm × fresh seed (GPU: ``--backend cupy``);
  ``--reduced``: the CPU smoke form (the search's reduced loop, ``[reduced] pairs`` seeds).
- ``--from-json OUT.json [--judged J.json]``: the primary test per cell, Holm, the five-word verdicts.

Exit 0; bad input one line, exit 2. Progress on stderr.
"""

from __future__ import annotations

import hashlib
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

#: The confirmation's arms: the two kernels, the constant-λ brackets, and each fix alone (exploratory).
ARMS = ("original", "fixed", "const:0.001", "const:0.05", "const:1", "ablation:floor", "ablation:asymmetric",
        "ablation:tolerance", "ablation:seed")


def parser() -> policy.Parser:
    p = policy.Parser("study", description="the fourth study's confirmatory replication (--confirm-4)")
    p.add_argument("--confirm-4", dest="confirm_4", action="store_true", required=True)
    p.add_argument("--plan", type=policy.path, help="the search JSON to plan from (writes --out)")
    p.add_argument("--out", type=policy.path, help="with --plan: the pre-registration TOML to write (a new file)")
    p.add_argument("--alpha", type=float, default=0.05, help="with --plan: family-wise α (Holm over the cells)")
    p.add_argument("--power", type=float, default=0.9, help="with --plan: power per cell at the search's gaps")
    p.add_argument("--most", type=int, default=512, help="with --plan: most pairs per cell")
    p.add_argument("--seed", type=int, default=4400, help="with --plan: the confirmation's key seed (fresh)")
    p.add_argument("--declaration", type=policy.path, help="the pre-registration (default studies/preregistered_4.toml)")
    p.add_argument("--reduced", action="store_true", help="the CPU smoke form")
    p.add_argument("--backend", default="auto", choices=("auto", "host", "cupy"))
    p.add_argument("--eager", action="store_true", help="no CUDA graph (GPU)")
    p.add_argument("--json", type=policy.path, help="write the runs' JSON here")
    p.add_argument("--from-json", type=policy.path, help="judge this confirmation JSON instead of running")
    p.add_argument("--judged", type=policy.path, help="write the judged confirmation here")
    return p


def body(argv: list[str], owns) -> int:
    """The command; ``owns(name)``: whether a file of studies/results/ is this study's own (analysis/cli/studies.py)."""
    args = parser().parse_args(argv)
    if args.plan and args.from_json:
        raise SuiteError("give one of --plan, --from-json")
    if args.plan:
        return plan(args)
    if args.out:
        raise SuiteError("--out is --plan's: the run writes --json")
    if args.from_json:
        check_outputs([Output("--judged", args.judged, suffix=".json")], inputs=[("confirmation JSON", args.from_json)],
                      committed=committed_results([args.judged], owns))
        show(read_study(args.from_json, "confirmation_4"), args)
        return 0
    return run(args, owns)


def plan(args) -> int:
    from analysis.judge import confirm_study, explore_study

    if not args.out:
        raise SuiteError("--plan writes the pre-registration: give --out")
    if Path(args.out).exists():
        raise SuiteError(f"{args.out}: exists; a pre-registration is written once (give a new path)")
    if not (0 < args.alpha < 1 and 0 < args.power < 1 and args.most >= 2):
        raise SuiteError("--alpha and --power lie in (0, 1); --most is at least 2")
    check_outputs([Output("--out", args.out, suffix=".toml")], inputs=[("search JSON", args.plan)])
    search = read_study(args.plan, "exploration_4")
    if search.get("shard"):
        raise SuiteError(f"{args.plan}: one shard ({search['shard']}): merge the shards first")
    judged = explore_study.judge(search)
    cells = confirm_study.plan(judged, args.alpha, args.power, args.most)
    digest = hashlib.sha256(Path(args.plan).read_bytes()).hexdigest()
    rel = Path(args.plan).resolve()
    source = rel.relative_to(ROOT).as_posix() if rel.is_relative_to(ROOT) else Path(args.plan).name
    write_text(args.out, prereg_text(search, judged, cells, args, source, digest))
    for c in cells:
        print(f"cell: {c['task']} target {c['kl_target']:g} τ {c['tau']:g} site {c['kl_site']} aux {c['aux_reward']:g}"
              f" π lr {c['pi_lr']:g}: search discordant {c['search_original_only']}:{c['search_fixed_only']} of "
              f"{c['search_pairs']} → {c['pairs']} pairs, power {c['power']:.3f} at α {c['level']:.4g}")
    print(f"wrote {args.out} ({len(cells)} cell(s))")
    return 0


def prereg_text(search: dict, judged: dict, cells: list[dict], args, source: str, digest: str) -> str:
    """The pre-registration TOML (every number computed here from the search; the rules as prose and as the code
    that applies them: analysis/judge/confirm_study.py)."""
    from analysis.judge.confirm_study import CONTROL, WORDS

    q = lambda s: json.dumps(s, ensure_ascii=False)
    out = [
        "# The fourth study's CONFIRMATORY replication (issue 42 item 3), pre-registered AFTER the exploratory search",
        "# and BEFORE any of its runs. Written by `python -m analysis study --confirm-4 --plan` from the search below;",
        "# every number here is computed from that search (analysis/judge/confirm_study.py plan).",
        "#",
        "# Claim under test (commit 96abc364b5): where the original's λ sinks to its floor and π drifts from Q, the",
        "# fixed kernel holds π. PRIMARY ENDPOINT (one per cell): a run DRIFTS when its time-averaged in-R geometric",
        "# agreement (r_geo_avg, log10) lies below the cell's midpoint, copied from the SEARCH's medians of const:1 and",
        "# const:0.001 in the cell's group (never from these runs). Test: exact McNemar (two-sided), original vs fixed,",
        "# paired by seed; Holm over the cells at the family-wise α below.",
        "# PRECONDITION (checked, not assumed): the original's λ at its floor with the KL EMA below its lower edge on",
        "# at least min_fraction of post-warm-up steps, pooled over the cell's original runs; a cell without it reads",
        "# 'precondition absent', whatever its drift.",
        f"# REPRODUCED (the original collapsed more): it drifts in more runs than {CONTROL} on the same seeds (λ held at",
        "# 1: the reference that holds π), exact McNemar at α, uncorrected (a classification, not the primary test).",
        "# The FIX HOLDS where the fixed kernel does not drift in more runs than that reference by the same test and,",
        "# where the collapse is reproduced, the primary test finds it drifting in fewer runs than the original (Holm).",
        "# VERDICT per cell: analysis/judge/verdict_words.py's five words through confirm_study.cell_verdict. Overall:",
        f"# the first of ({' · '.join(WORDS)}) that any cell has.",
        "# FALSIFIES the claim: a cell 'contradicted' or 'reproduced, the fix does not hold'. Supports it: every cell",
        "# whose precondition occurred reads 'reproduced, the fix holds'. A cell 'precondition absent' tests nothing.",
        "# EXPLORATORY (no α, no correction): each fix alone (ablation arms) against the original; constant 0.05.",
        "# Units: KL in nats, τ × the task's tau_unit, agreement in log10 of a probability; steps as the search's.",
        "",
        "[study]",
        'name = "confirmation_4"',
        "exploratory = false",
        f"seed = {args.seed}                   # fresh: keys hash this seed with 'confirm' and the cell (confirm.run_key)",
        f"search = {q(source)}",
        f'search_sha256 = "{digest}"',
        f"search_declaration = {q(search['declaration'])}   # the loop, tasks and calibration: the search's",
        "",
        "[test]",
        f"alpha = {args.alpha!r}                  # family-wise, Holm over the cells",
        f"power = {args.power!r}                  # per cell, exact McNemar at α / cells, at the search's discordant rates",
        f"most_pairs = {args.most}",
        "",
        "[precondition]",
        f"min_fraction = {search['selection']['min_precondition']!r}",
        "",
        "[arms]",
        f"names = {q(list(ARMS))}",
        "",
        "[reduced]                     # the CPU smoke form: the search's [reduced] loop",
        "pairs = 2",
    ]
    for c in cells:
        out += ["", "[[cells]]",
                f"task = {q(c['task'])}", f"tau = {c['tau']!r}", f"aux_reward = {c['aux_reward']!r}",
                f"pi_lr = {c['pi_lr']!r}", f"kl_target = {c['kl_target']!r}", f"kl_site = {q(c['kl_site'])}",
                f"midpoint = {c['midpoint']!r}           # log10, the search's group {c['search_group']}",
                f"pairs = {c['pairs']}",
                f"# search: {c['search_pairs']} pairs, original only {c['search_original_only']}, fixed only "
                f"{c['search_fixed_only']}; power {c['power']:.4f} at α {c['level']:.4g} (rates (count + ½) / (pairs + 1))"]
    if not cells:
        out += ["", "# The search selected no cell: nothing to confirm (the run refuses in one line)."]
    return "\n".join(out) + "\n"


def run(args, owns) -> int:
    try:
        import torch
    except ImportError:
        raise SuiteError("--confirm-4 needs PyTorch: pip install --group deep (or the machine's own torch)") from None
    from repro.backends import get_backend
    from repro.core.contract import CONTRACTS, load
    from repro.learning.deep import confirm
    from repro.learning.deep.loop import device_for

    decl_path = args.declaration or confirm.DECLARATION
    decl = confirm.load(decl_path, reduced=args.reduced)
    committed = [] if args.reduced else committed_results([args.json], owns)
    check_outputs([Output("--json", args.json, suffix=".json"), Output("--judged", args.judged, suffix=".json")],
                  inputs=[("pre-registration", decl_path)], committed=committed)
    backend = get_backend(args.backend)
    device = device_for(backend)
    say = policy.progress("study")
    start = time.perf_counter()
    head = confirm.header(decl, backend.name, backend.describe(), torch.__version__)
    say(f"confirmation_4{' (reduced)' if decl.reduced else ''}: {len(decl.cells)} cell(s) × {len(decl.arms)} arms on "
        f"{backend.name} ({device})")

    def partial(cells):
        if args.json:
            write_text(args.json, render.strict_json({**head, "cells": cells}, separators=(",", ":")) + "\n")

    raw = confirm.run(decl, backend, load(CONTRACTS), device=device, graph=device == "cuda" and not args.eager, progress=say,
                      on_chunk=partial)
    result = {**head, "cells": raw["cells"]}
    partial(raw["cells"])
    if raw["seconds"]:
        print(f"loop: {raw['run_steps'] / 1e6:.1f} M run-steps in {raw['seconds']:.1f} s = "
              f"{raw['run_steps'] / raw['seconds'] / 1e6:.3f} M run-steps/s")
    show(result, args)
    print(f"{backend.name}: done in {time.perf_counter() - start:.1f} s")
    sys.stdout.flush()
    return 0


def show(result: dict, args) -> None:
    """Judge ``result``, print the confirmation's lines, write ``--judged`` where given."""
    from analysis.judge import confirm_study

    judge_and_show(result, confirm_study, args.judged)
