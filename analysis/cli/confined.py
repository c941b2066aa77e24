"""A command that loads a candidate kernel in its own process (``replay``/``toy``/``report --kernel``) runs that part
in a confined child (:func:`repro.runners.confine.run_confined`): it writes only inside a scratch folder of its own,
starts no process, opens no socket. Its outputs are written there and moved to the paths the user gave only when it
ends with exit 0; an attempt ends the command with exit 2 and one line naming it (no verdict: the command
judges nothing), and nothing outside the scratch folder changes.

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

from analysis.cli import policy
from repro.backends import Backend, entry
from repro.core.errors import SuiteError
from repro.core.scratch import make as make_scratch
from repro.runners import confine

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
        confine.remove(scratch)


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
