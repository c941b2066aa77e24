"""Candidate code in a child process under a wall-clock limit: a crash or a hang becomes evidence.

The gate compiles the candidate in its own process (a compile error is the
user's error, exit 2), then runs each experiment group of
:mod:`repro.runners.campaign` in a worker process. A worker that dies (a signal:
SIGSEGV from a write into a guard page, SIGABRT, …) or gives no answer within
``timeout`` seconds is replaced; the group's scenarios are then re-run one by
one, each in a fresh worker if need be, to name the culprit. Up to
:data:`MAX_CULPRITS` culprits are named per group; the scenarios after them
are left unrun (their properties say so). Every other result is kept, so the
gate still judges what it can.

Host workers are forked from the process that loaded the compiled library
(cheap: no import, no recompilation). CUDA does not survive a fork, so cupy
workers are spawned and compile the kernel themselves; a device fault
(illegal address) kills that worker with its CUDA context, which is never reused.
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing as mp
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from repro.backends.base import Backend, CompiledKernel
from repro.core.contract import Controller, Slots
from repro.core.errors import SuiteError
from repro.core.kernel_source import KernelSource
from repro.runners.campaign import GROUPS, Evidence, Fault, assemble, run_group, scenario_groups

#: Default wall-clock limit (s) for one experiment group: generous next to what a conforming kernel needs
#: (the gate prints its total time), since a GPU worker's first group also pays for CuPy's import and NVRTC.
DEFAULT_TIMEOUT = 20.0
#: Culprits named per group before the rest of its scenarios are left unrun.
MAX_CULPRITS = 3
#: The request for :func:`repro.runners.inference.infer`, served beside the experiment groups.
INFERENCE = "inference"
#: How long a spawned (cupy) worker may take to import and compile before its first request.
STARTUP_LIMIT = 120.0


@dataclass
class _Answer:
    ok: bool
    value: object = None  # the group's result, or the error text
    fault: tuple[str, str] | None = None  # (kind, detail) when the worker died or hung
    at_load: bool = False  # it died before its first request (loading the kernel)


def _serve(conn, load: Callable[[], CompiledKernel] | None, backend_name: str, source: KernelSource, slots: Slots,
           controller: Controller, seed: int) -> None:
    """Worker loop: load the kernel here, then answer ``(group, only)`` requests until told to stop (``None``)."""
    faulthandler.disable()  # a crash here is the candidate's, reported by the parent; no Python dump
    try:
        if load is not None:  # forked: the parent's loader (a cached build, loaded here)
            kernel = load()
        else:  # spawned: compile here
            from repro.backends import get_backend

            kernel = get_backend(backend_name).compile(source, slots)
        conn.send(("ready", None))
        while True:
            request = conn.recv()
            if request is None:
                return
            if request == "dump":  # a coverage build: write the gcov counters now
                kernel.dump_coverage()
                conn.send(("ok", None))
                continue
            group, only = request
            try:
                if group == INFERENCE:  # the rule the kernel behaves as (repro.runners.inference), measured here too
                    from repro.runners.inference import infer

                    result = infer(kernel, controller)
                else:
                    result = run_group(kernel, controller, group, only, seed)
            except Exception as err:
                if _is_device_fault(err):  # e.g. an illegal address: this CUDA context is done; so is the worker
                    conn.send(("fault", f"{type(err).__name__}: {err}"))
                    return
                raise
            conn.send(("ok", result))
    except (EOFError, KeyboardInterrupt):
        return
    except Exception as err:  # an error in the suite itself, reported to the parent in one line
        conn.send(("error", f"{type(err).__name__}: {err}"))


def _is_device_fault(err: Exception) -> bool:
    """A CUDA runtime/driver error raised by CuPy (the kernel faulted on the device)."""
    return any(c.__name__ in ("CUDARuntimeError", "CUDADriverError") for c in type(err).__mro__)


class Worker:
    """One child process that loads a kernel and serves experiment requests for it.

    The kernel is loaded in the child only (``load``, or ``backend.compile``), so
    that not even the candidate's load-time code runs in the gate's own process.
    """

    def __init__(self, backend: Backend, source: KernelSource, slots: Slots, controller: Controller, seed: int = 0,
                 load: Callable[[], CompiledKernel] | None = None):
        self.backend, self.source, self.slots, self.controller, self.seed = backend, source, slots, controller, seed
        self.load = load or (lambda: backend.compile(source, slots))
        self.proc = None
        self.conn = None
        self.method = "fork" if backend.name == "host" else "spawn"  # CUDA does not survive a fork

    def _start(self) -> _Answer | None:
        forkable = self.method == "fork"
        ctx = mp.get_context(self.method)
        parent, child = ctx.Pipe()
        args = (child, self.load if forkable else None, self.backend.name, self.source, self.slots,
                self.controller, self.seed)
        self.proc = ctx.Process(target=_serve, args=args, daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        return self._receive(STARTUP_LIMIT)

    def ask(self, request, timeout: float) -> _Answer:
        """Send one request; the answer, or the fault that ended the worker (it is then replaced)."""
        if self.proc is None:
            started = self._start()
            if started is not None and not started.ok:
                if started.fault:  # it died loading the kernel: no scenario is to blame
                    started.fault = (started.fault[0], f"{started.fault[1]} while loading the kernel")
                    started.at_load = True
                return started
        try:
            self.conn.send(request)
        except (BrokenPipeError, OSError):
            return self._died()
        return self._receive(timeout) or _Answer(True)

    def _receive(self, timeout: float) -> _Answer | None:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                if self.conn.poll(max(0.0, min(left, 0.05))):
                    kind, value = self.conn.recv()
                    if kind == "ready":
                        return None
                    if kind == "fault":  # the worker ends itself after a device fault
                        self.stop(kill=True)
                        return _Answer(False, None, ("crash", value))
                    return _Answer(kind == "ok", value)
            except (EOFError, OSError):
                return self._died()
            if not self.proc.is_alive():
                return self._died()
            if left <= 0:
                self.stop(kill=True)
                return _Answer(False, None, ("timeout", f"no answer within {timeout:g} s"))

    def _died(self) -> _Answer:
        self.proc.join(1.0)
        code = self.proc.exitcode
        self._reset()
        if code is not None and code < 0:
            try:
                detail = signal.Signals(-code).name
            except ValueError:
                detail = f"signal {-code}"
        else:
            detail = f"exit status {code}"
        return _Answer(False, None, ("crash", detail))

    def _reset(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.proc, self.conn = None, None

    def stop(self, kill: bool = False) -> None:
        """End the worker (politely, or by SIGKILL for a hung one)."""
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        else:
            with contextlib.suppress(BrokenPipeError, OSError):
                self.conn.send(None)
        self.proc.join(5.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self._reset()


class SuiteFailure(SuiteError):
    """The suite itself failed inside a worker (not the candidate): a bug to report, in one line."""


def _run_groups(worker: Worker, controller: Controller, groups, timeout: float, seed: int):
    results, faults = {}, []
    sizes = {name: len(sc) for name, (sc, _) in scenario_groups(controller, seed).items()}
    for group in groups:
        answer = worker.ask((group, None), timeout)
        if answer.ok:
            results[group] = answer.value
            continue
        if answer.fault is None:
            raise SuiteFailure(f"{group}: {answer.value}")
        if group not in sizes or answer.at_load:  # one experiment (onsets, threads), or no scenario ran at all
            faults.append(Fault(group, "", *answer.fault))
            continue
        partial, culprits = {}, 0
        names = [sc.name for sc in scenario_groups(controller, seed)[group][0]]
        for i in range(sizes[group]):
            one = worker.ask((group, i), timeout)
            if one.ok:
                partial[i] = one.value[0]
            elif one.fault is None:
                raise SuiteFailure(f"{group}/{names[i]}: {one.value}")
            else:
                faults.append(Fault(group, names[i], *one.fault))
                culprits += 1
                if culprits >= MAX_CULPRITS:
                    break
        if not culprits:  # the group failed as a whole only (e.g. it ran out of time in total)
            faults.append(Fault(group, "", *answer.fault))
        results[group] = partial
    return results, faults


def collect_isolated(backend: Backend, source: KernelSource, slots: Slots, controller: Controller,
                     timeout: float = DEFAULT_TIMEOUT, seed: int = 0, inference: bool = False) -> Evidence:
    """:func:`repro.runners.campaign.collect`, with every group run in a worker under ``timeout`` s (see the module doc).

    Compile first (``backend.check_compiles``): a compile error is the caller's to report. ``inference``
    also measures the rule the kernel behaves as (``Evidence.behaviour``) in the worker; a crash or hang
    there is one more fault.
    """
    worker = Worker(backend, source, slots, controller, seed)
    behaviour = None
    try:
        results, faults = _run_groups(worker, controller, GROUPS, timeout, seed)
        if inference:
            answer = worker.ask((INFERENCE, None), timeout)
            if answer.ok:
                behaviour = answer.value
            elif answer.fault is not None:
                faults.append(Fault(INFERENCE, "", *answer.fault))
            else:
                raise SuiteFailure(f"{INFERENCE}: {answer.value}")
    finally:
        worker.stop()
    return replace(assemble(controller, slots, results, faults, timeout, seed), behaviour=behaviour)
