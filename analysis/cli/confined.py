"""A command that loads a candidate kernel in its own process runs that part in a confined child
(:func:`repro.runners.confine.run_confined`): it writes only inside a scratch folder of its own, starts no
process, opens no socket; an attempt ends the command with exit 2 and one line naming it, and nothing outside the
scratch folder changes. Two ways back:

- :func:`measure` (``replay``, ``toy``, ``study --deep --kernel``): the child measures and writes plain data
  (:mod:`repro.runners.plain`) into its scratch folder; this process reads it by its schema (anything else: one
  line, exit 2) and does the judging, the verdict and the rendering. The child's exit status says only whether
  it finished, never what it found: candidate code in the child could set it (``_exit`` from a load-time
  constructor).
- :func:`run` (``report --kernel``): the child renders, and its outputs are moved to the paths the user gave
  (regular files with :data:`FOLDER_SUFFIXES`) only when it ends with exit 0. The report judges nothing in the
  child: its gate rows come from the gate's workers, run in this process before the fork; but the files it
  writes are the child's.

A device backend (CuPy) runs its candidate in the command's process, as before: NVRTC compiles the kernel's
device side only (a host-only block is not compiled at all), device code makes no system calls, and CUDA does not
survive the fork a confined child needs (the backend has started it by then).
"""
from __future__ import annotations

import os
import shutil
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from analysis.cli import policy
from repro.backends import Backend, entry
from repro.core.errors import SuiteError
from repro.core.scratch import make as make_scratch
from repro.core.scratch import remove as remove_scratch
from repro.runners import confine

T = TypeVar("T")

#: What a folder output (``report --out``) may receive from the child: the suffixes the commands write.
FOLDER_SUFFIXES = (".png", ".csv", ".json", ".md")


def check(require: bool) -> str | None:
    """None where a candidate can be confined here, else the one-line reason (said on stderr); with
    ``require`` (``--require-sandbox``) that reason is the command's error (exit 2)."""
    why = confine.unavailable()
    if why and require:
        raise SuiteError(f"{why} (--require-sandbox)")
    if why:
        print(f"{why}: the candidate's code runs unconfined", file=sys.stderr)
    return why


def require_first(require: bool) -> None:
    """``--require-sandbox`` before any work: no sandbox here is the command's error (exit 2) at once, not after
    its inputs are read; without it, nothing (:func:`run` and :func:`measure` say it where a candidate runs)."""
    if require:
        check(require=True)


def run(name: str, backend: Backend, body: Callable[[dict[str, Path | None]], int],
        outputs: dict[str, Path | None], require: bool = False, folders: tuple[str, ...] = ()) -> int:
    """``body(paths)`` → exit code, confined where it runs candidate code on the CPU, else in this process.

    ``outputs``: flag → the path the user gave (None: not asked for); ``body`` writes each to ``paths[flag]``
    (in the scratch folder when confined), and they are moved to their places after an exit 0. ``folders``: the
    flags whose output is a folder (its regular files with :data:`FOLDER_SUFFIXES` are moved, the tree kept).
    Call it after every input and output path has been checked and ``backend`` obtained (its start-up runs the
    compiler's ``--version``, a program the child may not start)."""
    why = check(require)
    if why or entry(backend.name).device:
        return body(dict(outputs))
    if folders or any(p is not None and p.suffix == ".png" for p in outputs.values()):
        # matplotlib's font list, loaded (or built: fc-list is a program) here, before any candidate code runs
        from matplotlib import font_manager  # noqa: F401

        from analysis.present import plots  # noqa: F401
    scratch = make_scratch(f"rlq-{name}-")
    try:
        inside = {flag: None if path is None else scratch / "out" / str(i) / path.name
                  for i, (flag, path) in enumerate(outputs.items())}
        for path in inside.values():
            if path is not None:
                path.parent.mkdir(parents=True)
        from repro.backends import host

        try:
            code = confine.run_confined(lambda: policy.run(name, lambda _argv: body(inside), []), scratch,
                                        serve=host.build_remotely)
        except confine.Escaped as err:
            raise SuiteError(f"{err}: the run was ended (nothing outside its scratch folder was changed; "
                             "docs/DESIGN.md, sandbox)") from None
        if code == 0:
            for flag, path in outputs.items():
                if path is not None:
                    _move(inside[flag], path, flag in folders)
        return code
    finally:
        remove_scratch(scratch)


def measure(name: str, backend: Backend, body: Callable[[Path], object], read: Callable[[Path], T],
            require: bool = False) -> T | None:
    """The line between measuring and judging: ``body(folder)`` measures and writes plain data into ``folder``
    (confined where it runs candidate code on the CPU, as :func:`run`; else in this process); ``read(folder)``
    reads it here, by its schema (SuiteError for anything else). The judging and the verdict are the caller's,
    in this process: the child's exit status says only whether it finished (0), never what it found. None: the
    child ended with exit 2 and said why (one line, as any command does); another status is an error here."""
    why = check(require)
    folder = make_scratch(f"rlq-{name}-")
    try:
        out = folder / "out"
        out.mkdir()
        if why or entry(backend.name).device:
            body(out)
            return read(out)
        from repro.backends import host

        try:
            code = confine.run_confined(lambda: policy.run(name, lambda _argv: _measured(body, out), []), folder,
                                        serve=host.build_remotely)
        except confine.Escaped as err:
            raise SuiteError(f"{err}: the run was ended (nothing outside its scratch folder was changed; "
                             "docs/DESIGN.md, sandbox)") from None
        if code == 2:
            return None
        if code != 0:
            raise SuiteError(f"the confined run ended with exit status {code}: no measurements read")
        return read(out)
    finally:
        remove_scratch(folder)


def _measured(body: Callable[[Path], object], out: Path) -> int:
    """The child's side of :func:`measure`: ``body(out)`` done is exit 0 (what it returns is no exit code)."""
    body(out)
    return 0


def _move(src: Path, dest: Path, folder: bool) -> None:
    """Copy what the child wrote at ``src`` to ``dest``: regular files only (a link is not followed)."""
    if not folder:
        _copy(src, dest)
        return
    for here, _dirs, files in os.walk(src):  # links to folders are not followed
        for file in files:
            if Path(file).suffix in FOLDER_SUFFIXES:
                _copy(Path(here) / file, dest / Path(here).relative_to(src) / file)


def _copy(src: Path, dest: Path) -> None:
    try:
        mode = os.lstat(src).st_mode
    except FileNotFoundError:
        raise SuiteError(f"the confined run wrote no {dest}") from None
    if not stat.S_ISREG(mode):
        raise SuiteError(f"the confined run left {src.name} as something other than a file: not copied to {dest}")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest, follow_symlinks=False)
    except OSError as err:
        raise SuiteError(f"cannot write {dest}: {err.strerror or err}") from None
