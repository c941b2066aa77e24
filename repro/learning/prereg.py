"""The study: pre-registered parameters, collapse verdicts with exact intervals, the tables the report shows.

Pure functions over the learning loop's traces; the CLI is :mod:`analysis.cli.study`. Every parameter comes from
the pre-registered file (``studies/preregistered.toml``); the reduced study (CI, report) changes only the
number of steps, seeds, grid points and controllers, never a learning parameter.
"""

from __future__ import annotations

import contextlib
import json
import time
import tomllib
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from repro.backends.base import LEARN_OUTPUTS
from repro.core.contract import load
from repro.core.errors import SuiteError
from repro.core.grid import combinations
from repro.core.paths import ROOT
from repro.learning import controllers as ctl
from repro.learning.agent import Learning, Traces, run_loop
from repro.learning.env import Tables, make

PREREGISTERED = ROOT / "studies" / "preregistered.toml"
GRID_AXES = ("entropy_bonus", "aux_reward", "pi_view")
#: Most steps per run and seeds a study takes (the traces of a bigger one would not fit in memory anyway).
MAX_STEPS, MAX_SEEDS = 10_000_000, 1_000_000
#: Most memory the traces of one environment may take (bytes).
MAX_TRACE_BYTES = 8 << 30


@dataclass(frozen=True)
class Collapse:
    """The pre-registered collapse criteria (see the file for each one's sentence)."""

    warmup: int  # steps
    mean_fraction_of_uniform: float
    min_threshold: float
    confidence: float
    bracket_min_agreement_gap: float


@dataclass(frozen=True)
class Prereg:
    envs: tuple[str, ...]
    seeds: str
    controllers: tuple[str, ...]
    learning: Learning
    grid: dict[str, tuple]
    collapse: Collapse
    path: str  # repo-relative


def read_prereg(path: Path | str, build: Callable[[dict, str], Any]) -> Any:
    """``build(data, repo-relative path)`` of the pre-registration TOML at ``path``; a missing or malformed
    file is one :class:`SuiteError` line (both studies' loaders)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        rel = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path.name
        return build(data, str(rel))
    except FileNotFoundError:
        raise SuiteError(f"pre-registration file not found: {path}") from None
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as err:
        raise SuiteError(f"{path}: not a valid pre-registration ({type(err).__name__}: {err})") from None


def load_prereg(path: Path | str = PREREGISTERED) -> Prereg:
    def build(data: dict, rel: str) -> Prereg:
        s = data["study"]
        return Prereg(tuple(s["envs"]), s["seeds"], tuple(s["controllers"]), Learning(**data["learning"]),
                      {k: tuple(data["grid"][k]) for k in GRID_AXES}, Collapse(**data["collapse"]), rel)

    return read_prereg(path, build)


#: What tells the two studies' JSONs apart: every controller entry of the first holds the first key, of the
#: second the second study's first criterion.
_RESULT_KEYS = {"first": "collapse_fraction", "second": "relative"}


def read_result(path: Path, kind: str) -> dict:
    """The ``kind`` ("first" or "second") study's JSON as its ``--json`` wrote it; a one-line :class:`SuiteError`
    for anything else (a missing file, bad JSON, the other study's or another command's JSON)."""
    try:
        result = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise SuiteError(f"{path}: cannot read the {kind} study's JSON ({err.strerror or err})") from None
    except ValueError as err:  # UnicodeDecodeError and json's errors
        raise SuiteError(f"{path}: not JSON ({err})") from None
    key = _RESULT_KEYS[kind]
    try:
        blocks = list(result["envs"].values())
        ok = bool(blocks) and all(key in e for b in blocks for e in b["controllers"].values())
    except (KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        made_by = "python -m analysis study" + (" --second" if kind == "second" else "") + " --json PATH"
        raise SuiteError(f"{path}: not the {kind} learning-loop study's JSON (`{made_by}` writes one)")
    return result


def grid_columns(grid: dict[str, tuple]) -> dict[str, np.ndarray]:
    """The first study's grid points as arrays by axis (:data:`GRID_AXES` order)."""
    return combinations({k: grid[k] for k in GRID_AXES})


def parse_seeds(text: str) -> np.ndarray:
    """``A:B`` → seeds A..B−1 (0 ≤ A < B < 2^64, at most :data:`MAX_SEEDS` of them)."""
    try:
        a, b = (int(x) for x in text.split(":"))
    except ValueError:
        raise SuiteError(f"--seeds {text!r}: expected A:B with integers A < B") from None
    if not 0 <= a < b <= 1 << 64:
        raise SuiteError(f"--seeds {text!r}: expected 0 ≤ A < B ≤ 2^64")
    if b - a > MAX_SEEDS:
        raise SuiteError(f"--seeds {text!r}: {b - a} seeds; a study takes at most {MAX_SEEDS}")
    return np.arange(a, b, dtype=np.uint64)


def exact_interval(k: int, n: int, confidence: float) -> tuple[float, float]:
    """Clopper–Pearson interval of a binomial proportion k/n (scipy)."""
    from scipy.stats import binomtest

    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def verdicts(traces: Traces, n_actions: int, c: Collapse) -> dict[str, np.ndarray]:
    """Per run: collapsed (primary), deep (min-over-states criterion), whether each persists, and diverged.

    A run *diverges* when λ or π's logits stop being finite at some evaluation (a rule without a ceiling can
    drive λ to inf, and inf·0 to NaN); its agreement is then undefined and counts as no collapse from there on.
    """
    judged = traces.steps > c.warmup
    low_mean = traces.agree_mean < c.mean_fraction_of_uniform / n_actions
    low_min = traces.log10_agree_min < np.log10(c.min_threshold)
    return {"collapsed": low_mean[judged].any(axis=0), "collapsed_at_end": low_mean[-1],
            "deep": low_min[judged].any(axis=0), "deep_at_end": low_min[-1],
            "diverged": (~np.isfinite(traces.agree_mean) | ~np.isfinite(traces.lam)).any(axis=0),
            "lambda_zero": (traces.lam == 0).any(axis=0)}


@contextlib.contextmanager
def undefined_ok():
    """NumPy statistics over NaN (a diverged run, a slice where every run diverged) and log10(0) without
    warnings: the result is NaN or -inf, which the JSON records as null."""
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _quantiles(a: np.ndarray) -> dict[str, list]:
    # inf − inf inside the interpolation of a diverged λ, or an evaluation where every run is undefined: NaN, null
    with undefined_ok():
        q = np.nanquantile(a, (0.25, 0.5, 0.75), axis=1) if np.isfinite(a).any() else np.full((3, a.shape[0]), np.nan)
    clean = lambda row: [float(x) if np.isfinite(x) else None for x in row]  # noqa: E731 - JSON has no NaN
    return {name: clean(row) for name, row in zip(("q25", "median", "q75"), q, strict=True)}


def run_env(backend, tables: Tables, names: list[str], seeds: np.ndarray, prereg: Prereg,
            grid: dict[str, tuple] | None = None, sources: dict | None = None) -> dict:
    """One environment (its :class:`Tables`), every controller: the JSON's block for it.

    ``sources`` puts a kernel source in a contract name's place (a candidate under "fixed").
    """
    contract = load()
    groups = [ctl.group(backend, n, contract, (sources or {}).get(n)) for n in names]
    points = grid_columns(grid or prereg.grid)
    traces = run_loop(backend, tables, groups, prereg.learning, seeds, points)
    P, K = len(points["pi_view"]), len(seeds)
    c = prereg.collapse
    v = verdicts(traces, tables.n_actions, c)
    out = {"n_states": tables.n_states, "n_actions": tables.n_actions, "max_episode_steps": tables.max_episode_steps,
           "reward_range": tables.reward_range, "eval_steps": traces.steps.tolist(),
           "grid_points": [{k: float(points[k][i]) for k in GRID_AXES} for i in range(P)], "controllers": {}}
    for g, name in enumerate(names):
        s = slice(g * P * K, (g + 1) * P * K)
        entry = {"seed_lambda": groups[g].seed_lambda, "runs": P * K}
        for crit, key in (("collapsed", ""), ("deep", "deep_")):
            hit = v[crit][s]
            lo, hi = exact_interval(hit.sum(), hit.size, c.confidence)
            entry[f"{key}collapse_fraction"], entry[f"{key}ci_low"], entry[f"{key}ci_high"] = float(hit.mean()), lo, hi
            entry[f"{key}persisting"] = int((hit & v[f"{crit}_at_end"][s]).sum())
            entry[f"{key}recovered"] = int((hit & ~v[f"{crit}_at_end"][s]).sum())
            entry[f"{key}fraction_per_grid_point"] = hit.reshape(P, K).mean(axis=1).round(6).tolist()
        for crit in ("diverged", "lambda_zero"):
            hit = v[crit][s]
            entry[f"{crit}_fraction"] = float(hit.mean())
            entry[f"{crit}_ci_low"], entry[f"{crit}_ci_high"] = exact_interval(hit.sum(), hit.size, c.confidence)
        entry["verdicts"] = {k: v[k][s].astype(int).tolist() for k in ("collapsed", "deep", "diverged")}
        with undefined_ok():  # all-NaN: every run diverged there
            final = np.nanmedian(traces.agree_mean[-1, s].reshape(P, K), axis=1).round(6)
        entry["final_agree_mean_per_grid_point"] = [float(x) if np.isfinite(x) else None for x in final]  # JSON: no NaN
        entry["over_steps"] = {"agree_mean": _quantiles(traces.agree_mean[:, s]),
                               "log10_agree_min": _quantiles(traces.log10_agree_min[:, s]),
                               "lambda": _quantiles(traces.lam[:, s].astype(np.float64)),
                               "episode_return": _quantiles(traces.episode_return[:, s])}
        out["controllers"][name] = entry
    out["brackets"] = brackets(out, c)
    return out


def brackets(block: dict, c: Collapse) -> list[dict] | None:
    """Per grid point: is the constant-λ bracket (λ = 0.001 against λ = 1) wide enough to tell controllers apart?"""
    ctrl = block["controllers"]
    if not {"const:0.001", "const:1"} <= set(ctrl):
        return None
    lo, hi = ctrl["const:0.001"], ctrl["const:1"]
    K = lo["runs"] // len(block["grid_points"])
    rows = []
    for i, point in enumerate(block["grid_points"]):
        row = dict(point)
        for key in ("", "deep_"):
            ka, kb = (round(x[f"{key}fraction_per_grid_point"][i] * K) for x in (lo, hi))
            (a0, a1), (b0, b1) = exact_interval(ka, K, c.confidence), exact_interval(kb, K, c.confidence)
            row[f"{key}collapse_lambda_0.001"], row[f"{key}collapse_lambda_1"] = ka / K, kb / K
            row[f"{key}disjoint"] = bool(a1 < b0 or b1 < a0)
        a, b = lo["final_agree_mean_per_grid_point"][i], hi["final_agree_mean_per_grid_point"][i]
        gap = b - a if a is not None and b is not None else 0.0
        row["agree_gap"] = round(gap, 6)
        row["wide"] = bool(row["disjoint"] or row["deep_disjoint"] or abs(gap) >= c.bracket_min_agreement_gap)
        rows.append(row)
    return rows


def merge(results: list[dict]) -> dict:
    """One study's JSON from runs that split its environments or controllers (runs are independent of the
    batch they share: each run's random numbers depend on its seed only), same parameters and seeds."""
    out = json.loads(json.dumps(results[0]))
    for other in results[1:]:
        if other["parameters"] != out["parameters"] or other["seeds"] != out["seeds"]:
            raise SuiteError("merge: the studies differ in parameters or seeds")
        for env, block in other["envs"].items():
            if env in out["envs"]:
                out["envs"][env]["controllers"].update(block["controllers"])
            else:
                out["envs"][env] = block
        out["controllers"] += [n for n in other["controllers"] if n not in out["controllers"]]
    for block in out["envs"].values():
        block["brackets"] = brackets(block, Collapse(**out["parameters"]["collapse"]))
    return out


def run(backend, envs, names, seeds: np.ndarray, prereg: Prereg, grid: dict | None = None,
        steps: int | None = None, sources: dict | None = None, progress=None) -> dict:
    """The whole study's JSON (deterministic: no timings, no absolute paths).

    ``progress`` (a callable taking one line) hears when each environment is done, with its wall time (s).
    """
    if steps is not None:
        prereg = replace(prereg, learning=replace(prereg.learning, steps=steps))
    names = ctl.expand(names)
    # every environment made (and its name checked) before the first run starts
    tables = {env: make(env, prereg.learning.default_max_episode_steps)[1] for env in envs}
    n_runs = len(seeds) * len(grid_columns(grid or prereg.grid)["pi_view"])
    per_evaluation_and_run = sum(np.dtype(d).itemsize for d in LEARN_OUTPUTS.values())
    need = per_evaluation_and_run * (prereg.learning.steps // prereg.learning.eval_every) * n_runs * len(names)
    if need > MAX_TRACE_BYTES:
        raise SuiteError(f"the traces of one environment would take {need / 2**30:.1f} GiB (at most "
                         f"{MAX_TRACE_BYTES / 2**30:.0f}): fewer steps, seeds or controllers")
    result = {"preregistration": prereg.path, "backend": backend.name,
              "parameters": {"learning": asdict(prereg.learning), "grid": {k: list(v) for k, v in (grid or prereg.grid).items()},
                             "collapse": asdict(prereg.collapse)},
              "as_preregistered": steps is None and grid is None,
              "seeds": [int(seeds[0]), int(seeds[-1]) + 1], "controllers": names,
              "run_order": "per controller: grid point-major, then seed",
              "kernels": {n: src.origin for n, src in (sources or {}).items() if n in names},
              "envs": {}}
    for env in envs:
        start = time.perf_counter()
        result["envs"][env] = run_env(backend, tables[env], names, seeds, prereg, grid, sources)
        if progress:
            progress(f"{env}: {len(names)} controllers × {n_runs} runs × {prereg.learning.steps} steps "
                     f"in {time.perf_counter() - start:.1f} s")
    return result


#: The reduced study (CI and the report's quick section): fewer steps, seeds and grid points, same parameters.
REDUCED = {"envs": ("FrozenLake-v1", "CliffWalking-v1"), "seeds": "0:8", "steps": 6000,
           "controllers": ("fixed", "original", "const:0.001", "const:1"),
           "grid": {"entropy_bonus": (0.0,), "aux_reward": (0.0, 1.0), "pi_view": (1,)}}


def reduced_study(backend, prereg: Prereg | None = None, sources: dict | None = None) -> dict:
    """The reduced study's JSON (seconds on a CPU); ``sources`` as for :func:`run_env`."""
    prereg = prereg or load_prereg()
    r = REDUCED
    return run(backend, r["envs"], r["controllers"], parse_seeds(r["seeds"]), prereg, grid=r["grid"], steps=r["steps"],
               sources=sources)


def preregistered_study(backend, prereg: Prereg | None = None, sources: dict | None = None) -> dict:
    """The study exactly as pre-registered (its environments, seeds, controllers, grid and steps)."""
    prereg = prereg or load_prereg()
    return run(backend, prereg.envs, prereg.controllers, parse_seeds(prereg.seeds), prereg, sources=sources)
