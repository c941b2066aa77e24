"""Candidate code in a child process under a time limit: a crash or a hang becomes evidence.

The gate compiles the candidate in its own process (a compile error is the
user's error, exit 2), then runs each experiment group of
:mod:`repro.runners.campaign` in a worker process. A worker that dies (a signal:
SIGSEGV from a write into a guard page, SIGABRT, …) or gives no answer within
its limit (of CPU time where derived: :data:`STALL_CAP`) is replaced; the group's scenarios are then re-run one by
one, each in a fresh worker if need be, to name the culprit. Up to
:data:`MAX_CULPRITS` culprits are named per group; the scenarios after them
are left unrun (their properties say so). Every other result is kept, so the
gate still judges what it can.

Host workers are forked from the process that loaded the compiled library
(cheap: no import, no recompilation). CUDA does not survive a fork, so cupy
workers are forked from a server process that imported CuPy and never started
CUDA (multiprocessing's ``forkserver``: no interpreter start or import per
worker) and load the kernel themselves; a device fault (illegal address) kills
that worker with its CUDA context, which is never reused.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import functools
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import multiprocessing.reduction as reduction
import multiprocessing.resource_tracker as mp_resource_tracker
import os
import resource
import signal
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from repro import backends
from repro.backends import get_backend
from repro.backends.base import Backend, CompiledKernel
from repro.core import scratch
from repro.core.contract import Controller, Slots
from repro.core.errors import SuiteError
from repro.core.kernel_source import KernelSource
from repro.core.paths import ROOT
from repro.runners import confine, plain
from repro.runners.campaign import assemble, run_group, scenario_groups
from repro.runners.evidence import GROUPS, Evidence, Fault, Limits
from repro.runners.inference import infer

#: A request's limit: LIMIT_FACTOR × the reference kernel's wall time for it in the same run, at least
#: LIMIT_FLOOR s. The floor covers a fork, a reply's encoding and a scheduler's jitter on a loaded machine; the factor
#: a candidate legitimately slower than the reference (more arithmetic, a debug build) and the load's swings.
LIMIT_FACTOR = 10.0
LIMIT_FLOOR = 0.5
#: Under a derived limit a request's time is the CPU time its worker's main thread used (user + system): a loaded
#: machine (CI: two test workers on two cores) can leave a worker waiting for a CPU or for the disk well past a
#: wall-clock limit, which then reads as a hang (a CI run once failed a candidate that behaves as the fixed kernel,
#: with a stall's signs). Its wall-clock time is still capped at STALL_CAP × the limit: a candidate that hangs
#: without spinning (asleep, blocked) is ended there. Where /proc cannot say (not Linux), the limit is wall-clock.
STALL_CAP = 3.0
#: The whole gathering's budget: BUDGET_FACTOR × the reference's total, at least BUDGET_FLOOR s.
BUDGET_FACTOR = 10.0
BUDGET_FLOOR = 10.0
#: The reference's own limit per request (s): the contract's kernel, trusted; generous for a GPU's first call.
DEFAULT_TIMEOUT = 20.0
#: Culprits named per group before the rest of its scenarios are left unrun (the search ends at a hang).
MAX_CULPRITS = 3
#: The request for :func:`repro.runners.inference.infer`, served beside the experiment groups.
INFERENCE = "inference"
#: The inference's least limit (s). Its time swings by more than LIMIT_FACTOR with what the process it was forked
#: from holds (the reference's read 0.071 s in one CI-like run, 1.24 s in a fresh process; 1.3 s of CPU is a
#: cold candidate's on 2 cores): a candidate whose inference ran past 0.71 s failed as a hang.
INFERENCE_FLOOR = 5.0
#: How long a worker not forked from this process (cupy's) may take to start and load the kernel before its
#: first request.
STARTUP_LIMIT = 120.0
#: How long a reply may take to arrive whole once its first byte has (s), whenever that came: the worker writes a
#: reply at once, but the largest (1.2 MB) passes the pipe in pieces, each waiting for the worker to be scheduled,
#: which a loaded machine delays; a frame cut short is the candidate's writing (it can reach the pipe), a time-out.
REPLY_GRACE = 2.0
#: Clock ticks per second, the unit of /proc's CPU times.
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: The kinds of message a worker sends (:func:`_serve`); the parent reads no other.
_REPLIES = frozenset({"confined", "ready", "fault", "ok", "error"})


@dataclass
class _Answer:
    ok: bool
    value: object = None  # the group's result, or the error text
    fault: tuple[str, str] | None = None  # (kind, detail) when the worker died or hung
    at_load: bool = False  # it died before its first request (loading the kernel)


class _CutShort(plain.Forged):
    """A message that did not arrive whole in the time :meth:`Worker._frame` gives it."""


def _stat(pid: int) -> list[bytes] | None:
    """The fields of the process's main thread's ``stat`` from the state on (field 3 is index 0); None where it
    cannot be read. The main thread's, not the process's: the requests run there, and numpy's BLAS threads,
    spinning while idle, would count several CPU seconds for one of wall-clock time."""
    try:
        with open(f"/proc/{pid}/task/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()  # the name, in parentheses, may hold spaces
    except (OSError, IndexError):
        return None


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds the main thread of process ``pid`` has used; None where /proc cannot say."""
    fields = _stat(pid)
    try:
        return (int(fields[11]) + int(fields[12])) / _TICKS if fields else None
    except (ValueError, IndexError):
        return None


def _state(pid: int) -> str:
    """The process's state letter (R, S, D, T, Z, …), with ``E`` for one already exiting (PF_EXITING); "" unknown."""
    fields = _stat(pid)
    try:
        return "E" if fields and int(fields[6]) & 0x4 else (fields[0].decode() if fields else "")
    except (ValueError, IndexError):
        return ""


def _start_deaf_to_ctrl_c(proc) -> None:
    """Start ``proc`` deaf to SIGINT until :func:`_serve` ignores it (it inherits SIGINT blocked, across a spawn's
    exec too): Ctrl-C is the parent's to answer in one line, and a worker interrupted in its own start-up would
    print a traceback of its own. A Ctrl-C pressed meanwhile, to whichever thread, is kept and answered once
    the worker has started, after killing it (its caller would never hold it); it used to be ignored, and lost:
    the command ran on to its end. A worker started in a window this leaves (a Ctrl-C just after it, before its
    caller holds it) is ended by :func:`_die_with` when the command exits."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        proc.start()
        return
    if getattr(proc, "_start_method", None) in ("spawn", "forkserver"):  # its first start would unblock SIGINT
        mp_resource_tracker.ensure_running()  # inside ours (a forkserver started here inherits SIGINT blocked)
    with _ctrl_c_held() as pressed:
        proc.start()
    if pressed and proc.pid is not None:
        proc.kill()
        proc.join()
    _answer(pressed)


@contextlib.contextmanager
def _ctrl_c_held():
    """SIGINT blocked in this (the main) thread, so that a process started meanwhile inherits it blocked, and
    noted if pressed: the list yielded is non-empty then (:func:`_answer` answers it after)."""
    pressed = []
    previous = signal.signal(signal.SIGINT, lambda *_: pressed.append(True))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield pressed
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one pending for this thread is recorded here
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)  # None: set in C
        if previous is signal.SIG_IGN:  # Ctrl-C was ignored here: nothing to answer
            pressed.clear()


def _answer(pressed: list) -> None:
    """A Ctrl-C noted by :func:`_ctrl_c_held`, raised now to the handler restored, as it would have come."""
    if pressed:
        signal.raise_signal(signal.SIGINT)


def start_server(backend_name: str) -> None:
    """Start now the forkserver that ``backend_name``'s workers come from, where its entry says they do: CuPy's
    import there then overlaps what the command does before its first worker (the compile, the static checks)."""
    if backends.entry(backend_name).start_method == "forkserver":
        _forkserver()


def _forkserver() -> int | None:
    """The forkserver's pid, started if need be: deaf to Ctrl-C in the main thread, as a worker is
    (:func:`_start_deaf_to_ctrl_c`: a Ctrl-C pressed meanwhile is answered after), with the suite's folder on its
    PYTHONPATH (it imports :data:`FORKSERVER_PRELOAD` from a fresh interpreter, whose path is the working folder's
    and PYTHONPATH's; a module it cannot import it skips, silently). Started from the main thread only where it
    can be: its PDEATHSIG (repro.runners.forkserver_start) follows the thread that started it."""
    from multiprocessing import forkserver

    running = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if running is not None and _state(running) not in ("", "Z", "X"):  # each worker's start: nothing to do
        return running
    _context("forkserver")  # its preload set
    if threading.current_thread() is threading.main_thread():
        mp_resource_tracker.ensure_running()
        with _ctrl_c_held() as pressed:
            _start_forkserver(forkserver)
        _answer(pressed)
    else:
        _start_forkserver(forkserver)
    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def _start_forkserver(forkserver) -> None:
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), before) if p)
    try:
        forkserver.ensure_running()
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


#: What a forkserver imports once, before its first fork, in this order: the module that ties the server's life to
#: the command's, then the heavy imports of a device backend's worker (CuPy's own import starts no CUDA). The
#: suite's other modules a worker imports as it starts, in the server's environment (the command's when the server
#: started); it takes the command's environment of the moment before it loads the kernel (:func:`_serve`).
FORKSERVER_PRELOAD = ("repro.runners.forkserver_start", "numpy", "cupy")


@functools.cache
def _context(method: str):
    """The multiprocessing context of ``method``; a forkserver's imports :data:`FORKSERVER_PRELOAD` first."""
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(list(FORKSERVER_PRELOAD))  # a module it cannot import is skipped
    return ctx


def _kill(proc) -> None:
    """SIGKILL ``proc`` unless it has ended: its exit status read first, so that a forkserver's worker the server
    has already reaped (its pid free for another process) is not signalled."""
    if proc.exitcode is None:
        proc.kill()


_PR_SET_PDEATHSIG = 1  # prctl(2)


def _die_with(parent: int) -> None:
    """Linux: this worker is killed when its parent dies (``parent``: its pid; a forkserver's worker's parent is
    the server, which ends when the process that started it does). A candidate hung in its loop never reads the
    end of the pipe, so a gate killed from outside (a CI job's time limit) would leave it spinning a core."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the end of the pipe alone
        return
    prctl.argtypes, prctl.restype = [ctypes.c_int, *[ctypes.c_ulong] * 4], ctypes.c_int
    if prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0 and os.getppid() != parent:
        os._exit(0)  # the parent died before the call above


def _serve(conn, parents_end, parent: int | None, load: Callable[[], CompiledKernel] | None, backend_name: str,
           source: KernelSource, slots: Slots, controller: Controller, seed: int, scratch: str | None = None,
           environ: dict[str, str] | None = None) -> None:
    """Worker loop: load the kernel here, then answer ``(group, only)`` requests until told to stop (``None``).
    ``parents_end``: a forked worker's copy of the parent's end of the pipe, closed here so that the parent's
    death (Ctrl-C, SIGKILL) reads as the end of the pipe; ``parent``: the pid of the process it must die with (see
    :func:`_die_with`): the gate's, or its forkserver's (None: the one that forked it); ``environ``: the gate's
    environment at the worker's start (a forkserver's worker inherits the server's, as it was when it started);
    ``scratch``: the folder the worker is confined to (:mod:`repro.runners.confine`), None: not confined.
    A forked worker is confined before it loads the candidate's library (its load-time code is the
    candidate's); a GPU one (from a forkserver or a spawn) after NVRTC and CUDA's start-up, which run none of
    its code."""
    # Ignore SIGINT, then unblock it (a Ctrl-C pending since the start is discarded).
    with contextlib.suppress(ValueError):  # not the main thread: a worker started from another thread
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _die_with(os.getppid() if parent is None else parent)
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    if parents_end is not None:
        parents_end.close()
    faulthandler.disable()  # a crash here is the candidate's, reported by the parent; no Python dump
    with contextlib.suppress(ValueError, OSError):  # nor a core file: it would land in the user's folder, and a
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # core handler (systemd-coredump) takes seconds a crash
    try:
        # forked: the parent's loader (a cached build, loaded here); else: compile here (NVRTC's cached build)
        if scratch is not None and load is not None:
            confine.confine(conn, Path(scratch), forked=True)
        if scratch is not None and load is None:  # CUDA starts in the compile below, before the sandbox
            confine.keep_caches_in(Path(scratch))
        kernel = load() if load is not None else get_backend(backend_name).compile(source, slots)
        if scratch is not None and load is None:
            confine.confine(conn, Path(scratch), forked=False)
        _say(conn, "ready")
        while True:
            request = plain.loads(conn.recv_bytes())
            if request is None:
                return
            if request == "dump":  # a coverage build: write the gcov counters now
                kernel.dump_coverage()
                _say(conn, "ok")
                continue
            group, only = request
            try:
                # the inference: the rule the kernel behaves as (repro.runners.inference), measured here too
                result = (infer(kernel, controller) if group == INFERENCE
                          else run_group(kernel, controller, group, only, seed))
            except Exception as err:
                if _is_device_fault(err):  # e.g. an illegal address: this CUDA context is done; so is the worker
                    _say(conn, "fault", f"{type(err).__name__}: {err}")
                    return
                raise
            _say(conn, "ok", result)
    except (EOFError, ConnectionResetError, BrokenPipeError, KeyboardInterrupt):  # the parent is gone
        return
    except Exception as err:  # an error in the suite itself, reported to the parent in one line
        with contextlib.suppress(OSError):  # unless the parent is gone meanwhile
            _say(conn, "error", f"{type(err).__name__}: {err}")


def _say(conn, kind: str, value: object = None) -> None:
    """Send the parent one message, ``(kind, value)`` as plain data (:mod:`repro.runners.plain`, never a pickle)."""
    conn.send_bytes(plain.dumps((kind, value)))


def _is_device_fault(err: Exception) -> bool:
    """A CUDA runtime/driver error raised by CuPy (the kernel faulted on the device)."""
    return any(c.__name__ in ("CUDARuntimeError", "CUDADriverError") for c in type(err).__mro__)


class Worker:
    """One child process that loads a kernel and serves experiment requests for it.

    The kernel is loaded in the child only (``load``, or ``backend.compile``), so
    that not even the candidate's load-time code runs in the gate's own process.
    """

    def __init__(self, backend: Backend, source: KernelSource, slots: Slots, controller: Controller, seed: int = 0,
                 load: Callable[[], CompiledKernel] | None = None, startup: float | None = None,
                 scratch: Path | None = None, cpu_time: bool = False):
        self.backend, self.source, self.slots, self.controller, self.seed = backend, source, slots, controller, seed
        # Limits counted in the worker's CPU time, wall time capped at STALL_CAP × the limit (derived limits, where
        # /proc can say); else in wall time (a ``--timeout``, the reference's own runs). What waited past its wall
        # limit: ``waits``.
        self.cpu_time = cpu_time and _cpu_seconds(os.getpid()) is not None
        self.waits: list[str] = []
        self._asked = "load"  # what the worker is answering (shown in ``waits``)
        self._cpu_sent: float | None = None  # its CPU seconds when the request was sent
        # The folder a confined worker may write in: ``scratch`` (kept), else one of its own per process, removed
        # when the process is stopped or discarded (``with``), else when this process exits (repro.core.scratch).
        self.scratch = scratch
        self.watches: dict[int, confine.SyscallWatch] = {}  # pid -> its sandbox's watch
        self.folders: dict[int, str] = {}  # pid -> a scratch folder made for it
        self.startup = STARTUP_LIMIT if startup is None else startup  # s to load the kernel in a fresh worker
        self.load = load or (lambda: backend.compile(source, slots))
        self.proc, self.conn = None, None
        self.method = backends.entry(backend.name).start_method  # the registry's: CUDA does not survive a fork
        # A spawned or forkserver's worker takes a while to start (CUDA, NVRTC): once one has been lost to a fault,
        # a spare is kept starting in the background, so that the next replacement is (nearly) ready.
        self.spare = None
        self.lost = False

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, kind, *_) -> None:
        if kind is None:
            self.stop()
        else:  # Ctrl-C or an error: no polite stop of a worker that may be in a hung kernel
            self.discard()

    def _launch(self):
        """A new worker process and its pipe, not yet waited for."""
        forkable, served = self.method == "fork", self.method == "forkserver"
        server = _forkserver() if served else None  # first: a Ctrl-C answered there leaves nothing made
        ctx = _context(self.method)
        parent, child = ctx.Pipe()
        folder = made = None
        if confine.unavailable() is None:
            folder = str(self.scratch) if self.scratch is not None else str(scratch.make("rlq-worker-"))
            made = folder if self.scratch is None else None
        args = (child, parent if forkable else None, server if served else os.getpid(), self.load if forkable else None,
                self.backend.name, self.source, self.slots, self.controller, self.seed, folder,
                dict(os.environ) if served else None)
        proc = ctx.Process(target=_serve, args=args, daemon=True)
        try:
            _start_deaf_to_ctrl_c(proc)
        except BaseException:  # a Ctrl-C during the start (that worker is killed): no pid to keep the folder under
            if made is not None:
                scratch.remove(made)
            raise
        if made is not None:
            self.folders[proc.pid] = made
        child.close()
        return proc, parent

    def _start(self) -> _Answer | None:
        self.proc, self.conn = self.spare or self._launch()
        self.spare = None
        self._asked = "load"
        self._cpu_sent = _cpu_seconds(self.proc.pid) if self.cpu_time else None
        answer = self._receive(time.monotonic() + self.startup, self.startup)
        if answer is None and self.lost and self.method != "fork":
            self.spare = self._launch()
        return answer

    def ask(self, request, timeout: float) -> _Answer:
        """Send one request; the answer, or the fault that ended the worker (it is then replaced)."""
        return self.send(request) or self.answer(time.monotonic() + timeout, timeout)

    def send(self, request) -> _Answer | None:
        """Start the worker if need be and send ``request`` (None); or the fault that ended it first."""
        if self.proc is None:
            started = self._start()
            if started is not None and not started.ok:
                if started.fault:  # it died loading the kernel: no scenario is to blame
                    started.fault = (started.fault[0], f"{started.fault[1]} while loading the kernel")
                    started.at_load = True
                return started
        try:
            self.conn.send_bytes(plain.dumps(request))
        except (BrokenPipeError, OSError):
            return self._died()
        self._asked = request[0] if isinstance(request, tuple) else str(request)
        self._cpu_sent = _cpu_seconds(self.proc.pid) if self.cpu_time else None  # its own time starts now
        return None

    def answer(self, deadline: float, limit: float) -> _Answer:
        """The answer to the request sent, waited for until ``deadline`` (monotonic s; a time-out says ``limit`` s)."""
        return self._receive(deadline, limit) or _Answer(True)

    def _receive(self, deadline: float, limit: float) -> _Answer | None:
        start = deadline - limit
        cpu_at = self._cpu_sent  # None under a wall-clock limit
        cap = start + STALL_CAP * limit if cpu_at is not None else deadline
        while True:
            left = deadline - time.monotonic()
            try:
                if self.conn.poll(max(0.0, min(left, 0.05))):
                    kind, value = self._reply()
                    if kind == "confined":  # the seccomp listener follows: watched from now on
                        self._watch(reduction.recv_handle(self.conn))
                        continue
                    self._waited(start, limit)
                    if kind == "ready":
                        return None
                    if kind == "fault":  # the worker ends itself after a device fault
                        self.stop(kill=True)
                        return _Answer(False, None, ("crash", value))
                    return _Answer(kind == "ok", value)
            except _CutShort as err:  # no whole answer in time: a hang (its search ends there), of the candidate's making
                self.stop(kill=True)
                return _Answer(False, None, ("timeout", f"{err}: the candidate wrote into the gate's pipe"))
            except plain.Forged as err:  # the candidate wrote into the pipe: nothing it sent is read
                self.stop(kill=True)
                return _Answer(False, None, ("sandbox", f"the candidate tried to write its own reply to the gate ({err})"))
            except (EOFError, OSError):
                return self._died()
            if not self.proc.is_alive():
                return self._died()
            if left <= 0:
                now = time.monotonic()
                used = _cpu_seconds(self.proc.pid) if cpu_at is not None else None
                if used is not None and used - cpu_at < limit and now < cap:  # it has not had its time: it waits
                    deadline = min(cap, now + max(0.01, limit - (used - cpu_at)))
                    continue
                self.stop(kill=True)
                if used is None:  # a wall-clock limit
                    return _Answer(False, None, ("timeout", f"no answer within {limit:g} s"))
                if now < cap:
                    return _Answer(False, None, ("timeout", f"no answer within {limit:.2g} s of CPU time"))
                return _Answer(False, None, ("timeout", f"no answer within {now - start:.2g} s, {STALL_CAP:g}× its "
                                             f"{limit:.2g}-s limit, in which it used {used - cpu_at:.2g} s of CPU"))

    def _waited(self, start: float, limit: float) -> None:
        """Note an answer that came past its wall-clock limit (in a worker whose limit counts CPU time)."""
        wall = time.monotonic() - start
        if self.cpu_time and wall > limit:
            self.waits.append(f"{self._asked}: answered after {wall:.2g} s of wall-clock time against a {limit:.2g}-s "
                              "limit of CPU time")

    def _reply(self) -> tuple[str, object]:
        """The worker's next message, read as plain data (:func:`repro.runners.plain.loads`: nothing is unpickled,
        the candidate's code can write to this pipe); :class:`~repro.runners.plain.Forged` for one the worker never
        sends (a second ``confined``: its listener is handed over once, before the candidate's code runs)."""
        reply = plain.loads(self._frame())
        if not (isinstance(reply, tuple) and len(reply) == 2 and reply[0] in _REPLIES):
            raise plain.Forged(f"a {type(reply).__name__} instead of a reply")
        if reply[0] == "confined" and self.proc.pid in self.watches:
            raise plain.Forged("a second 'confined'")
        return reply

    def _frame(self) -> bytes:
        """One message as ``Connection.send_bytes`` frames it (a 4-byte big-endian length, or -1 and 8 bytes), read
        within :data:`REPLY_GRACE` s of its first byte, whatever is left of the request's ``deadline`` (a reply that
        began just before it is not cut short): ``Connection.recv_bytes`` waits without a limit for a frame cut
        short."""
        fd, until = self.conn.fileno(), time.monotonic() + REPLY_GRACE

        def exactly(n: int) -> bytes:
            parts, got = [], 0
            while got < n:
                left = until - time.monotonic()
                # the pipe's own poll (as _receive waits): select refuses a descriptor past FD_SETSIZE (1024)
                if left <= 0 or not self.conn.poll(left):
                    raise _CutShort(f"a message cut short ({got} of {n} bytes)")
                chunk = os.read(fd, min(n - got, 1 << 20))
                if not chunk:
                    raise EOFError
                parts.append(chunk)
                got += len(chunk)
            return b"".join(parts)

        (size,) = struct.unpack("!i", exactly(4))
        if size == -1:
            (size,) = struct.unpack("!Q", exactly(8))
        if size < 0 or size > plain.REPLY_MAX:
            raise plain.Forged(f"a message of {size} bytes")
        return exactly(size)

    def _watch(self, fd: int) -> None:
        folder = self.scratch if self.scratch is not None else self.folders[self.proc.pid]
        self.watches[self.proc.pid] = confine.SyscallWatch(fd, self.proc.pid, Path(folder))

    def _ended(self, seconds: float) -> bool:
        """Whether the worker has ended, waiting up to ``seconds`` for it. Never longer: ``Process.join`` with a
        timeout waits for a pipe the sandboxed worker closes early, then for the process without a limit."""
        end = time.monotonic() + seconds
        while self.proc.exitcode is None:  # a WNOHANG poll
            if time.monotonic() >= end:
                return False
            time.sleep(0.002)
        return True

    def _died(self) -> _Answer:
        self.lost = True
        # Its pipe closes as it ends; one that lives on, not exiting, closed it itself (the candidate): it goes now.
        still_running = not self._ended(0.1) and not (_state(self.proc.pid) in ("E", "Z", "X", "") and self._ended(5.0))
        if still_running:
            _kill(self.proc)
            self.proc.join()
        code = self.proc.exitcode
        watch = self.watches.get(self.proc.pid)
        self._reset()
        if watch is not None and watch.attempt is not None:  # the sandbox ended it
            return _Answer(False, None, ("sandbox", watch.attempt))
        if still_running:
            return _Answer(False, None, ("crash", "it closed its pipe to the gate and lived on"))
        if code is not None and code < 0:
            try:
                detail = signal.Signals(-code).name
            except ValueError:  # a signal Python has no name for
                detail = f"signal {-code}"
        else:
            detail = f"exit status {code}"
        return _Answer(False, None, ("crash", detail))

    def _reset(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.proc is not None:
            self._forget(self.proc.pid)
        self.proc, self.conn = None, None

    def _forget(self, pid: int) -> None:
        """Drop a gone worker's watch and remove the scratch folder made for it."""
        self.watches.pop(pid, None)
        folder = self.folders.pop(pid, None)
        if folder is not None:
            scratch.remove(folder)

    def discard(self) -> None:
        """End the worker and its spare at once (SIGKILL): neither is wanted any more."""
        self._drop_spare()
        self.stop(kill=True)

    def _drop_spare(self) -> None:
        if self.spare is not None:
            proc, conn = self.spare
            self.spare = None
            _kill(proc)
            proc.join()
            conn.close()
            self._forget(proc.pid)

    def stop(self, kill: bool = False) -> None:
        """End the worker (politely, or by SIGKILL for a hung one); at the end (not killed), its spare too."""
        if not kill:
            self._drop_spare()
        if self.proc is None:
            return
        self.lost |= kill
        if kill or _state(self.proc.pid) in ("T", "t"):  # a stopped worker would not read its stop
            _kill(self.proc)
        else:
            with contextlib.suppress(BrokenPipeError, OSError):
                self.conn.send_bytes(plain.dumps(None))
        if not self._ended(5.0):
            _kill(self.proc)
            self.proc.join()
        self._reset()


class SuiteFailure(SuiteError):
    """The suite itself failed inside a worker (not the candidate): a bug to report, in one line."""


def derive_limits(reference: dict[str, float]) -> dict[str, float]:
    """Each request's limit (s): LIMIT_FACTOR × the reference kernel's wall time for it, at least LIMIT_FLOOR (the
    inference: at least INFERENCE_FLOOR)."""
    return {name: max(INFERENCE_FLOOR if name == INFERENCE else LIMIT_FLOOR, LIMIT_FACTOR * seconds)
            for name, seconds in reference.items()}


def reference_limits(reference: dict[str, float], budget: float | None) -> tuple[dict[str, float], Limits]:
    """:func:`derive_limits` of ``reference``, and the groups' limits as evidence (``budget``: the gathering's)."""
    per = derive_limits(reference)
    return per, Limits({g: per[g] for g in GROUPS}, budget=budget, reference=dict(reference), factor=LIMIT_FACTOR,
                       floor=LIMIT_FLOOR)


def derive_budget(reference: dict[str, float]) -> float:
    """The whole gathering's budget (s): :data:`BUDGET_FACTOR` × the reference's total, at least :data:`BUDGET_FLOOR`."""
    return max(BUDGET_FLOOR, BUDGET_FACTOR * sum(reference.values()))


class Clock:
    """A deadline shared by every request of one gathering (``budget`` None: none)."""

    def __init__(self, budget: float | None):
        self.budget = budget
        self.deadline = None if budget is None else time.monotonic() + budget

    def limit(self, wanted: float) -> float:
        """``wanted``, cut to what the budget has left."""
        left = float("inf") if self.deadline is None else self.deadline - time.monotonic()
        return max(0.0, min(wanted, left))

    def over(self, group: str) -> Fault:
        return Fault(group, "", "budget", f"not run: the budget of {self.budget:.3g} s was spent")


def time_reference(backend: Backend, source: KernelSource, slots: Slots, controller: Controller, seed: int = 0,
                   inference: bool = False, load: Callable[[], CompiledKernel] | None = None) -> tuple[dict[str, float], dict]:
    """The reference kernel's wall time (s) per request in a worker like the candidate's (``startup``: loading
    it there), and its results. The reference is the contract's own kernel: a fault in it is the suite's."""
    if load is None:
        # built here, not in the worker: a confined worker may not write the build cache (a fresh cache made every
        # candidate's gate exit 2, "the reference kernel … did not load": the sandbox refused the cache's lock file);
        # a GPU worker then loads the kept build instead of compiling it again
        backend.check_compiles(source, slots)
    seconds, results = {}, {}
    with Worker(backend, source, slots, controller, seed, load=load) as worker:
        start = time.monotonic()
        started = worker._start()
        if started is not None:
            raise SuiteFailure(f"the reference kernel {source.origin} did not load: {started.fault or started.value}")
        seconds["startup"] = time.monotonic() - start
        requests = (*GROUPS, INFERENCE) if inference else GROUPS
        for request in requests:
            start = time.monotonic()
            answer = worker.ask((request, None), DEFAULT_TIMEOUT)
            seconds[request] = time.monotonic() - start
            if not answer.ok:
                raise SuiteFailure(f"the reference kernel {source.origin} failed in {request}: "
                                   f"{answer.fault or answer.value}")
            results[request] = answer.value
    return seconds, results


class GroupRunner:
    """Runs experiment groups in ``worker`` under their limits, one at a time, keeping what it learnt.

    A group that fails is re-run scenario by scenario to name up to :data:`MAX_CULPRITS` culprits; the search
    ends at the first that hangs, and the rest of the group runs as one request (a hang there ends the group).
    A scenario that hung is not run again in a later group (same name, same inputs). Once the candidate has
    hung, a later group that hangs ends at once, without the scenario-by-scenario search, and the groups left
    start side by side (:meth:`ask_together`).
    """

    def __init__(self, worker: Worker, controller: Controller, limits: dict[str, float], clock: Clock, seed: int = 0,
                 narrow: bool = True):
        self.worker, self.limits, self.clock, self.narrow = worker, limits, clock, narrow
        self.groups_of = scenario_groups(controller, seed)
        self.not_rerun: dict[str, str] = {}  # scenario name -> why it is not run again
        self.hung = False

    def _first(self, group: str) -> tuple[tuple, list[str], tuple[int, ...], list[tuple[str, str, str]]]:
        """A group's first request (its scenarios not known to hang), their names, indices and the skipped."""
        names = [sc.name for sc in self.groups_of[group][0]] if group in self.groups_of else []
        todo = tuple(i for i, n in enumerate(names) if n not in self.not_rerun)
        skipped = [(group, n, self.not_rerun[n]) for n in names if n in self.not_rerun]
        return (group, None if len(todo) == len(names) else todo), names, todo, skipped

    def ask_together(self, groups: list[str]) -> dict[str, tuple[tuple, _Answer]]:
        """The first request of each group at once, each in a forked worker of its own under its own limit:
        group → (:meth:`_first`'s answer as sent, the answer). Once the candidate has hung, the groups left
        then cost one limit in all rather than one each. A group past the budget when its turn to be sent
        comes gets none (:meth:`run` says so). GPU workers are not started side by side: their
        start-ups compete (a trial: the gate on trap.cu 13.7 s against 8.6 s)."""
        if self.worker.method != "fork":
            return {}
        workers, pending, answers, sent = {}, {}, {}, {}
        try:
            for group in groups:
                if self.clock.limit(self.limits[group]) > 0:
                    w = self.worker
                    # wall-clock limits: the candidate is known to hang, and side by side they share the CPUs
                    workers[group] = Worker(w.backend, w.source, w.slots, w.controller, w.seed, w.load, w.startup, w.scratch)
                    workers[group].spare = workers[group]._launch()  # every worker starts now, side by side
            for group, worker in workers.items():
                limit = self.clock.limit(self.limits[group])
                if limit <= 0:  # the budget ran out while the workers started: run() says so
                    continue
                sent[group] = self._first(group)
                fault = worker.send(sent[group][0])
                if fault is not None:
                    answers[group] = fault
                else:
                    pending[group] = (time.monotonic() + limit, limit)
            while pending:  # each answer as it comes; a group past its deadline is a time-out
                ready = mp_connection.wait([workers[g].conn for g in pending],
                                           timeout=max(0.0, min(d for d, _ in pending.values()) - time.monotonic()))
                now = time.monotonic()
                done = [g for g, (deadline, _) in pending.items() if deadline <= now or workers[g].conn in ready]
                for group in done:
                    answers[group] = workers[group].answer(*pending.pop(group))
            return {group: (sent[group], answers[group]) for group in answers}
        finally:
            for worker in workers.values():
                worker.discard()

    def run(self, group: str, sent: tuple[tuple, _Answer] | None = None
            ) -> tuple[dict, list[Fault], list[tuple[str, str, str]]]:
        """(``{group: result}`` or ``{}``, faults, skipped scenarios) of one group, or of a request outside the
        groups (the inference: run as one); ``sent``: its first request and answer, where :meth:`ask_together`
        sent it."""
        clock, worker = self.clock, self.worker
        first = self._first(group)
        # A request sent side by side counts only where it is still the group's own (a search since may have
        # learnt of a hang among its scenarios: then the group runs in turn, as it would have).
        answer = sent[1] if sent is not None and sent[0] == first else None
        limit = clock.limit(self.limits[group])
        if answer is None and limit <= 0:
            return {}, [clock.over(group)], []
        request, names, todo, skipped = first
        answer = answer or worker.ask(request, limit)
        if answer.ok:
            whole = request[1] is None
            return {group: answer.value if whole else dict(zip(todo, answer.value, strict=True))}, [], skipped
        if answer.fault is None:
            raise SuiteFailure(f"{group}: {answer.value}")
        timed_out = answer.fault[0] == "timeout"
        if not self.narrow or group not in self.groups_of or answer.at_load or (timed_out and self.hung):
            # one experiment (onsets, threads, the inference), no scenario ran at all, or a hang once more: it ends here
            self.hung |= timed_out
            return {}, [Fault(group, "", *answer.fault)], skipped
        self.hung |= timed_out
        partial, faults, culprits = {}, [], 0
        pending = list(todo)
        while pending:
            i = pending.pop(0)
            one_limit = clock.limit(self.limits[group])
            if one_limit <= 0:
                faults.append(clock.over(group))
                break
            one = worker.ask((group, i), one_limit)
            if one.ok:
                partial[i] = one.value[0]
                continue
            if one.fault is None:
                raise SuiteFailure(f"{group}/{names[i]}: {one.value}")
            faults.append(Fault(group, names[i], *one.fault))
            culprits += 1
            if culprits >= MAX_CULPRITS:
                break
            if one.fault[0] != "timeout":  # a crash costs nothing to meet again: search on
                continue
            # A hang: the search ends here; the rest of the group runs as one request, and if that hangs
            # too, the group ends (the candidate hangs on more than one input).
            self.not_rerun[names[i]] = f"it hung in {group}"
            rest = tuple(pending)
            pending = []
            if not rest or clock.limit(self.limits[group]) <= 0:
                break
            batch = worker.ask((group, rest), clock.limit(self.limits[group]))
            if batch.ok:
                partial |= dict(zip(rest, batch.value, strict=True))
            elif batch.fault is None:
                raise SuiteFailure(f"{group}: {batch.value}")
            elif batch.fault[0] == "timeout":
                faults.append(Fault(group, "", *batch.fault))
            else:  # a crash among the rest: search it scenario by scenario
                pending = list(rest)
        if not culprits:  # the group failed as a whole only (e.g. it ran out of time in total)
            faults.insert(0, Fault(group, "", *answer.fault))
        return {group: partial}, faults, skipped


def group_summary(group: str, ran: bool, faults: list[Fault], limit: float) -> str:
    """One progress line: the group, how it ended, its limit."""
    shown = [f"{f.scenario}: {f.kind}" if f.scenario else f.kind for f in faults[:3]]
    state = "ran" if ran and not faults else ", ".join(shown) + (" …" if len(faults) > 3 else "") or "not run"
    return f"{group}: {state} (limit {limit:.2g} s)"


def collect_isolated(backend: Backend, source: KernelSource, slots: Slots, controller: Controller,
                     timeout: float | None = None, seed: int = 0, inference: bool = False,
                     reference: dict[str, float] | None = None, clock: Clock | None = None,
                     progress: Callable[[str], None] | None = None) -> Evidence:
    """:func:`repro.runners.campaign.collect`, with every group run in a worker under a limit (see the module doc).

    Limits: ``timeout`` s per group when given (the ``--timeout`` override), else derived from
    ``reference`` (the reference kernel's seconds per group: :func:`time_reference`, :func:`derive_limits`).
    ``clock`` holds the whole gathering's budget. Compile first (``backend.check_compiles``): a compile
    error is the caller's to report. ``inference`` also measures the rule the kernel behaves as
    (``Evidence.behaviour``) in the worker; a crash or hang there is one more fault.
    """
    if timeout is not None:
        per = dict.fromkeys((*GROUPS, INFERENCE), timeout)
        limits = Limits(dict.fromkeys(GROUPS, timeout), fixed=timeout)
    elif reference is None:
        raise ValueError("collect_isolated needs a fixed timeout or the reference's times")
    else:
        per, limits = reference_limits(reference, clock.budget if clock else None)
    clock = clock or Clock(None)
    say = progress or (lambda _line: None)
    results, faults, skipped, behaviour = {}, [], [], None
    with Worker(backend, source, slots, controller, seed, startup=per.get("startup"), cpu_time=timeout is None) as worker:
        runner = GroupRunner(worker, controller, per, clock, seed)
        together: dict[str, tuple[tuple, _Answer]] = {}
        for i, group in enumerate(GROUPS):
            if runner.hung and not together and i < len(GROUPS) - 1:
                together = runner.ask_together(list(GROUPS[i:]))  # it hangs: the rest side by side
            got, bad, skip = runner.run(group, together.get(group))
            results |= got
            faults += bad
            skipped += skip
            say(group_summary(group, bool(got), bad, per[group]))
        whole = [f.group for f in faults if f.kind == "timeout" and not f.scenario]
        if inference and whole:  # it hangs on ordinary inputs, which are what the inference feeds it
            skipped.append((INFERENCE, "", f"the candidate hung in the whole {whole[0]} group"))
            say(f"{INFERENCE}: not run (the candidate hung in the whole {whole[0]} group)")
        elif inference:
            got, bad, _ = runner.run(INFERENCE)  # not a group: one request, no culprit search
            behaviour = got.get(INFERENCE)
            faults += bad
            say(group_summary(INFERENCE, behaviour is not None, bad, per[INFERENCE]))
    return assemble(controller, slots, results, faults, seed, behaviour=behaviour,
                    limits=replace(limits, waits=tuple(worker.waits), stall_cap=STALL_CAP if worker.cpu_time else 0.0),
                    skipped=tuple(skipped))
