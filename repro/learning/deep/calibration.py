"""The third study's calibration (pilot): λ = 0 only (the ``const:0`` kernel), on seeds of its own, on the CPU.

No controller other than constant λ = 0 runs, so nothing here compares controllers. It measures, on the
primary cell's task and settings:

- Q's action gap: the median over probe states of Q's largest minus second-largest value, per run, at the end of
  the warm-up → ``tau_unit`` (the median over runs): τ is declared in units of it;
- the region R: the 90th percentile of the region's observation (θ̇1 for Acrobot) over every run's replay at the
  end of the warm-up → ``region_threshold`` (R then holds about 10 % of replayed states);
- the endpoint's positive control: per entropy coefficient β in ``betas``, the fraction of λ = 0 runs that meet
  the primary endpoint's rule (probe log10 geometric agreement below ``threshold`` for ``consecutive``
  evaluations after the warm-up) → β is the largest β with at least half of its runs meeting it (the endpoint
  must be able to fire without distillation), else the smallest β, said so.
"""

from __future__ import annotations

import numpy as np

from repro.core.contract import CONTRACTS, Contract
from repro.core.contract import load as load_contract
from repro.core.endpoint import runs_meeting
from repro.learning.controllers import source_and_seed
from repro.learning.deep.controller import ArmRows
from repro.learning.deep.loop import DeepLoop, LoopConfig, Rows


def calibrate(backend, contract: Contract, cfg: LoopConfig, betas, seeds: int, seed: int, threshold: float,
              consecutive: int, device="cpu", graph=False, progress=None) -> dict:
    """The pilot: λ held at 0 (``contract``'s fixed kernel with constant rates) over ``betas`` × ``seeds`` runs."""
    source, lam0 = source_and_seed("const:0", contract)
    kernel = backend.compile(source, contract.slots)
    R = len(betas) * seeds
    rows = Rows(u=np.tile(np.arange(seeds), len(betas)), tau=np.ones(R), aux=np.ones(R),
                beta=np.repeat(np.asarray(betas, dtype=float), seeds), target=np.full(R, 0.1),
                forward=np.zeros(R, bool), site=np.zeros(R, int), ema_first=np.zeros(R, bool),
                resume=np.full(R, -1), arms=[ArmRows("const:0", kernel, 0, R, lam0)])
    loop = DeepLoop(cfg, rows, backend, contract.slots, device=device, seed=seed)
    # run to the warm-up, read the replay's region observation, then on to the end
    warm = LoopConfig(**{**cfg.__dict__, "steps": cfg.warmup})
    loop.cfg = warm
    first = loop.run(graph=graph, progress=progress)
    size = min(cfg.warmup, cfg.replay)
    region_values = loop.buf_obs[:, :size, cfg.region_obs].cpu().numpy().reshape(-1)
    gap_at_warmup = first["probe_gap"][-1]
    loop.cfg = cfg
    rest = loop.run(graph=graph, progress=progress)
    steps = np.concatenate([first["eval_steps"], rest["eval_steps"]])
    geo = np.concatenate([first["probe_log10_geo"], rest["probe_log10_geo"]])
    met = runs_meeting(geo, steps, cfg.warmup, threshold, consecutive)
    per_beta = {}
    for k, b in enumerate(betas):
        sl = slice(k * seeds, (k + 1) * seeds)
        per_beta[repr(float(b))] = {"fraction_meeting_endpoint": float(met[sl].mean()),
                                    "final_probe_log10_geo": [float(x) for x in geo[-1, sl]],
                                    "min_probe_log10_geo": [float(x) for x in np.nanmin(geo[:, sl], 0)],
                                    "final_lambda": [float(x) for x in rest["lambda"][-1, sl]]}
    able = [b for b in betas if per_beta[repr(float(b))]["fraction_meeting_endpoint"] >= 0.5]
    beta = max(able) if able else min(betas)
    return {"arm": "const:0", "seeds": seeds, "seed": seed, "steps": cfg.steps, "warmup": cfg.warmup,
            "provisional_region_threshold": cfg.region_threshold,
            "tau_unit": float(np.nanmedian(gap_at_warmup)),
            "probe_gap_at_warmup_per_run": [float(x) for x in gap_at_warmup],
            "region_threshold": float(np.quantile(region_values, 0.9)),
            "probe_in_r_at_end": float(np.nanmean(rest["probe_in_r"][-1])),
            "betas": per_beta, "beta": float(beta), "beta_rule_met": bool(able),
            "threshold": threshold, "consecutive": consecutive, "seconds": float(first["seconds"] + rest["seconds"])}


#: The pilot's defaults (``--backend``, ``--seeds`` and ``--steps`` override; the JSON records what ran).
PILOT = {"steps": 20000, "warmup": 5000, "eval_every": 250, "replay": 20000, "region_threshold": 1.0,
         "betas": (0.01, 0.001), "seeds": 32, "seed": 33, "threshold": -6.0, "consecutive": 3}
#: Per task (``--env``): R's observation, its provisional threshold (rad/s) and the pilot's seed. Acrobot-v1's is the
#: third study's pilot; CartPole-v1's is declared by studies/exploration_4.toml ([tasks."CartPole-v1"]).
TASKS = {"Acrobot-v1": {"region_obs": 4, "region_threshold": 1.0, "seed": 33},
         "CartPole-v1": {"region_obs": 3, "region_threshold": 0.5, "seed": 34}}


def main(argv=None) -> None:
    """``python -m repro.learning.deep.calibration OUT.json [--env TASK] [--backend host|cupy] [--seeds N]
    [--steps N]``."""
    import argparse
    import json
    import sys
    from pathlib import Path

    import torch

    from repro.backends import get_backend
    from repro.core.outputs import write_text

    parser = argparse.ArgumentParser(prog="python -m repro.learning.deep.calibration")
    parser.add_argument("out")
    parser.add_argument("--backend", default="host", choices=("host", "cupy"))
    parser.add_argument("--seeds", type=int, default=PILOT["seeds"])
    parser.add_argument("--steps", type=int, default=PILOT["steps"])
    parser.add_argument("--env", default="Acrobot-v1", choices=tuple(TASKS))
    args = parser.parse_args(argv)
    task = TASKS[args.env]
    p = {**PILOT, "seeds": args.seeds, "steps": args.steps, "seed": task["seed"],
         "region_threshold": task["region_threshold"]}
    torch.set_num_threads(1)
    cfg = LoopConfig(env=args.env, steps=p["steps"], warmup=p["warmup"], eval_every=p["eval_every"],
                     replay=p["replay"], region_obs=task["region_obs"], region_threshold=p["region_threshold"])
    device = "cuda" if args.backend == "cupy" else "cpu"
    result = calibrate(get_backend(args.backend), load_contract(CONTRACTS), cfg, p["betas"], p["seeds"], p["seed"],
                       p["threshold"], p["consecutive"], device=device, graph=device == "cuda",
                       progress=lambda line: print(f"calibration: {line}", file=sys.stderr, flush=True))
    result["pilot"] = {k: list(v) if isinstance(v, tuple) else v for k, v in p.items()}
    result["backend"] = args.backend
    result["env"] = args.env
    result["region_obs"] = task["region_obs"]
    result["command"] = f"python -m repro.learning.deep.calibration OUT --env {args.env} --backend {args.backend} " \
                        f"--seeds {args.seeds} --steps {args.steps}"
    write_text(Path(args.out), json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
