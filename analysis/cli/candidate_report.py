"""``report --kernel K --contracts F`` for a candidate of a new entry (any rule kind, a stateful one included):
beside the fixed kernel, paired where runs pair, in ``OUT/candidate.md`` and ``OUT/data/candidate.json``.

What it holds: both gate verdicts (the candidate against its entry, the fixed kernel against fixed); the
catalogue's step, square-wave, drift and noise scenarios through both kernels on the same inputs (each from its own
seed λ, its own state slots seeded); the toy on the same seeds; and the first study's learning loop on the same
environments, seeds and grid, for a reduced number of steps. Not in it (issue 35 item 5's rest): the committed
report's figures and tables for the candidate, and the design measures of item 4.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from analysis.cli import study_runs
from analysis.cli.evaluate import evaluate, static_for_behaviour
from analysis.present import render
from repro.core.contract import Contract
from repro.core.paths import shown
from repro.learning.prereg import PREREGISTERED, load_prereg, parse_seeds
from repro.runners.runner import run_scenarios
from repro.runners.scenarios import catalogue
from repro.toy.designs import compile_subject, one_run

#: Scenario families replayed through both kernels (the catalogue's time-varying ones).
FAMILIES = ("step", "oscillation", "drift", "noise")
TOY_SEEDS = range(5)
STUDY_SEEDS = "0:4"
STUDY_STEPS = 6000


def gate(backend, contract: Contract, entry: str, kernel: Path, progress) -> dict:
    """The two gate verdicts (candidate, fixed), run in the gate's isolated (confined) workers: the part of
    :func:`build` that runs in the command's own process, before the rest runs in a confined child."""
    names = {"fixed": "fixed", "candidate": entry}
    sources = {"fixed": contract.source("fixed"), "candidate": contract.source(entry, kernel)}
    progress(f"[1/4] gate: the candidate against [{entry}], the fixed kernel against [fixed]")
    static = static_for_behaviour(backend)  # the PTX rule for outside_state on a device backend
    return {k: evaluate(sources[k], names[k], backend, contract, static=static, coverage=False) for k in names}


def build(backend, contract: Contract, entry: str, kernel: Path, progress, verdicts: dict | None = None
          ) -> tuple[dict, dict]:
    """The candidate's data beside the fixed kernel's, and the two gate verdicts (candidate, fixed; ``verdicts``:
    :func:`gate`'s, where the caller ran it)."""
    names = {"fixed": "fixed", "candidate": entry}
    sources = {"fixed": contract.source("fixed"), "candidate": contract.source(entry, kernel)}
    start = time.perf_counter()
    verdicts = verdicts or gate(backend, contract, entry, kernel, progress)
    progress("[2/4] replay: the catalogue's step, square-wave, drift and noise scenarios through both, same inputs")
    scenarios = [s for s in catalogue(contract.controller(entry)) if s.family in FAMILIES]
    replayed = {}
    for k, name in names.items():
        kernel_k = backend.compile(sources[k], contract.slots_of(name))
        seed = contract.controller(name).value("seed_lambda")
        runs = run_scenarios(kernel_k, [s.__class__(**{**s.__dict__, "lambda0": np.float32(seed)}) for s in scenarios])
        replayed[k] = {r.scenario.name: {"lambda_final": float(r.lam[-1]), "lambda_min": float(np.nanmin(r.lam)),
                                         "lambda_max": float(np.nanmax(r.lam))} for r in runs}
    progress(f"[3/4] toy: both on seeds {TOY_SEEDS.start}–{TOY_SEEDS.stop - 1}")
    subjects = {k: compile_subject(backend, sources[k], contract.slots_of(n), contract.controller(n).value("seed_lambda"))
                for k, n in names.items()}
    toy = {k: [{key: v for key, v in one_run(backend, names[k], subjects[k], seed=s).items() if key != "trace"}
               for s in TOY_SEEDS] for k in names}
    prereg = load_prereg(PREREGISTERED)
    progress(f"[4/4] learning loops: {', '.join(prereg.envs)} × seeds {STUDY_SEEDS}, {STUDY_STEPS} steps")
    study = study_runs.run_first(backend, contract, list(prereg.envs), ["fixed", entry], parse_seeds(STUDY_SEEDS), prereg,
                                 steps=STUDY_STEPS, sources={entry: sources["candidate"]})
    return {"entry": entry, "rule": contract.controller(entry).rule, "contract": shown(contract.path),
            "kernel": shown(kernel), "backend": backend.name,
            "verdicts": {k: v.as_dict() for k, v in verdicts.items()},
            "replay": replayed, "toy": toy,
            "study": {env: {n: {k: b["controllers"][n][k] for k in ("collapse_fraction", "ci_low", "ci_high", "runs")}
                            for n in ("fixed", entry)} for env, b in study["envs"].items()},
            "study_parameters": {"seeds": STUDY_SEEDS, "steps": STUDY_STEPS, "preregistration": shown(PREREGISTERED)},
            "seconds": time.perf_counter() - start}, verdicts


def markdown(data: dict, verdicts_text: dict[str, str]) -> str:
    """The section, every number read from ``data``."""
    e = data["entry"]
    out = [f"# Candidate `{data['kernel']}` ([{e}], rule {data['rule']}) beside the fixed kernel", "",
           f"Contract: `{data['contract']}`; backend {data['backend']}; {data['seconds']:.1f} s.", "",
           "## Gate", ""]
    for k in ("candidate", "fixed"):
        out += [f"### {k}", "", "```", verdicts_text[k], "```", ""]
    out += ["## Replay (same inputs, each from its own seed λ)", "",
            "| scenario | fixed λ final | fixed λ min | candidate λ final | candidate λ min |", "|---|---|---|---|---|"]
    for name, f in data["replay"]["fixed"].items():
        c = data["replay"]["candidate"][name]
        out.append(f"| {name} | {f['lambda_final']:.4g} | {f['lambda_min']:.4g} | {c['lambda_final']:.4g} | "
                   f"{c['lambda_min']:.4g} |")
    out += ["", "## Toy (paired by seed)", "", "| seed | fixed collapsed | fixed agree min | candidate collapsed | "
            "candidate agree min |", "|---|---|---|---|---|"]
    for f, c in zip(data["toy"]["fixed"], data["toy"]["candidate"], strict=True):
        out.append(f"| {f['seed']} | {f['collapsed']} | {f['q_pi_agree_min']:.3g} | {c['collapsed']} | "
                   f"{c['q_pi_agree_min']:.3g} |")
    p = data["study_parameters"]
    out += ["", f"## Learning loops (exploratory: seeds {p['seeds']}, {p['steps']} steps, the parameters of "
            f"`{p['preregistration']}` otherwise; paired by seed and grid point)", "",
            "| env | controller | collapse fraction | 95% CI | runs |", "|---|---|---|---|---|"]
    for env, block in data["study"].items():
        for n, s in block.items():
            out.append(f"| {env} | {n} | {s['collapse_fraction']:.1%} | [{s['ci_low']:.3f}, {s['ci_high']:.3f}] | "
                       f"{s['runs']} |")
    return "\n".join(out) + "\n"


def write(data: dict, verdicts_text: dict[str, str], out: Path) -> list[Path]:
    from repro.core.outputs import write_text

    (out / "data").mkdir(parents=True, exist_ok=True)
    paths = [out / "candidate.md", out / "data" / "candidate.json"]
    write_text(paths[0], markdown(data, verdicts_text))
    write_text(paths[1], render.strict_json(data, indent=1))
    return paths
