"""The one error policy of every command line: exit 0, 1 or 2, and every failure one line on stderr.

Exit 0: the command did its work (the gate: every property holds). Exit 1: only the command's own verdict
(the gate: a property is violated; the benchmark: a mode regressed). Exit 2: anything that stopped it, as
``NAME: error: …`` in one line — bad input (:class:`SuiteError`), Ctrl-C or SIGTERM (at any moment while the
process runs, the command's imports included: never a verdict after it, and no temporary folder left behind), a
closed or full stdout/stderr, a path too long, a folder or forbidden where a file was meant, and any unexpected
exception ("internal error"); a reader that closes stdout early (``| head``) ends it with exit 2 and no line.
``--debug`` (accepted by every command) adds the traceback. A command's ``main`` holds only what is its own
(what it writes for an error, its verdict).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import os
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from repro.core.errors import SuiteError

#: errno values that mean "the output could not be delivered" when no file name comes with them.
_LOST = {errno.EPIPE, errno.ENOSPC, errno.EBADF, errno.EIO, errno.EDQUOT, errno.EFBIG}


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, ``NAME: error: … (see --help)``, and exit 2; every
    command gets ``--debug``."""

    def __init__(self, name: str, **kwargs):
        super().__init__(prog=f"python -m analysis {name}", **kwargs)
        self.name = name
        self.add_argument("--debug", action="store_true", help="show the traceback of an internal error")

    def add_contracts(self) -> None:
        """``--contracts FILE``: judge against a contract file of one's own (the tracked one left as it is). The
        parsed ``args.contracts`` is the file the command loads: FILE, else kernels/contracts.toml."""
        self.add_argument("--contracts", type=path, metavar="FILE",
                          help="contract file to judge against instead of kernels/contracts.toml (paths inside it "
                               "are relative to the repository; base = \"kernels/contracts.toml\" adds to that one)")

    def add_require_sandbox(self, help: str = "with --kernel: exit 2 where the candidate cannot be confined here "
                                              "(docs/DESIGN.md)") -> None:
        """``--require-sandbox``: no sandbox here is an error (exit 2), not a line beside the run
        (:func:`analysis.cli.confined.check`)."""
        self.add_argument("--require-sandbox", action="store_true", help=help)

    def parse_args(self, args=None, namespace=None):
        parsed = super().parse_args(args, namespace)
        if hasattr(parsed, "contracts") and parsed.contracts is None:  # no --contracts: the tracked file
            from repro.core.contract import CONTRACTS  # lazily: --help costs no import

            parsed.contracts = CONTRACTS
        return parsed

    def _print_message(self, message, file=None):
        if message:  # argparse's own swallows OSError: --help into a full disk would exit 0 with nothing written
            (file or sys.stderr).write(message)

    def error(self, message: str):
        _say(f"{self.name}: error: {message} (see --help)")
        raise SystemExit(2)


def path(text: str) -> Path:
    """argparse ``type`` for a path option: an empty string is refused (``--out ''`` would mean the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    return Path(text)


def describe(err: BaseException) -> str:
    """The one line that says why ``err`` stopped a command (without the ``NAME: error:`` prefix)."""
    if _stopped or _by_ctrl_c(err):  # after a stop, whatever failed failed because of it (a compiler it ended)
        return "interrupted"
    if isinstance(err, SuiteError):
        return str(err)
    if isinstance(err, OSError):
        what = err.strerror or str(err)
        if err.filename is not None:
            return f"{err.filename}: {what}"
        if err.errno in _LOST or isinstance(err, BrokenPipeError):
            return f"the output could not be written ({what})"
        return what
    if isinstance(err, MemoryError):
        return "out of memory"
    return f"internal error: {type(err).__name__}: {err} (run with --debug for the traceback)"


def _by_ctrl_c(err: BaseException) -> bool:
    """Whether ``err`` is a Ctrl-C or was raised by one: what pytest fails in reporting it (a TypeError, pytest
    9.2) and a C extension's import it cut short (matplotlib's: ImportError) carry it as cause or context."""
    seen, pending = set(), [err]
    while pending:
        err = pending.pop()
        if err is None or id(err) in seen:
            continue
        if isinstance(err, KeyboardInterrupt):
            return True
        seen.add(id(err))
        pending += [err.__cause__, err.__context__]  # an explicit cause does not hide what was being handled
    return False


def run(name: str, body: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """``body(argv)`` as an exit code under the policy above; never raises (SystemExit from argparse included)."""
    global _last_name
    _last_name = name
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    try:
        if sys.stderr is None:  # `2>&-`: no room for an error or progress line; stdout is still empty
            print(f"{name}: error: stderr is closed: errors and progress would be lost (2>/dev/null discards them)")
            sys.stdout.flush()
            return 2
        if sys.stdout is None:  # `>&-`: print() would drop every line without a word
            raise SuiteError("stdout is closed: the output would be lost (>/dev/null discards it)")
        try:
            code = body(argv)
        except SystemExit as done:  # argparse: --help (0) or a usage error (2, its line already printed)
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 2)
        if _listening:  # the command's output is complete: a stop from here on is too late to stop anything
            with contextlib.suppress(AttributeError, ValueError, OSError):
                signal.pthread_sigmask(signal.SIG_BLOCK, set(STOPS))
        if code != 2:  # a stop whose KeyboardInterrupt something dropped still ends the command as a stop
            stop_if_asked()
        sys.stdout.flush()  # a closed pipe or a full disk shows here, not at interpreter exit (which exits 120)
        sys.stderr.flush()
        return code if code in (0, 1, 2) else 2
    except BaseException as err:  # noqa: BLE001 - the policy: every way out is one line and exit 2
        return _fail(name, err, debug)


#: Set once a command ended by Ctrl-C: :func:`leave` then ends the process at once.
_interrupted = False
#: The signals that stop a command (Ctrl-C, and SIGTERM as `timeout`, a CI runner or systemd send it).
STOPS = (signal.SIGINT, signal.SIGTERM)
#: Set by :func:`_on_stop` when a stop arrived: what decides the exit code, whatever became of its exception.
_stopped = False
#: The last command :func:`run` ran (its name starts the line of a stop that arrives after it returned).
_last_name = "analysis"
#: Whether :func:`listen_for_stops` installed the handler (this process is ``python -m analysis``), and in which process.
_listening, _listener = False, 0


def _on_stop(signum, frame) -> None:
    """The handler of :data:`STOPS`: remember the stop, then raise KeyboardInterrupt where the main thread is. The
    exception alone is not enough: one raised inside an at-fork callback or a ``__del__`` is printed as "Exception
    ignored" and dropped, and the command would run on to a verdict."""
    global _stopped
    if os.getpid() != _listener:  # a forked child before it set its own handling: the command answers, not it
        os._exit(2)
    _stopped = True
    raise KeyboardInterrupt


def stop_if_asked() -> None:
    """Raise KeyboardInterrupt when a stop has arrived (call it before printing a verdict: a stop whose exception
    was dropped must not end in one)."""
    if _stopped:
        raise KeyboardInterrupt


def listen_for_stops() -> None:
    """Install :func:`_on_stop` for :data:`STOPS` (``python -m analysis``; the main thread only): a stop is then
    remembered, and one that comes after the command returned is held pending for :func:`leave`."""
    global _listening, _listener
    with contextlib.suppress(ValueError):
        for sig in STOPS:
            signal.signal(sig, _on_stop)
        _listening, _listener = True, os.getpid()
        sys.unraisablehook = _unraisable
    # one temporary folder for everything this command and the programs it starts (compilers included) make, so
    # that what a stop cuts short is removed with it (leave)
    import tempfile

    from repro.core import scratch

    run = scratch.make("rlq-run-")
    os.environ["TMPDIR"] = str(run)
    tempfile.tempdir = None
    # multiprocessing's own folder (a forkserver's socket) inside it too (or in /tmp where its path would not fit a
    # socket's), named to multiprocessing before it makes one: it then registers no removal of its own at exit,
    # which would find the folder gone (leave removes the run's folder first) and print a traceback after the
    # command's last line
    import multiprocessing.process

    multiprocessing.process.current_process()._config["tempdir"] = str(scratch.for_sockets(run / "mp"))


def _unraisable(unraisable) -> None:
    """A stop's KeyboardInterrupt raised where Python cannot raise it (an at-fork callback: logging's _releaseLock,
    a ``__del__``) is printed and dropped by the default hook: here it is raised again at the next point where it
    can be (the stop itself is already remembered). Once a stop arrived nothing of this kind is printed, whatever
    happens inside the hook (a second stop raised in it, no thread to be had at shutdown): the stop ends in its
    one line."""
    try:
        if not _stopped:
            sys.__unraisablehook__(unraisable)
        elif isinstance(unraisable.exc_value, KeyboardInterrupt):
            _interrupt_main_from_a_thread()
    except BaseException:  # noqa: BLE001 - raised out of the hook it would be printed as "Exception ignored"
        if not _stopped:
            raise
        with contextlib.suppress(BaseException):
            _interrupt_main_from_a_thread()


def _interrupt_main_from_a_thread() -> None:
    """Raise KeyboardInterrupt in the main thread at its next check, from another thread: raised from inside the
    unraisable hook it would be dropped once more."""
    import _thread
    import threading

    threading.Thread(target=_thread.interrupt_main, daemon=True).start()


def leave(code: int):
    """End the process with ``code`` (what ``python -m analysis`` calls last). After Ctrl-C, at once: worker
    threads still inside a C call (the host backend's learner) would hold a normal exit until they finish,
    and a second SIGINT meanwhile (a second Ctrl-C; ``timeout -s INT`` sends two) would end it as 130.
    SIGINT is ignored from here: the interpreter's own teardown would otherwise restore its default (death, 130)."""
    with contextlib.suppress(ValueError):
        for sig in STOPS:
            signal.signal(sig, signal.SIG_IGN)
    if "repro.core.scratch" in sys.modules:  # folders an interrupted command's clean-up did not reach
        sys.modules["repro.core.scratch"].remove_leftovers()
    if _stopped and code != 2:  # a stop that came after the command's last check
        _say(f"{_last_name}: error: interrupted")
        code = 2
    if _interrupted or _stopped:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()
        os._exit(code)
    sys.exit(code)


def _fail(name: str, err: BaseException, debug: bool) -> int:
    global _interrupted
    by_ctrl_c = _by_ctrl_c(err)
    _interrupted = _interrupted or by_ctrl_c
    previous = {}
    with contextlib.suppress(ValueError):  # ValueError: not the main thread
        for sig in STOPS:  # a second stop must not cut the one line
            previous[sig] = signal.signal(sig, signal.SIG_IGN)
    try:
        if by_ctrl_c and _listening:  # a verdict still in stdout's buffer stays unsaid: a stop ends in one line
            with contextlib.suppress(OSError, ValueError, AttributeError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        for stream in ("stdout", "stderr"):
            _silence_if_broken(stream)
        if debug and not isinstance(err, SuiteError) and not by_ctrl_c:
            with contextlib.suppress(OSError, AttributeError):
                traceback.print_exception(err, file=sys.stderr)
        if not isinstance(err, BrokenPipeError):  # a reader that stops reading (`| head`) chose to: no line
            _say(f"{name}: error: {describe(err)}")
        return 2
    finally:
        # A caller in the same process (a test) keeps its own handling of both: a SIGTERM left ignored would be
        # inherited by every process it starts after (multiprocessing's terminate() then ends no worker, and the
        # caller's exit waits for ever on a worker it let go of). None: a handler set in C, which cannot be put back.
        if not _interrupted:
            for sig, handler in previous.items():
                if handler is not None:
                    signal.signal(sig, handler)


def _silence_if_broken(stream: str) -> None:
    """Point a stream that cannot take more output (closed pipe, full disk) at /dev/null, so that the
    interpreter's flush at exit does not fail a second time (exit 120 and a traceback)."""
    fh = getattr(sys, stream)
    if fh is None:
        return
    try:
        fh.flush()
    except (OSError, ValueError):
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), fh.fileno())
        except (OSError, ValueError):
            setattr(sys, stream, None)


def _say(line: str) -> None:
    """One line on stderr, or nowhere when stderr cannot take it (the exit code still says 2)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, AttributeError, ValueError):
        _silence_if_broken("stderr")


def progress(name: str) -> Callable[[str], None]:
    """A command's progress: each line as ``NAME: line`` on stderr, flushed at once (stdout is the result)."""
    return lambda line: print(f"{name}: {line}", file=sys.stderr, flush=True)


def command(name: str):
    """Decorator: ``main(argv) -> int`` run under :func:`run` (so that ``main([...])`` in a test or
    ``python -m analysis NAME`` answer alike)."""

    def wrap(body):
        @functools.wraps(body)
        def main(argv: list[str] | None = None) -> int:
            return run(name, body, argv)

        return main

    return wrap


def hold_interrupt() -> None:
    """Block the stops (a Ctrl-C waits, pending) until :func:`dispatch` has imported the command's module: Ctrl-C
    halfway through an import breaks it (numpy's C extension turns it into an ImportError, importlib's lock
    clean-up can swallow it and the command run on). What ``python -m analysis`` does first."""
    with contextlib.suppress(AttributeError, ValueError, OSError):  # no pthread_sigmask, or not the main thread
        signal.pthread_sigmask(signal.SIG_BLOCK, set(STOPS))


def dispatch(argv: list[str]) -> int:
    """``python -m analysis COMMAND ARGS``: import the command's module (lazily: ``--help`` costs no numpy)
    and run its ``main`` under :func:`run`; an interrupt or a missing package during the import is one line."""
    from analysis.cli import COMMANDS

    width = max(map(len, COMMANDS))
    listing = "\n".join(f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items())
    is_command = bool(argv) and argv[0] in COMMANDS

    def body(rest: list[str]) -> int:
        import importlib

        if not argv:
            raise SuiteError(f"no command given (one of: {', '.join(COMMANDS)}; --help says what each does)")
        if argv[0] in ("-h", "--help"):
            print(f"usage: python -m analysis COMMAND [ARGS] (COMMAND --help for its own)\n\ncommands:\n{listing}")
            return 0
        if not is_command:
            raise SuiteError(f"unknown command {argv[0]!r} (one of: {', '.join(COMMANDS)})")
        hold_interrupt()
        try:
            module = importlib.import_module(COMMANDS[argv[0]][0])
        except ModuleNotFoundError as err:
            raise SuiteError(f"missing dependency {err.name!r} (install the dependency groups: pip install --group "
                             "run, and --group study for the study; pip ≥ 25.1, see the README)") from None
        finally:  # a pending stop arrives here as KeyboardInterrupt, at a clean point (under run: one line, exit 2)
            with contextlib.suppress(AttributeError, ValueError, OSError):
                signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOPS))
        return module.main(rest)

    return run(argv[0] if is_command else "analysis", body, argv[1:])
