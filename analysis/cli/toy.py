"""Run the closed-loop toy with one controller kernel driving λ.

``--kernel`` runs a candidate .cu in place of the contract's kernel (seeded
with ``--controller``'s documented seed λ). ``--steps`` is at most 10⁶ (about
50 s on 2 cores; from 10⁵ steps, progress on stderr every tenth), ``--seed`` below 2⁶³.
Exit 0 on a run, 2 on bad input or anything else that stops it (one line). A ``--kernel`` candidate runs
confined on the CPU (:func:`analysis.cli.confined.measure`) and hands its run back as plain data, printed and drawn
here: an attempt to write outside its scratch folder, start a process or open a socket ends the run with exit 2
and one line naming it.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from analysis.cli import confined, policy
from analysis.present import render
from repro.backends import backend_names, get_backend
from repro.core.contract import load
from repro.core.errors import SuiteError
from repro.core.outputs import Output, check_outputs, write_text
from repro.runners import plain
from repro.toy.designs import compile_subject, one_run, read_run
from repro.toy.model import Toy

#: Most steps one run takes (a million: about 50 s on 2 cores), and the seeds it takes (its noise uses seed + 1).
MAX_STEPS, MAX_SEED = 1_000_000, 2**63 - 2
#: From this many steps (about 5 s on 2 cores) the run reports progress on stderr.
LONG_STEPS = 100_000


@policy.command("toy")
def main(argv: list[str] | None = None) -> int:
    parser = policy.Parser("toy", description=__doc__.splitlines()[0])
    parser.add_argument("--controller", required=True, help="contract entry (its kernel and seed λ)")
    parser.add_argument("--kernel", type=policy.path, help="candidate .cu to run in place of the contract's kernel")
    parser.add_argument("--backend", default="auto", choices=backend_names())
    parser.add_argument("--steps", type=int, default=Toy.steps, help=f"training steps, 1 to {MAX_STEPS} "
                        f"(default {Toy.steps})")
    parser.add_argument("--seed", type=int, default=0, help=f"0 to {MAX_SEED} (default 0)")
    parser.add_argument("--json", type=policy.path, help="write the outcome (and the per-step trace) here")
    parser.add_argument("--plot", type=policy.path, help="draw λ and q_pi_agree over steps into this PNG")
    parser.add_contracts()
    parser.add_require_sandbox()
    args = parser.parse_args(argv)
    confined.require_first(args.require_sandbox)
    if not 1 <= args.steps <= MAX_STEPS:
        raise SuiteError(f"--steps must be at least 1 and at most {MAX_STEPS}, not {args.steps}")
    if not 0 <= args.seed <= MAX_SEED:
        raise SuiteError(f"--seed must be an integer from 0 to {MAX_SEED}, not {args.seed}")
    contract = load(args.contracts)
    entry = contract.controller(args.controller)
    check_outputs([Output("--json", args.json), Output("--plot", args.plot, suffix=".png")],
                  inputs=[("kernel", args.kernel or entry.kernel), ("contract", contract.path)])
    source = contract.source(args.controller, args.kernel)
    backend = get_backend(args.backend)
    say = policy.progress("toy") if args.steps >= LONG_STEPS else lambda line: None

    toy = replace(Toy(), steps=args.steps)

    def run() -> dict:
        say(f"{args.controller} ({source.origin}) on {backend.name}, {args.steps} steps, seed {args.seed}")
        subject = compile_subject(backend, source, contract.slots_of(args.controller), entry.value("seed_lambda"))
        return one_run(backend, args.controller, subject, toy, args.seed, progress=lambda t: say(f"step {t} of {args.steps}"))

    if args.kernel is None:  # the contract's own kernel: trusted, run here
        result = run()
    else:  # the candidate's run in a confined child, handed back as plain data; printed and drawn here
        inputs = {"controller": args.controller, "kernel": source.origin, "backend": backend.name,
                  "device": backend.describe(), "seed": args.seed, "parameters": asdict(toy)}
        result = confined.measure("toy", backend, lambda out: (out / RUN).write_bytes(plain.dumps(run())),
                                  lambda out: read_run(out / RUN, inputs), require=args.require_sandbox)
        if result is None:
            return 2
    for key, value in result.items():
        if key not in ("trace", "parameters"):
            print(f"{key:28s} {value}")
    if args.json:
        write_text(args.json, render.strict_json(result, indent=1))
    if args.plot:
        from analysis.present import plots

        plots.save(plots.closed_loop({args.controller: result}), args.plot)
    return 0


#: What the candidate's confined child hands back: its run (:func:`repro.toy.designs.one_run`) as plain data.
RUN = "run.json"
