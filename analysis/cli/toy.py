"""Run the closed-loop toy with one controller kernel driving λ.

    python -m analysis toy --controller NAME [--kernel PATH] [--backend auto|host|cupy] [--steps N]
                                [--seed S] [--json PATH] [--plot PATH]

``--kernel`` runs a candidate .cu in place of the contract's kernel (seeded
with ``--controller``'s documented seed λ). Exit 0 on a run, 2 on bad input.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from analysis.cli import policy
from analysis.present import plots
from repro.backends import NAMES, get_backend
from repro.core.contract import load
from repro.core.errors import SuiteError
from repro.core.outputs import check_writable
from repro.toy.designs import group, one_run
from repro.toy.model import Toy


def main(argv: list[str] | None = None) -> int:
    parser = policy.Parser(prog="python -m analysis toy", description=__doc__.splitlines()[0])
    parser.add_argument("--controller", required=True, help="contract entry (its kernel and seed λ)")
    parser.add_argument("--kernel", type=Path, help="candidate .cu to run in place of the contract's kernel")
    parser.add_argument("--backend", default="auto", choices=NAMES)
    parser.add_argument("--steps", type=int, default=Toy.steps)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the outcome (and the per-step trace) here")
    parser.add_argument("--plot", type=Path, help="draw λ and q_pi_agree over steps into this PNG")
    args = parser.parse_args(argv)
    try:
        if args.steps < 1:
            raise SuiteError("--steps must be at least 1")
        if args.seed < 0:
            raise SuiteError(f"--seed must be a non-negative integer, not {args.seed}")
        for path in (args.json, args.plot):
            check_writable(path)
        contract = load()
        entry = contract.controller(args.controller)
        source = contract.source(args.controller, args.kernel)
        backend = get_backend(args.backend)
        subject = group(backend, source, contract.slots, entry.value("seed_lambda"))
        result = one_run(backend, args.controller, subject, replace(Toy(), steps=args.steps), args.seed)
    except SuiteError as err:
        print(f"closed_loop: error: {err}", file=sys.stderr)
        return 2
    for key, value in result.items():
        if key not in ("trace", "parameters"):
            print(f"{key:28s} {value}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.plot:
        plots.save(plots.closed_loop({args.controller: result}), args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(policy.run(main))
