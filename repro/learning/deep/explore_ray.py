"""The fourth study's search (:mod:`repro.learning.deep.explore`) mapped over a Ray cluster: shard ``I/N`` of the
search is one Ray task, on one GPU (backend cupy) or one CPU (backend host) wherever the cluster has one free, and
the driver joins the JSONs the tasks return with :func:`~repro.learning.deep.explore.merge` — the unsharded
search's JSON, byte for byte, since a run's results depend on its key alone, not on the chunk, shard or process it
ran in. The merge refuses shards whose backend, device or torch differ (a device's floating point is its own).

Ray is optional (the ``ray`` dependency group) and imported only here, only when asked for. The cluster: the one
this process has already joined (a notebook, a test), else ``ray.init(address)`` — ``None`` is Ray's own choice
(``$RAY_ADDRESS``, else a new local Ray on this machine's cores and GPUs), ``"local"`` always a new local one; a Ray
this module started is shut down when the search ends, however it ends. The workers import this checkout by its
path (Ray puts the driver's folder on their ``sys.path``): every node of a cluster needs it at the same path with
the ``ray`` group installed, or the command runs as a Ray job (``ray job submit --working-dir . -- python -m
analysis study --explore-4 --ray N …``), which ships the folder to the cluster.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time

from repro.core.errors import SuiteError
from repro.learning.deep import explore

#: Seconds between the driver's checks for finished shards (a stop is answered within it).
POLL_S = 0.5


def import_ray():
    """The ``ray`` module, or the one-line :class:`SuiteError` that says how to install it."""
    try:
        import ray
    except ImportError:
        raise SuiteError("--ray needs Ray: pip install --group ray") from None
    return ray


def shard_task(decl: explore.Explore, backend_name: str, shard: tuple[int, int], chunk_rows: int, eager: bool,
               until: float | None) -> dict:
    """One Ray task: shard ``(I, N)`` of the search in this worker process. Returns ``{"part", "seconds",
    "run_steps"}``: the JSON a ``--shard I/N`` run writes (the header as this worker's backend, device and torch
    see it), the loops' seconds and their run-steps. ``until``: the wall-clock time (``time.time()``, s) after which
    no further chunk starts, None for none. Progress lines on stderr (Ray forwards them to the driver)."""
    import torch

    from repro.backends import get_backend
    from repro.core.contract import CONTRACTS, load
    from repro.learning.deep.loop import device_for

    label = f"shard {shard[0]}/{shard[1]}"
    say = lambda line: print(f"{label}: {line}", file=sys.stderr, flush=True)  # after Ray's (task pid=…)
    backend = get_backend(backend_name)
    device = device_for(backend)  # cuda: the one GPU Ray gave this task (CUDA_VISIBLE_DEVICES)
    deadline = None if until is None else time.perf_counter() + (until - time.time())
    # the search's arms are the tracked contract's kernels, as in an unsharded run (study --explore-4)
    raw = explore.run_search(decl, backend, load(CONTRACTS), device=device, graph=device == "cuda" and not eager,
                             chunk_rows=chunk_rows, shard=shard, progress=say, deadline=deadline)
    head = explore.header(decl, backend.name, backend.describe(), torch.__version__)
    return {"part": {**head, "shard": f"{shard[0]}/{shard[1]}", "groups": raw["groups"], "not_run": raw["not_run"]},
            "seconds": raw["seconds"], "run_steps": raw["run_steps"]}


def search(decl: explore.Explore, backend_name: str, shards: int, chunk_rows: int = 16384, eager: bool = False,
           until: float | None = None, address: str | None = None, progress=None, on_shard=None) -> dict:
    """The search as ``shards`` Ray tasks (:func:`shard_task`), merged: ``{"result": the search's JSON (as
    :func:`explore.merge` joins it), "seconds": the loops' seconds summed over the shards, "run_steps": theirs}``.

    ``on_shard(result)`` after each shard arrives, with the shards so far merged (the others' groups under
    ``not_run``): a run cut off keeps them. A shard that fails ends the search in one :class:`SuiteError` line; on
    any way out before the end (that, Ctrl-C) the shards still running are cancelled, their processes ended."""
    ray = import_ray()
    say = progress or (lambda line: None)
    started = not ray.is_initialized()
    pending: list = []
    try:
        if started:
            _init(ray, address)
        gpu = backend_name == "cupy"
        unit = "GPU" if gpu else "CPU"
        have = int(ray.cluster_resources().get(unit, 0))
        if not have:  # the tasks would wait for ever
            raise SuiteError(f"--ray: the Ray cluster has no {unit} (backend {backend_name} runs a shard on one)")
        task = ray.remote(num_cpus=1, num_gpus=1 if gpu else 0, max_calls=1)(shard_task)  # a fresh process a shard
        refs = {task.remote(decl, backend_name, (i, shards), chunk_rows, eager, until): i for i in range(1, shards + 1)}
        pending = list(refs)
        say(f"ray: {shards} shard(s) as tasks of one {unit} each, on a cluster of {have} {unit}(s)")
        parts, seconds, run_steps = {}, 0.0, 0
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=POLL_S)
            for ref in done:
                i = refs[ref]
                got = _get(ray, ref, f"shard {i}/{shards}")
                parts[i] = got["part"]
                seconds += got["seconds"]
                run_steps += got["run_steps"]
                result = explore.merge([parts[k] for k in sorted(parts)])
                say(f"ray: shard {i}/{shards} done: {len(got['part']['groups'])} group(s), {got['seconds']:.1f} s of "
                    f"loops ({len(parts)} of {shards} shards)")
                if on_shard:
                    on_shard(result)
        return {"result": result, "seconds": seconds, "run_steps": run_steps}
    except BaseException:
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()


def _init(ray, address: str | None) -> None:
    """Start or join the cluster quietly (Ray's own warnings at ERROR only; worker lines without colour codes unless
    ``$RAY_COLOR_PREFIX`` asks), keeping this process's SIGTERM handler (``ray.init`` replaces it with an exit)."""
    os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    main = threading.current_thread() is threading.main_thread()
    term = signal.getsignal(signal.SIGTERM) if main else None
    try:
        ray.init(address=address, include_dashboard=False, logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise SuiteError(f"--ray: cannot start or join a Ray cluster ({str(err).splitlines()[0] if str(err) else err!r})") \
            from None
    finally:
        if term is not None:
            signal.signal(signal.SIGTERM, term)


def _get(ray, ref, what: str) -> dict:
    """The task's result; its failure as one :class:`SuiteError` line (a worker's SuiteError keeps its words)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as err:
        cause = getattr(err, "cause", None) or err
        words = str(cause) if isinstance(cause, SuiteError) else f"{type(cause).__name__}: {cause}"
        raise SuiteError(f"{what}: {words.strip().splitlines()[0] if words.strip() else type(cause).__name__}") from None
    except ray.exceptions.RayError as err:  # the worker died (out of memory, killed), the task was cancelled
        first = str(err).strip().splitlines()
        raise SuiteError(f"{what}: {type(err).__name__}{': ' + first[0] if first else ''}") from None
