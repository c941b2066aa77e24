"""Replay a recorded KL trace through the controllers: what λ would have done.

    python -m repro.replay TRACE.csv [--target KL] [--controller fixed|original|both]
                           [--backend auto|host|cupy] [--csv OUT.csv] [--plot OUT.png]

TRACE.csv holds a ``kl`` column (or one unnamed column of numbers) and, optionally,
a ``kl_target`` column; otherwise ``--target`` gives the target. Each controller
starts from its contract's seed λ. Prints per controller: λ at the start and the
end, its range, and how many steps ramped, decayed or held λ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from repro.backends import NAMES, get_backend
from repro.contract import load
from repro.errors import SuiteError
from repro.kernel_source import load_kernel
from repro.runner import run_scenarios, to_frame
from repro.scenarios import from_csv


def replay(path: Path, target: float | None, controllers: list[str], backend: str = "auto"):
    """Tidy trajectories of the trace under each controller (see :func:`repro.runner.to_frame`)."""
    import pandas as pd

    contract, be = load(), get_backend(backend)
    frames = []
    for name in controllers:
        entry = contract.controller(name)
        scenario = from_csv(path, target=target, lambda0=entry.value("seed_lambda"))
        kernel = be.compile(load_kernel(entry.kernel, entry.symbol), contract.slots)
        frames.append(to_frame(run_scenarios(kernel, [scenario]), name, be.name))
    return pd.concat(frames, ignore_index=True)


def describe(frame) -> list[str]:
    """One line per controller: λ start → end, range, and the steps that ramped, decayed, held."""
    lines = []
    for name, part in frame.groupby("controller", sort=False):
        lam = np.concatenate([[part.lambda0.iloc[0]], part["lambda"].to_numpy()]).astype(np.float32)
        up, down = int((lam[1:] > lam[:-1]).sum()), int((lam[1:] < lam[:-1]).sum())
        lines.append(f"{name:9s} λ {lam[0]:.4g} → {lam[-1]:.4g} (min {lam.min():.4g}, max {lam.max():.4g}) over "
                     f"{len(part)} steps: {up} up, {down} down, {len(part) - up - down} unchanged")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repro.replay", description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--target", type=float, help="KL target, when the file has no kl_target column")
    parser.add_argument("--controller", default="both", choices=("fixed", "original", "both"))
    parser.add_argument("--backend", default="auto", choices=NAMES)
    parser.add_argument("--csv", type=Path, help="write the tidy trajectories here")
    parser.add_argument("--plot", type=Path, help="draw KL and λ over steps into this PNG")
    args = parser.parse_args(argv)
    names = ["fixed", "original"] if args.controller == "both" else [args.controller]
    try:
        frame = replay(args.trace, args.target, names, args.backend)
    except SuiteError as err:
        print(f"replay: error: {err}", file=sys.stderr)
        return 2
    print("\n".join(describe(frame)))
    if args.csv:
        frame.to_csv(args.csv, index=False)
    if args.plot:
        from analysis import plots

        plots.save(plots.replay(frame), args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
