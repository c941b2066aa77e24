"""The second pre-registered learning-loop study: where the controller's KL is measured, criteria that
can fire, paired tests.

Pure functions over the learning loop's traces (:mod:`repro.learning.agent`); the CLI is ``python -m analysis study
--second``. Every parameter comes from ``studies/preregistered_2.toml`` (the learners' from the first study's file,
unchanged). Units: steps are environment steps (= controller calls); KL in nats; agreement is a probability.

Criteria, per run (judged evaluations: after the warm-up):

- ``relative`` (primary): agreement with ties excluded (mean of π(Q's unique greedy action) over visited states)
  at or below what π reaches on its own objective alone (the median over the ``const:0`` runs of the same grid
  point and evaluation) for at least ``consecutive`` evaluations in a row;
- ``minimum``: the minimum of that agreement over visited states below ``min_threshold`` at a judged evaluation;
- ``signature`` (the incident's whole signature): λ at or below the original's documented floor for at least
  its documented steps-to-floor consecutive steps while the KL the controller sees is below target/(the
  original's tolerance), followed (at or after that evaluation) by ``consecutive`` judged evaluations in a row
  where the relative criterion holds.

A criterion *persists* when it still holds at the last evaluation, else the run *recovered*.
"""

from __future__ import annotations

import itertools
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from repro.core.contract import load
from repro.core.errors import SuiteError
from repro.core.paths import ROOT
from repro.learning import controllers as ctl
from repro.learning.agent import KL_SITES, Learning, Measure, Traces, run_loop
from repro.learning.env import Tables, make
from repro.learning.prereg import MAX_TRACE_BYTES, load_prereg, parse_seeds, read_prereg, undefined_ok

PREREGISTERED_2 = ROOT / "studies" / "preregistered_2.toml"
CRITERIA = ("relative", "minimum", "signature")
#: Agreement sets the loop measures (ties excluded each): visited states, odd states (those the even-state KL
#: never sees, where the auxiliary reward is paid), the replay ring's entries.
SETS = {"visited": ("agree_unique", "log10_min_unique"), "odd": ("agree_odd", "log10_min_odd"),
        "replay": ("agree_replay", "log10_min_replay")}
POLICIES = ("view:1", "view:4", "linear")


@dataclass(frozen=True)
class Criteria:
    """The pre-registered criteria (the file has each one's sentence)."""

    warmup: int  # steps
    baseline: str  # the controller whose median agreement is the relative criterion's level (const:0)
    consecutive: int  # evaluations in a row (K)
    min_threshold: float  # probability
    signature_of: str  # contract entry whose floor, tolerance and steps-to-floor define the signature
    confidence: float
    bracket_min_agreement_gap: float


@dataclass(frozen=True)
class Prereg2:
    envs: tuple[str, ...]
    seeds: str
    controllers: tuple[str, ...]
    learning: Learning
    features: int  # d of the linear policy
    replay_capacity: int
    replay_sample: int
    grid: dict[str, tuple]
    criteria: Criteria
    incident: dict  # env, grid point and steps of the incident figure
    path: str  # repo-relative
    learning_from: str


def load_prereg2(path: Path | str = PREREGISTERED_2) -> Prereg2:
    def build(data: dict, rel: str) -> Prereg2:
        s, m = data["study"], data["measure"]
        first = load_prereg(ROOT / s["learning_from"])
        grid = {k: tuple(data["grid"][k]) for k in ("kl_site", "kl_before", "policy", "aux_reward")}
        if not set(grid["kl_site"]) <= set(KL_SITES) or not set(grid["policy"]) <= set(POLICIES):
            raise SuiteError(f"{path}: kl_site from {list(KL_SITES)}, policy from {list(POLICIES)}")
        return Prereg2(tuple(s["envs"]), s["seeds"], tuple(s["controllers"]), first.learning, int(m["features"]),
                       int(m["replay_capacity"]), int(m["replay_sample"]), grid, Criteria(**data["criteria"]),
                       dict(data["incident"]), rel, first.path)

    return read_prereg(path, build)


def pairs(names: list[str]) -> list[dict]:
    """The paired comparisons the study makes among ``names``: original vs fixed, each fix alone vs none, each fix
    removed vs all (``a`` is the one expected to collapse more)."""
    out = [{"a": "original", "b": "fixed", "kind": "original vs fixed"}]
    for f in ctl.FACTORS:
        out.append({"a": "original", "b": f"ablation:{f}", "kind": f"{f} alone vs none", "fix": f})
    for f in ctl.FACTORS:
        out.append({"a": "ablation:" + "+".join(g for g in ctl.FACTORS if g != f), "b": "fixed",
                    "kind": f"all but {f} vs all", "fix": f})
    return [p for p in out if p["a"] in names and p["b"] in names]


def grid_points(grid: dict[str, tuple]) -> list[dict]:
    """Every combination, regime-major (kl_site, then kl_before), then policy, then aux_reward."""
    keys = ("kl_site", "kl_before", "policy", "aux_reward")
    return [dict(zip(keys, c, strict=True)) for c in itertools.product(*(grid[k] for k in keys))]


def loop_grid(points: list[dict], features: int) -> dict[str, np.ndarray]:
    """The loop's per-point arrays (:func:`repro.learning.agent.run_loop`): the auxiliary reward on odd states."""
    def col(f, dtype=float):
        return np.asarray([f(p) for p in points], dtype)
    return {"entropy_bonus": col(lambda p: 0.0), "aux_reward": col(lambda p: p["aux_reward"]),
            "pi_view": col(lambda p: int(p["policy"].split(":")[1]) if p["policy"].startswith("view:") else 1),
            "kl_site": col(lambda p: KL_SITES[p["kl_site"]], np.int64), "kl_before": col(lambda p: p["kl_before"], np.int64),
            "aux_odd": col(lambda p: 1, np.int64),
            "features": col(lambda p: features if p["policy"] == "linear" else 0, np.int64)}


def regimes(points: list[dict]) -> list[dict]:
    """The KL axis's regimes (where × when) with the indices of their grid points."""
    out: dict[tuple, list[int]] = {}
    for i, p in enumerate(points):
        out.setdefault((p["kl_site"], p["kl_before"]), []).append(i)
    return [{"kl_site": k[0], "kl_before": k[1], "points": v} for k, v in out.items()]


def measure_of(prereg: Prereg2) -> Measure:
    """The loop-wide settings: the replay ring, and the signature's thresholds from the contract's entry."""
    entry = load().controller(prereg.criteria.signature_of)
    quiet = np.float32(prereg.learning.kl_target) / np.float32(entry.value("tolerance"))
    return Measure(prereg.replay_capacity, prereg.replay_sample, float(quiet), float(np.float32(entry.value("floor"))))


def signature_steps(prereg: Prereg2) -> int:
    return int(load().controller(prereg.criteria.signature_of).value("steps_to_floor"))


def _runs_of(mask: np.ndarray, k: int) -> np.ndarray:
    """``[E, N]`` → ``[E, N]``: True at e when mask holds at e and the k − 1 evaluations after it."""
    E = mask.shape[0]
    out = np.zeros_like(mask)
    if k <= E:
        window = np.ones((E - k + 1, mask.shape[1]), dtype=bool)
        for j in range(k):
            window &= mask[j:E - k + 1 + j]
        out[:E - k + 1] = window
    return out


def baseline_level(traces: Traces, base: slice, P: int, K: int) -> np.ndarray:
    """``[E, P]``: the median over the baseline's runs of agreement (ties excluded) per evaluation and point."""
    a = traces.agree_unique[:, base].reshape(-1, P, K)
    with undefined_ok():
        return np.nanmedian(a, axis=2)


def verdicts(traces: Traces, level: np.ndarray, P: int, K: int, c: Criteria, quiet_steps: int) -> dict[str, np.ndarray]:
    """Per run (``[N]``, runs group-major, then point, then seed): each criterion, whether it holds at the last
    evaluation, and divergence. ``level``: :func:`baseline_level`."""
    E, N = traces.agree_unique.shape
    judged = (traces.steps > c.warmup)[:, None]
    lev = np.tile(np.repeat(level, K, axis=1), (1, N // (P * K)))  # [E, N]
    low = (traces.agree_unique <= lev) & np.isfinite(traces.agree_unique)
    started = _runs_of(low & judged, c.consecutive)
    relative = started.any(axis=0)
    deep = (traces.log10_min_unique < np.log10(c.min_threshold)) & judged
    streak = np.maximum.accumulate(traces.quiet_floor_run >= quiet_steps, axis=0)  # the λ side happened by e
    signature = (started & streak).any(axis=0)
    return {"relative": relative, "relative_at_end": low[-1], "minimum": deep.any(axis=0),
            "minimum_at_end": deep[-1], "signature": signature, "signature_at_end": low[-1] & streak[-1],
            "lambda_side": streak[-1],
            "diverged": (~np.isfinite(traces.agree_mean) | ~np.isfinite(traces.lam)).any(axis=0)}


def sign_p(x: int, y: int) -> float:
    """Two-sided exact binomial p-value of x against y successes at p = ½ (McNemar's exact test, the sign test):
    2·P(X ≤ min(x, y)) for X ~ Bin(x + y, ½), at most 1 (the closed form of scipy's binomtest at p = ½, which
    the study calls some 4 000 times per task: the closed form takes a fraction of its time)."""
    from scipy.stats import binom

    return 1.0 if x + y == 0 else float(min(1.0, 2.0 * binom.cdf(min(x, y), x + y, 0.5)))


def clopper_pearson(k: int, n: int, confidence: float) -> tuple[float, float]:
    """The exact (Clopper–Pearson) interval of k/n from beta quantiles (the closed form of scipy's
    ``binomtest(k, n).proportion_ci(method="exact")``)."""
    from scipy.stats import beta

    alpha = 1.0 - confidence
    lo = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.isf(alpha / 2, k + 1, n - k))
    return lo, hi


def mcnemar(a: np.ndarray, b: np.ndarray) -> dict:
    """McNemar's exact test on paired verdicts: discordant counts and the two-sided exact p-value."""
    only_a, only_b = int((a & ~b).sum()), int((b & ~a).sum())
    return {"only_a": only_a, "only_b": only_b, "both": int((a & b).sum()), "n": int(a.size), "p": sign_p(only_a, only_b)}


def seed_sign_test(a: np.ndarray, b: np.ndarray) -> dict:
    """Over seeds (the independent units where grid points reuse them): ``a``, ``b`` are ``[points, seeds]``;
    seeds where a collapses at more points than b, fewer, and the exact sign test's p-value."""
    d = a.sum(axis=0).astype(int) - b.sum(axis=0).astype(int)
    more, fewer = int((d > 0).sum()), int((d < 0).sum())
    return {"seeds_a_more": more, "seeds_b_more": fewer, "p": sign_p(more, fewer)}


def _interval(hit: np.ndarray, confidence: float) -> dict:
    lo, hi = clopper_pearson(int(hit.sum()), hit.size, confidence)
    return {"k": int(hit.sum()), "n": int(hit.size), "fraction": float(hit.mean()), "ci_low": lo, "ci_high": hi}


def _median_series(a: np.ndarray) -> list:
    with undefined_ok():
        m = np.nanmedian(a, axis=1) if a.size else np.array([])
    return [float(round(x, 9)) if np.isfinite(x) else None for x in m]


def _clean(x) -> float | None:
    return float(x) if np.isfinite(x) else None


def run_env(backend, tables: Tables, names: list[str], seeds: np.ndarray, prereg: Prereg2,
            points: list[dict]) -> dict:
    """One environment, every controller: the JSON's block (the baseline must be among ``names``)."""
    c = prereg.criteria
    if c.baseline not in names:
        raise SuiteError(f"the relative criterion needs its baseline {c.baseline} among the controllers")
    contract = load()
    groups = [ctl.group(backend, n, contract) for n in names]
    grid = loop_grid(points, prereg.features)
    traces = run_loop(backend, tables, groups, prereg.learning, seeds, grid, measure_of(prereg))
    P, K = len(points), len(seeds)
    g_of = {n: slice(g * P * K, (g + 1) * P * K) for g, n in enumerate(names)}
    level = baseline_level(traces, g_of[c.baseline], P, K)
    v = verdicts(traces, level, P, K, c, signature_steps(prereg))
    regs = regimes(points)
    judged = traces.steps > c.warmup
    out = {"n_states": tables.n_states, "n_actions": tables.n_actions, "eval_steps": traces.steps.tolist(),
           "grid_points": points, "regimes": regs,
           "baseline_median_agreement": [[_clean(x) for x in row] for row in level.T.round(9)],
           "controllers": {}, "pairs": []}
    for name in names:
        s = g_of[name]
        entry = {"seed_lambda": groups[names.index(name)].seed_lambda, "runs": P * K}
        for crit in CRITERIA:
            hit = v[crit][s]
            e = _interval(hit, c.confidence)
            at_end = v[f"{crit}_at_end"][s]
            e["persisting"], e["recovered"] = int((hit & at_end).sum()), int((hit & ~at_end).sum())
            by_point = hit.reshape(P, K)
            e["per_point"] = [_interval(by_point[i], c.confidence) for i in range(P)]
            e["per_regime"] = [_interval(by_point[r["points"]].ravel(), c.confidence) for r in regs]
            e["verdicts"] = hit.astype(int).tolist()
            entry[crit] = e
        entry["lambda_side"] = _interval(v["lambda_side"][s], c.confidence)
        entry["diverged"] = _interval(v["diverged"][s], c.confidence)
        # the lowest agreement each set reached at a judged evaluation (log10), per regime: the median over runs
        # and the fraction of runs that reached 1e-20 or below (the incident's q_pi_agree was 1e-22)
        # and the lowest mean over the set (what a metric averaged over a batch of those states would read)
        lowest = {}
        for set_name, (mean_key, log_min) in SETS.items():
            m = getattr(traces, log_min)[judged][:, s].min(axis=0).reshape(P, K)
            with undefined_ok():
                mm = np.log10(np.nanmin(getattr(traces, mean_key)[judged][:, s], axis=0)).reshape(P, K)
            rows = []
            for r in regs:
                x, y = m[r["points"]].ravel(), mm[r["points"]].ravel()
                fin, fin_y = x[np.isfinite(x)], y[np.isfinite(y)]
                rows.append({"median": _clean(np.median(fin)) if fin.size else None,
                             "lowest": _clean(fin.min()) if fin.size else None,
                             "at_most_1e-20": float((x <= -20).mean()),
                             "mean_median": _clean(np.median(fin_y)) if fin_y.size else None,
                             "mean_lowest": _clean(fin_y.min()) if fin_y.size else None})
            lowest[set_name] = rows
        entry["lowest_log10_agreement"] = lowest
        n_unique = traces.n_unique[-1, s].reshape(P, K)
        entry["final_unique_states_median_per_point"] = [float(np.median(n_unique[i])) for i in range(P)]
        final = traces.agree_unique[-1, s].reshape(P, K)
        with undefined_ok():
            entry["final_agreement_median_per_point"] = [_clean(x) for x in np.nanmedian(final, axis=1).round(6)]
        if not name.startswith("ablation:"):
            series = {}
            for key in ("lam", "kl_ema", "agree_unique", "agree_odd", "agree_replay", "log10_min_unique"):
                a = getattr(traces, key)[:, s].astype(np.float64).reshape(-1, P, K)
                series[key] = [_median_series(a[:, r["points"]].reshape(a.shape[0], -1)) for r in regs]
            entry["median_over_steps_per_regime"] = series
        out["controllers"][name] = entry
    for pr in pairs(names):
        row = dict(pr)
        for crit in CRITERIA:
            a, b = (v[crit][g_of[pr[x]]].reshape(P, K) for x in ("a", "b"))
            row[crit] = {"per_regime": [{**mcnemar(a[r["points"]].ravel(), b[r["points"]].ravel()),
                                         "seeds": seed_sign_test(a[r["points"]], b[r["points"]])} for r in regs],
                         "per_point": [mcnemar(a[i], b[i]) for i in range(P)],
                         "pooled": mcnemar(a.ravel(), b.ravel())}
        out["pairs"].append(row)
    out["brackets"] = brackets(out, c)
    return out


def brackets(block: dict, c: Criteria) -> list[dict] | None:
    """Per grid point: does λ = 1 do better than λ = 0.001 (with its sign: a negative gap is λ = 1 worse)?
    Wide enough when λ = 0.001's relative-collapse interval lies wholly above λ = 1's, or λ = 1's median final
    agreement exceeds λ = 0.001's by at least the pre-registered gap."""
    ctrl = block["controllers"]
    if not {"const:0.001", "const:1"} <= set(ctrl):
        return None
    lo, hi = ctrl["const:0.001"], ctrl["const:1"]
    rows = []
    for i, point in enumerate(block["grid_points"]):
        a, b = lo["relative"]["per_point"][i], hi["relative"]["per_point"][i]
        fa, fb = lo["final_agreement_median_per_point"][i], hi["final_agreement_median_per_point"][i]
        gap = fb - fa if fa is not None and fb is not None else None
        separated = a["ci_low"] > b["ci_high"]
        rows.append({**point, "relative_lambda_0.001": a["fraction"], "relative_lambda_1": b["fraction"],
                     "separated": bool(separated), "agree_gap": None if gap is None else round(gap, 6),
                     "wide": bool(separated or (gap is not None and gap >= c.bracket_min_agreement_gap))})
    return rows


def incident(backend, prereg: Prereg2, seed: int, names=("original", "fixed"), every: int = 1,
             steps: int | None = None) -> dict:
    """One seed's run of each controller at the incident figure's grid point, evaluated every ``every`` steps:
    λ, the KL the controller sees, agreement (ties excluded) on visited and odd states."""
    inc = prereg.incident
    _, tables = make(inc["env"], prereg.learning.default_max_episode_steps)
    point = {k: inc[k] for k in ("kl_site", "kl_before", "policy", "aux_reward")}
    learning = replace(prereg.learning, steps=steps or inc["steps"], eval_every=every)
    contract = load()
    groups = [ctl.group(backend, n, contract) for n in names]
    traces = run_loop(backend, tables, groups, learning, np.array([seed], np.uint64), loop_grid([point], prereg.features),
                      measure_of(prereg))
    series = {}
    for g, n in enumerate(names):
        series[n] = {key: [_clean(x) for x in getattr(traces, key)[:, g].astype(np.float64)]
                     for key in ("lam", "kl_ema", "agree_unique", "agree_odd")}
    return {"env": inc["env"], "point": point, "seed": int(seed), "every": every, "steps": traces.steps.tolist(),
            "quiet_kl": measure_of(prereg).quiet_kl, "kl_target": prereg.learning.kl_target, "series": series}


def run(backend, prereg: Prereg2, envs=None, names=None, seeds=None, grid=None, steps=None, progress=None,
        incident_steps: int | None = None) -> dict:
    """The second study's JSON (deterministic: no timings, no absolute paths); arguments left None are as
    pre-registered."""
    as_prereg = all(x is None for x in (envs, names, seeds, grid, steps))
    envs = list(envs or prereg.envs)
    names = ctl.expand(names or prereg.controllers)
    seeds = parse_seeds(prereg.seeds) if seeds is None else seeds
    if steps is not None:
        prereg = replace(prereg, learning=replace(prereg.learning, steps=steps))
    if grid is not None:
        prereg = replace(prereg, grid={**prereg.grid, **grid})
    points = grid_points(prereg.grid)
    tables = {env: make(env, prereg.learning.default_max_episode_steps)[1] for env in envs}
    n_runs = len(seeds) * len(points)
    need = 13 * 8 * (prereg.learning.steps // prereg.learning.eval_every) * n_runs * len(names)
    if need > MAX_TRACE_BYTES:
        raise SuiteError(f"the traces of one environment would take {need / 2**30:.1f} GiB: fewer steps, seeds or controllers")
    c = prereg.criteria
    result = {"preregistration": prereg.path, "learning_from": prereg.learning_from, "backend": backend.name,
              "parameters": {"learning": asdict(prereg.learning), "features": prereg.features,
                             "replay_capacity": prereg.replay_capacity, "replay_sample": prereg.replay_sample,
                             "grid": {k: list(v) for k, v in prereg.grid.items()}, "criteria": asdict(c),
                             "signature": {**asdict(measure_of(prereg)), "steps": signature_steps(prereg)}},
              "as_preregistered": as_prereg, "seeds": [int(seeds[0]), int(seeds[-1]) + 1], "controllers": names,
              "run_order": "per controller: grid point-major (regime, policy, aux), then seed", "envs": {}}
    contract = load()
    with ThreadPoolExecutor(min(8, len(names))) as pool:  # every controller compiled at once (cached for run_env)
        list(pool.map(lambda n: ctl.group(backend, n, contract), names))
    for env in envs:
        start = time.perf_counter()
        result["envs"][env] = run_env(backend, tables[env], names, seeds, prereg, points)
        if progress:
            progress(f"{env}: {len(names)} controllers × {n_runs} runs × {prereg.learning.steps} steps "
                     f"in {time.perf_counter() - start:.1f} s")
    if prereg.incident["env"] in result["envs"] and {"original", "fixed"} <= set(names):
        result["incident"] = incident(backend, prereg, _incident_seed(result, prereg, seeds), steps=incident_steps)
    return result


def _incident_seed(result: dict, prereg: Prereg2, seeds: np.ndarray) -> int:
    """The first seed whose original run shows the whole signature at the incident figure's grid point (the
    first seed where none does)."""
    block = result["envs"][prereg.incident["env"]]
    want = {k: prereg.incident[k] for k in ("kl_site", "kl_before", "policy", "aux_reward")}
    i = next((j for j, p in enumerate(block["grid_points"]) if p == want), None)
    if i is None:
        return int(seeds[0])
    K = len(seeds)
    hits = block["controllers"]["original"]["signature"]["verdicts"][i * K:(i + 1) * K]
    return int(seeds[hits.index(1)]) if 1 in hits else int(seeds[0])


#: The reduced second study (CI): fewer steps, seeds, grid points and controllers; same parameters.
REDUCED = {"envs": ("FrozenLake-v1", "CliffWalking-v1"), "seeds": "0:4", "steps": 8000,
           "controllers": ("fixed", "original", "const:0", "const:0.001", "const:1"),
           "grid": {"kl_site": ("visited", "replay", "even"), "kl_before": (0,), "policy": ("view:1",),
                    "aux_reward": (1.0,)}}


def reduced_study(backend, prereg: Prereg2 | None = None) -> dict:
    prereg = prereg or load_prereg2()
    r = REDUCED
    return run(backend, prereg, envs=r["envs"], names=r["controllers"], seeds=parse_seeds(r["seeds"]), grid=r["grid"],
               steps=r["steps"], incident_steps=2000)


def calibrate(backend, prereg: Prereg2, seeds: np.ndarray, candidates=(1, 2, 3, 5, 8, 13), false_alarm: float = 0.05,
              progress=None) -> dict:
    """The calibration (constant λ only, its own seeds): for each candidate K, how often λ = 1 and λ = 0.001 trip
    the relative criterion at the grid points where distillation has an effect to lose (λ = 1's median final
    agreement above λ = 0's by at least the bracket's gap); the K chosen is the smallest with λ = 1's rate there at
    most ``false_alarm``, pooled over both tasks. Also: how many states keep a unique greedy action, λ = 0's level."""
    names = ["const:0", "const:0.001", "const:1"]
    points = grid_points(prereg.grid)
    P, K = len(points), len(seeds)
    out = {"seeds": [int(seeds[0]), int(seeds[-1]) + 1], "controllers": names, "candidates": list(candidates),
           "false_alarm": false_alarm, "rule": calibrate.__doc__.split("; the K")[0].split(": ", 1)[1], "envs": {}}
    trips = {k: {n: [] for n in names} for k in candidates}
    for env in prereg.envs:
        start = time.perf_counter()
        _, tables = make(env, prereg.learning.default_max_episode_steps)
        groups = [ctl.group(backend, n) for n in names]
        traces = run_loop(backend, tables, groups, prereg.learning, seeds, loop_grid(points, prereg.features),
                          measure_of(prereg))
        level = baseline_level(traces, slice(0, P * K), P, K)
        with undefined_ok():
            final = np.nanmedian(traces.agree_unique[-1].reshape(len(names), P, K), axis=2)  # [controller, point]
        gap = final[2] - final[0]
        effective = gap >= prereg.criteria.bracket_min_agreement_gap
        block = {"n_states": tables.n_states, "unique_states_final_median": float(np.median(traces.n_unique[-1])),
                 "points": [{**pt, "final_agreement": {n: _clean(final[g, i]) for g, n in enumerate(names)},
                             "effective": bool(effective[i])} for i, pt in enumerate(points)], "rates": {}}
        keep = np.tile(np.repeat(effective, K), 1)
        for k in candidates:
            v = verdicts(traces, level, P, K, replace(prereg.criteria, consecutive=k), signature_steps(prereg))
            block["rates"][str(k)] = {}
            for g, n in enumerate(names):
                hit = v["relative"][g * P * K:(g + 1) * P * K]
                trips[k][n].append(hit[keep])
                block["rates"][str(k)][n] = {"all_points": float(hit.mean()),
                                             "effective_points": float(hit[keep].mean()) if keep.any() else None}
        out["envs"][env] = block
        if progress:
            progress(f"calibration {env}: {time.perf_counter() - start:.1f} s")
    pooled = {str(k): {n: float(np.concatenate(trips[k][n]).mean()) for n in names} for k in candidates}
    out["pooled_effective_points"] = pooled
    ok = [k for k in candidates if pooled[str(k)]["const:1"] <= false_alarm]
    out["chosen_consecutive"] = ok[0] if ok else None
    return out
