"""The fourth study's confirmatory replication (studies/preregistered_4.toml, issue 42 item 3): the runs.

Gathering only (the test, Holm's correction and the five-word verdicts are ``analysis/judge/confirm_study.py``).
The pre-registration names the cells the exploratory search selected (each a (task, τ, aux, π lr) group with a KL
target and site), the drift threshold per cell read from the SEARCH's constant-λ medians, and the pairs per cell
from a power computation on the search's discordant counts. Every cell runs every declared arm on the same fresh
seeds: the runs of one seed in one cell start from the same weights and states and see the same random numbers
(the loop's counter RNG keyed by :func:`run_key`); only λ differs, so original and fixed are paired by seed.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from repro.core.ablation import FACTORS
from repro.core.contract import Contract
from repro.core.errors import SuiteError
from repro.core.paths import ROOT
from repro.core.toml_file import read_toml
from repro.learning.controllers import canonical, source_and_seed
from repro.learning.deep import explore

DECLARATION = ROOT / "studies" / "preregistered_4.toml"


@dataclass(frozen=True)
class Cell:
    index: int          # position in the pre-registration's [[cells]] order
    task: str
    tau: float          # × the task's tau_unit
    aux: float
    pi_lr: float
    kl_target: float    # nats
    kl_site: str
    midpoint: float     # log10: a run drifts when its r_geo_avg lies below it (the search's medians)
    pairs: int          # seeds (every arm runs each)


@dataclass(frozen=True)
class Confirm:
    path: str
    seed: int
    loop: dict
    matmul: str
    tasks: dict         # task → explore.Task (calibrated)
    cells: tuple
    arms: tuple         # canonical controller names, "original" and "fixed" first
    alpha: float
    min_precondition: float
    reduced: bool

    def loop_config(self, task: str):
        from repro.learning.deep.loop import LoopConfig

        t = self.tasks[task]
        return LoopConfig(env=task, region_obs=t.region_obs, region_threshold=t.region_threshold,
                          **{k: self.loop[k] for k in explore.LOOP_KEYS})


def load(path: Path | str = DECLARATION, reduced: bool = False) -> Confirm:
    """The pre-registration as typed data. Its loop and tasks are the search declaration's (``[study] search``);
    ``reduced``: the search's ``[reduced]`` loop and the pre-registration's ``[reduced] pairs`` (CPU smoke)."""
    path = Path(path)
    data = read_toml(path, "pre-registration")
    try:
        study = data["study"]
        if study.get("exploratory", False):
            raise SuiteError(f"{path}: a confirmation is not exploratory ([study] exploratory = false)")
        search = explore.calibrated(explore.load(ROOT / study["search_declaration"], reduced=reduced))
        arms = tuple(canonical(a) for a in data["arms"]["names"])
        if arms[:2] != ("original", "fixed") or len(set(arms)) != len(arms):
            raise SuiteError(f"{path}: [arms] names must start with original, fixed and name each arm once")
        cells = []
        for k, c in enumerate(data.get("cells", [])):
            if c["task"] not in search.tasks:
                raise SuiteError(f"{path}: cell {k + 1}: task {c['task']!r} is not in the search")
            pairs = int(data["reduced"]["pairs"]) if reduced else int(c["pairs"])
            cells.append(Cell(k, c["task"], float(c["tau"]), float(c["aux_reward"]), float(c["pi_lr"]),
                              float(c["kl_target"]), str(c["kl_site"]), float(c["midpoint"]), pairs))
        if not cells:
            raise SuiteError(f"{path}: no [[cells]]: the search selected none, so there is nothing to confirm")
        rel = path.resolve()
        return Confirm(rel.relative_to(ROOT).as_posix() if rel.is_relative_to(ROOT) else str(path),
                       int(study["seed"]), search.loop, search.matmul, search.tasks, tuple(cells), arms,
                       float(data["test"]["alpha"]), float(data["precondition"]["min_fraction"]), reduced)
    except KeyError as err:
        raise SuiteError(f"{path}: missing key {err}") from None
    except (TypeError, ValueError) as err:
        raise SuiteError(f"{path}: {err}") from None


def run_key(seed: int, cell: Cell, i: int) -> int:
    """A run's int32 key: a hash of the confirmation's seed, the cell and the seed index (fresh: the search's keys
    hash its own seed and group indices)."""
    digest = hashlib.sha256(f"{seed}|confirm|{cell.task}|{cell.index}|{i}".encode()).digest()
    return int.from_bytes(digest[:4], "little", signed=True)


def floor_and_tolerance(arm: str, contract) -> tuple[float, float]:
    """The arm's λ floor and dead-zone tolerance (NaN, NaN for a constant): a contract entry's own, an ablation's
    from the fixes it applies to the original."""
    if arm.startswith("const:"):
        return float("nan"), float("nan")
    if arm.startswith("ablation:"):
        fixes = arm.split(":", 1)[1].split("+")
        pick = lambda prop: contract.controller("fixed" if any(FACTORS[f][1] == prop for f in fixes)
                                                else "original").value(prop)
        return float(np.float32(pick("floor"))), float(pick("tolerance"))
    c = contract.controller(arm)
    return float(np.float32(c.value("floor"))), float(c.value("tolerance"))


def layout(decl: Confirm, cells: list[Cell]) -> list[tuple]:
    """Rows ``[(arm, cell, seed index)]``, arm-major (each kernel launches once per step for the chunk)."""
    return [(arm, c, i) for arm in decl.arms for c in cells for i in range(c.pairs)]


def build_rows(decl: Confirm, cells: list[Cell], backend, contract: Contract, sources=None):
    """The :class:`Rows` of one loop over ``cells`` and its entries (:func:`layout`), each arm's kernel and seed λ
    from ``contract``. ``sources`` maps an arm name
    to a KernelSource run under it (a candidate): seeded with the fixed kernel's λ, its time at the floor and its
    precondition read against the fixed kernel's floor and tolerance (the kernel it stands in for)."""
    from repro.learning.deep.controller import ArmRows
    from repro.learning.deep.loop import SITES, Rows

    sources = sources or {}
    entries = layout(decl, cells)
    task = decl.tasks[cells[0].task]
    arm_rows = []
    for arm in decl.arms:
        idx = [k for k, e in enumerate(entries) if e[0] == arm]
        source, seed_lambda = source_and_seed("fixed" if arm in sources else arm, contract, sources.get(arm))
        arm_rows.append(ArmRows(arm, backend.compile(source, contract.slots), idx[0], idx[-1] + 1, seed_lambda))
    R = len(entries)
    floor, edge = np.full(R, np.nan), np.full(R, np.nan)
    for k, (arm, c, _i) in enumerate(entries):
        f, tol = floor_and_tolerance("fixed" if arm in sources else arm, contract)
        floor[k], edge[k] = f, c.kl_target / tol
    col = lambda f: np.array([f(c) for _a, c, _i in entries])
    width = max(c.pairs for c in cells)  # u: one index per (cell, seed), shared by the seed's arms
    rows = Rows(u=np.array([c.index * width + i for _a, c, i in entries]),
                tau=col(lambda c: c.tau * task.tau_unit), aux=col(lambda c: c.aux),
                beta=np.full(R, task.beta), target=col(lambda c: c.kl_target), forward=np.zeros(R, bool),
                site=col(lambda c: SITES.index(c.kl_site)), ema_first=np.zeros(R, bool), resume=np.full(R, -1),
                arms=arm_rows, key=np.array([run_key(decl.seed, c, i) for _a, c, i in entries], dtype=np.int64),
                pi_lr=col(lambda c: c.pi_lr), floor=floor, lower_edge=edge)
    return rows, entries


def prepare(decl: Confirm, cells: list[Cell], backend, contract: Contract, device="cpu", graph=False, sources=None):
    """One task's batched loop over ``cells``, built (and on CUDA with ``graph``, its step captured), not run:
    ``(loop, entries)`` (``contract``, ``sources``: :func:`build_rows`)."""
    import torch

    from repro.learning.deep.loop import DeepLoop

    rows, entries = build_rows(decl, cells, backend, contract, sources)
    torch.backends.cuda.matmul.allow_tf32 = decl.matmul == "high"
    torch.set_float32_matmul_precision(decl.matmul)
    loop = DeepLoop(decl.loop_config(cells[0].task), rows, backend, contract.slots, device=device,
                    minibatch_stats=False)
    if graph:
        loop.capture()
    return loop, entries


def records(decl: Confirm, cells: list[Cell], entries: list[tuple], out: dict) -> list[dict]:
    """Per cell of one task's loop output ``out``: its keys and, per arm, the declared measures per seed."""
    got = explore.per_run(out, decl.loop_config(cells[0].task))
    where: dict[tuple, list[int]] = {}
    for k, (arm, c, _i) in enumerate(entries):
        where.setdefault((arm, c.index), []).append(k)
    return [{"index": c.index, "task": c.task, "tau": c.tau, "aux_reward": c.aux, "pi_lr": c.pi_lr,
             "kl_target": c.kl_target, "kl_site": c.kl_site, "midpoint": c.midpoint, "pairs": c.pairs,
             "keys": [run_key(decl.seed, c, i) for i in range(c.pairs)],
             "arms": {arm: {m: [explore._num(got[m][k]) for k in where[(arm, c.index)]] for m in explore.MEASURES}
                      for arm in decl.arms}} for c in cells]


def run_chunk(decl: Confirm, cells: list[Cell], backend, contract: Contract, device="cpu", graph=False, progress=None,
              sources=None):
    """One batched loop over ``cells`` (one task): :func:`records` and the loop's seconds (its capture included)."""
    loop, entries = prepare(decl, cells, backend, contract, device, False, sources)
    out = loop.run(graph=graph, progress=progress)
    return records(decl, cells, entries, out), float(out["seconds"])


def header(decl: Confirm, backend_name: str, device: str, torch_version: str) -> dict:
    return {"study": "confirmation_4", "exploratory": False, "declaration": decl.path, "reduced": decl.reduced,
            "backend": backend_name, "device": device, "torch": torch_version, "seed": decl.seed,
            "loop": {k: decl.loop[k] for k in explore.LOOP_KEYS}, "matmul": decl.matmul,
            "tasks": {k: {"region_obs": t.region_obs, "region_threshold": t.region_threshold, "tau_unit": t.tau_unit,
                          "beta": t.beta} for k, t in decl.tasks.items()},
            "arms": list(decl.arms), "alpha": decl.alpha, "min_precondition": decl.min_precondition}


def run(decl: Confirm, backend, contract: Contract, device="cpu", graph=False, progress=None, on_chunk=None,
        sources=None) -> dict:
    """Every cell, one batched loop per task; ``on_chunk(cells)`` after each (a call cut off keeps them);
    ``contract``, ``sources``: :func:`build_rows`. On CUDA the tasks' loops run side by side (:func:`side_by_side`);
    elsewhere one after another. ``seconds``: the loops' time (side by side: from their start to the last's end)."""
    tasks = list(dict.fromkeys(c.task for c in decl.cells))
    per_task = [[c for c in decl.cells if c.task == task] for task in tasks]
    if device == "cuda" and len(tasks) > 1:
        return side_by_side(decl, per_task, backend, contract, device, graph, progress, on_chunk, sources)
    done, seconds, run_steps = [], 0.0, 0
    for n, cells in enumerate(per_task):
        _announce(decl, n, per_task, progress)
        began = time.perf_counter()
        got, secs = run_chunk(decl, cells, backend, contract, device=device, graph=graph, progress=progress,
                              sources=sources)
        done = sorted(done + got, key=lambda r: r["index"])
        seconds += secs
        run_steps += _runs(decl, cells) * decl.loop["steps"]
        if on_chunk:
            on_chunk(done)
        if progress:
            progress(f"[{n + 1}/{len(per_task)}] done in {time.perf_counter() - began:.1f} s")
    return {"cells": done, "seconds": seconds, "run_steps": run_steps}


def side_by_side(decl: Confirm, per_task: list[list[Cell]], backend, contract: Contract, device: str, graph: bool,
                 progress, on_chunk, sources) -> dict:
    """The tasks' loops at once on one GPU, each on a CUDA stream of its own from a thread of its own: a loop of a
    few hundred runs is bound by its kernels' latency, not the GPU's throughput, so two overlap almost fully. Each
    loop's runs are the bits they are alone (the same kernels on the same inputs; no tensor is shared). The loops
    are built and captured one after another in this thread first (a capture must be the only work on the
    device; each is captured on a stream of its own, so no two share cuBLAS's workspace). All loops are in memory
    at once. Ctrl-C here stops every loop at its next evaluation; an error in one loop lets the others run to their
    end, their cells kept through ``on_chunk``, and is raised then (the cells of loops that ended before either are
    kept too). On the CPU (the tests) the threads share the cores; :func:`run` runs the loops there one after
    another."""
    import contextlib
    import threading
    from concurrent.futures import ThreadPoolExecutor, as_completed

    import torch

    built = []
    for n, cells in enumerate(per_task):
        _announce(decl, n, per_task, progress)
        built.append(prepare(decl, cells, backend, contract, device, graph, sources))
    cuda = device == "cuda"
    streams = [torch.cuda.Stream() if cuda else None for _ in built]
    for s in streams:
        if s is not None:
            s.wait_stream(torch.cuda.current_stream())  # the loops' tensors were made on this thread's stream
    stop = threading.Event()

    def go(n: int) -> dict:
        with torch.cuda.stream(streams[n]) if cuda else contextlib.nullcontext():
            try:
                tagged = progress and (lambda text, task=per_task[n][0].task: progress(f"{task}: {text}"))
                return built[n][0].run(graph=graph, progress=tagged, stop=stop)
            finally:  # stopped or failed: its queued work ends before its tensors can be freed and handed out
                if cuda:
                    streams[n].synchronize()

    done, began, failed = [], time.perf_counter(), None
    with ThreadPoolExecutor(len(built), thread_name_prefix="loop") as pool:
        futures = {pool.submit(go, n): n for n in range(len(built))}
        try:
            for future in as_completed(futures):
                n = futures[future]
                try:
                    measured = future.result()
                except Exception as err:  # this loop's: the others run on, and it is raised when they end
                    failed = failed or err
                    if progress:
                        progress(f"[{n + 1}/{len(per_task)}] failed ({type(err).__name__}: {err}); the other loops "
                                 "run on")
                    continue
                done = sorted(done + records(decl, per_task[n], built[n][1], measured), key=lambda r: r["index"])
                if on_chunk:
                    on_chunk(done)
                if progress:
                    progress(f"[{n + 1}/{len(per_task)}] done in {time.perf_counter() - began:.1f} s")
        except BaseException:  # Ctrl-C: every loop stops at its next evaluation
            stop.set()
            raise
    if failed is not None:
        raise failed
    run_steps = sum(_runs(decl, cells) for cells in per_task) * decl.loop["steps"]
    return {"cells": done, "seconds": time.perf_counter() - began, "run_steps": run_steps}


def _runs(decl: Confirm, cells: list[Cell]) -> int:
    """The runs of one task's loop: every arm on every pair of its cells."""
    return len(decl.arms) * sum(c.pairs for c in cells)


def _announce(decl: Confirm, n: int, per_task: list[list[Cell]], progress) -> None:
    """The progress line before task ``n``'s loop: its cells and runs."""
    if progress:
        cells = per_task[n]
        progress(f"[{n + 1}/{len(per_task)}] {cells[0].task}: {len(cells)} cell(s), {_runs(decl, cells)} runs × "
                 f"{decl.loop['steps']} steps …")


#: The arms of the closed-loop check (``study --deep --kernel``, issue 42 item 6): the candidate beside the fixed
#: kernel, paired by seed.
CHECK_ARMS = ("candidate", "fixed")


def closed_loop(search: Path | str, cells: list[dict], seed: int, alpha: float) -> Confirm:
    """The closed-loop check's plan, in the confirmation's frame: the exploratory search's loop and tasks (its
    declaration at ``search``), arms :data:`CHECK_ARMS`, and per cell of ``cells`` (each: task, tau, aux_reward,
    pi_lr, kl_target, kl_site, midpoint in log10, pairs) its seeds keyed by ``seed`` (:func:`run_key`: fresh where
    ``seed`` is its own)."""
    decl = explore.calibrated(explore.load(search))
    out = []
    for k, c in enumerate(cells):
        if c["task"] not in decl.tasks:
            raise SuiteError(f"sentinel cell {k + 1}: task {c['task']!r} is not in the search {decl.path}")
        if c["kl_site"] not in decl.sites:
            raise SuiteError(f"sentinel cell {k + 1}: KL site {c['kl_site']!r} is not in the search {decl.path}")
        if not (np.isfinite(c["midpoint"]) and int(c["pairs"]) >= 1):
            raise SuiteError(f"sentinel cell {k + 1}: no finite midpoint or no pairs")
        out.append(Cell(k, c["task"], float(c["tau"]), float(c["aux_reward"]), float(c["pi_lr"]),
                        float(c["kl_target"]), str(c["kl_site"]), float(c["midpoint"]), int(c["pairs"])))
    if not out:
        raise SuiteError("the closed-loop check has no sentinel cell")
    return Confirm(decl.path, int(seed), decl.loop, decl.matmul, decl.tasks, tuple(out), CHECK_ARMS, float(alpha),
                   float(decl.selection["min_precondition"]), decl.reduced)


MEASURED = "measured.json"


def write_measured(path: Path, raw: dict) -> None:
    """What :func:`run` measured, as plain data (:mod:`repro.runners.plain`): per cell (in the plan's order) per
    arm per measure of :data:`explore.MEASURES` a float32 array over its seeds (NaN: none), and the loop seconds.
    Nothing the judging process could take from its own plan instead (settings, keys, midpoints)."""
    from repro.runners import plain

    cells = [{arm: {m: np.array([np.nan if x is None else x for x in r["arms"][arm][m]], np.float32)
                    for m in explore.MEASURES} for arm in r["arms"]} for r in raw["cells"]]
    path.write_bytes(plain.dumps({"cells": cells, "seconds": float(raw["seconds"])}))


def read_measured(path: Path, decl: Confirm) -> dict:
    """:func:`run`'s result from what a confined child wrote at ``path`` (:func:`write_measured`), read as plain
    data against ``decl`` (this process's own plan): one entry per planned cell, in order, each with exactly the
    plan's arms, each arm exactly :data:`explore.MEASURES`, each a float32 array of the cell's pairs; the seconds
    a finite float. The records' settings, keys and midpoints are the plan's. SuiteError naming what differs."""
    from repro.runners import plain

    def refuse(why: str):
        raise SuiteError(f"the confined check's measurements {why}: not read (the candidate may have written them)")

    expected = sum(4 * c.pairs * len(decl.arms) * len(explore.MEASURES) for c in decl.cells)
    try:
        tree = plain.read(path, limit=2 * expected + (1 << 20))  # base64 is 4/3 of the bytes
    except plain.Forged as err:
        refuse(f"are no plain data ({err})")
    if not isinstance(tree, dict) or set(tree) != {"cells", "seconds"} or not isinstance(tree["cells"], list):
        refuse("are not a check's")
    if len(tree["cells"]) != len(decl.cells):
        refuse(f"hold {len(tree['cells'])} cell(s), not the plan's {len(decl.cells)}")
    seconds = tree["seconds"]
    if not (isinstance(seconds, float) and np.isfinite(seconds) and seconds >= 0):
        refuse("hold no time")
    records = []
    for c, got in zip(decl.cells, tree["cells"], strict=True):
        if not isinstance(got, dict) or list(got) != list(decl.arms):
            refuse(f"of cell {c.index + 1} name other arms than {', '.join(decl.arms)}")
        arms = {}
        for arm, m in got.items():
            if not isinstance(m, dict) or set(m) != set(explore.MEASURES) or not all(
                    isinstance(a, np.ndarray) and a.dtype == np.float32 and a.shape == (c.pairs,) for a in m.values()):
                refuse(f"of cell {c.index + 1}, {arm} hold other measures than {len(explore.MEASURES)} float32 "
                       f"[{c.pairs}]")
            arms[arm] = {k: [explore._num(x) for x in m[k]] for k in explore.MEASURES}
        records.append({"index": c.index, "task": c.task, "tau": c.tau, "aux_reward": c.aux, "pi_lr": c.pi_lr,
                        "kl_target": c.kl_target, "kl_site": c.kl_site, "midpoint": c.midpoint, "pairs": c.pairs,
                        "keys": [run_key(decl.seed, c, i) for i in range(c.pairs)], "arms": arms})
    return {"cells": records, "seconds": seconds,
            "run_steps": len(decl.arms) * sum(c.pairs for c in decl.cells) * decl.loop["steps"]}
