"""A benchmark run as data: one :class:`Sample` per mode × kernel, saved as JSON and read back as a table.

Times are µs per step (one step = one controller call, launch or graph node),
one value per timed round. ``set_by`` says what sets a mode's time: the
``device`` (its work is timed on the GPU, the host only enqueues) or the
``host`` (the CPU's call or launch path); the gate treats the two differently.
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from repro.backends.host import cpu_model
from repro.core.errors import SuiteError

FORMAT = "rlq-bench/1"


@dataclass
class Sample:
    """One mode with one kernel (``controller`` or ``empty``): µs per step in each timed round."""

    mode: str
    kernel: str
    clock: str  # "CUDA events", "wall clock (Python)" or "wall clock (C)"
    set_by: str  # "device" or "host"
    what: str  # what the mode measures, in words
    steps_per_round: int
    us: list[float]
    extra: dict = field(default_factory=dict)

    @property
    def median(self) -> float:
        return float(np.median(self.us))


@dataclass
class Run:
    """All samples of one benchmark run, with the machine they were measured on."""

    machine: dict
    samples: list[Sample]
    skipped: dict[str, str] = field(default_factory=dict)  # mode -> why it did not run here
    errors: dict[str, str] = field(default_factory=dict)  # "mode [kernel]" -> the error that stopped it
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def as_dict(self) -> dict:
        return {"format": FORMAT, "created": self.created, "machine": self.machine, "skipped": self.skipped,
                "errors": self.errors, "samples": [asdict(s) for s in self.samples]}

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_dict(), indent=1))

    @classmethod
    def from_dict(cls, data: dict) -> Run:
        if data.get("format") != FORMAT:
            raise SuiteError(f"not a {FORMAT} benchmark run (format {data.get('format')!r})")
        return cls(machine=data.get("machine", {}), samples=[Sample(**s) for s in data["samples"]],
                   skipped=data.get("skipped", {}), errors=data.get("errors", {}), created=data.get("created", ""))


def load_run(path: Path) -> Run:
    """A run saved by :meth:`Run.save`; a one-line :class:`SuiteError` for anything else."""
    try:
        return Run.from_dict(json.loads(Path(path).read_text()))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SuiteError(f"{path}: cannot read a benchmark run ({type(err).__name__}: {err})") from None
    except SuiteError as err:
        raise SuiteError(f"{path}: {err}") from None


def frame(run: Run) -> pd.DataFrame:
    """One row per sample: mode, kernel, median/q1/q3/min/max µs per step, rounds, clock, set_by, what, extras."""
    rows = []
    for s in run.samples:
        per = np.asarray(s.us, dtype=float)
        q1, med, q3 = np.percentile(per, [25, 50, 75])
        rows.append({"mode": s.mode, "kernel": s.kernel, "median_us": med, "q1_us": q1, "q3_us": q3,
                     "min_us": per.min(), "max_us": per.max(), "rounds": len(per), "steps_per_round": s.steps_per_round,
                     "clock": s.clock, "set_by": s.set_by, "what": s.what,
                     **{k: v for k, v in s.extra.items() if isinstance(v, int | float | str | bool)}})
    return pd.DataFrame(rows)


def machine_info(gpu: dict | None) -> dict:
    """The CPU, Python and (where measured) GPU the run timed; no paths, nothing machine-private."""
    cpu = cpu_model(platform.processor() or "CPU")
    info = {"cpu": {"brand_raw": cpu}, "python_version": platform.python_version(), "system": platform.system()}
    if gpu:
        info["gpu"] = gpu
    return info


def save_baseline(path: Path, runs: list[Run]) -> None:
    """A machine's baseline: runs in one file (pairs of back-to-back runs, from one or more machines)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": FORMAT, "runs": [r.as_dict() for r in runs]}, indent=1))


def load_baseline(path: Path) -> list[Run]:
    """The runs of a baseline saved by :func:`save_baseline`; a one-line :class:`SuiteError` otherwise."""
    try:
        data = json.loads(Path(path).read_text())
        runs = [Run.from_dict(r) for r in data["runs"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SuiteError(f"{path}: cannot read a benchmark baseline ({type(err).__name__}: {err})") from None
    except SuiteError as err:
        raise SuiteError(f"{path}: {err}") from None
    if len(runs) < 2:
        raise SuiteError(f"{path}: a baseline needs at least two runs (it has {len(runs)})")
    return runs
