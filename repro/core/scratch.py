"""Temporary folders the suite makes, each removed when its work ends, and any left by an interrupted command
removed when the process that made it ends (:func:`remove_leftovers`: ``python -m analysis`` calls it last, and
every other process that made one — a test session, a script using the library — at its interpreter's exit).

A Ctrl-C or SIGTERM can arrive inside a ``finally`` that was removing a folder, or before one was entered, and a
caller can let go of what made a folder without ending it (a :class:`~repro.runners.isolation.Worker` neither
stopped nor discarded): every folder made through :func:`make` is recorded in this process until :func:`remove`
has removed it, so the process's last step finds what was left. A process that ends without that step (SIGKILL;
``os._exit`` other than :func:`analysis.cli.policy.leave`'s) leaves its folders."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

#: Folders made by this process and not yet removed (a forked child holds a copy, which it never acts on).
_MADE: set[str] = set()
_OWNER = os.getpid()


def make(prefix: str, parent: str | Path | None = None) -> Path:
    """A fresh temporary folder (in ``parent``, else the system's), recorded until :func:`remove` removes it."""
    folder = tempfile.mkdtemp(prefix=prefix, dir=parent)
    if os.getpid() == _OWNER:
        _MADE.add(folder)
    return Path(folder)


#: The longest path (bytes) of a folder a socket is made in: an AF_UNIX address holds 107 bytes, and multiprocessing
#: names a forkserver's socket ``listener-XXXXXXXX`` (18 more with the slash).
SOCKET_FOLDER_MAX = 80


def for_sockets(folder: Path) -> Path:
    """``folder`` (made, if need be) where a socket's path in it fits an AF_UNIX address; else a fresh folder in
    /tmp, made and recorded as :func:`make`'s are (a long TMPDIR: a checkout deep in a home folder, tox's own)."""
    if len(os.fsencode(folder)) <= SOCKET_FOLDER_MAX:
        folder.mkdir(exist_ok=True)
        return folder
    return make("rlq-sock-", parent="/tmp")


def remove(folder: str | Path) -> None:
    """Remove ``folder`` however deep, and forget it: ``shutil.rmtree`` in this process (no program started: a fork
    of a large process costs milliseconds, several times a gate), and where it fails — it recurses once per level,
    so a tree of 1,100 folders ends it with a RecursionError — ``rm -rf``, which walks it without a limit."""
    try:
        shutil.rmtree(folder)
    except FileNotFoundError:
        pass
    except (OSError, RecursionError):
        rm = shutil.which("rm")
        if rm:
            subprocess.run([rm, "-rf", "--one-file-system", "--", str(folder)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
    if not os.path.lexists(folder):
        _MADE.discard(str(folder))


@contextlib.contextmanager
def folder(prefix: str, parent: str | Path | None = None) -> Iterator[Path]:
    """:func:`make`, removed with :func:`remove` when the block ends."""
    made = make(prefix, parent)
    try:
        yield made
    finally:
        remove(made)


def remove_leftovers() -> None:
    """Remove every folder this process made and has not removed (an interrupted command's)."""
    if os.getpid() != _OWNER:
        return
    for attempt in range(6):  # a child still ending (a worker being killed, a compiler) may write meanwhile
        for made in sorted(_MADE):
            remove(made)
        if not _MADE:
            return
        time.sleep(0.02 * 2**attempt)


# At the interpreter's exit: a process other than ``python -m analysis`` has no last step of its own. A forked child
# inherits the registration but not the ownership (:func:`remove_leftovers` returns there at once).
atexit.register(remove_leftovers)
