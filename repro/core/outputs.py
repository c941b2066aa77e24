"""Output paths a command line will write: checked before any work, so a bad one costs nothing.

:func:`check_outputs` is the one rule every command applies: no input is ever an output (the run's own
inputs, any file the repository tracks), no two outputs share a path, and a committed file changes only
through the flag documented for it.
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from repro.core.errors import SuiteError
from repro.core.paths import RESULTS, ROOT

#: Without git (a tree copied without .git): the repository's files are the existing files in these folders
#: and at its top level.
SOURCE_FOLDERS = ("analysis", "repro", "kernels", "studies", "tests", "docs", "reports", ".github")


@dataclass(frozen=True)
class Output:
    """One output of a run: the option that names it, its path (None: not asked for), and what it must be."""

    flag: str  # "--json"; shown in every refusal
    path: Path | None
    suffix: str = ""  # required suffix (".png"), "" for any
    folder: bool = False  # a folder the command fills with files of its own naming


def committed_results(paths: Iterable[Path | str | None], named: Callable[[str], bool]) -> list[Path | str]:
    """Those of ``paths`` (None skipped) that are files of studies/results/ itself whose name ``named`` accepts — both
    read after links are resolved (a link named as one study's file that points at another's is not one): the
    committed results a study run as declared may rewrite (:func:`check_outputs`'s ``committed``)."""
    results = Path(os.path.realpath(RESULTS))
    return [p for p in paths if p and (real := Path(os.path.realpath(p))).parent == results and named(real.name)]


def check_outputs(outputs: Iterable[Output], inputs: Iterable[tuple[str, Path | None]] = (),
                  committed: Iterable[Path] = ()) -> None:
    """Refuse, in one :class:`SuiteError` line, any output that is not safe to write; then check each is writable.

    ``inputs``: ``(what, path)`` of every file the run reads (kernel, contract, trace, pre-registration).
    ``committed``: tracked paths this run may overwrite because its documented flag says so (the report's
    default folder). Refused: a path that is an input (by name, link or hard link), a tracked file of the
    repository or a folder holding them (or the repository itself), a path inside a ``.git`` folder, the
    same path for two outputs, the wrong suffix, a name longer than the file system takes.
    """
    outputs = [o for o in outputs if o.path is not None]
    taken: dict[Path, str] = {}
    read = [(what, Path(p)) for what, p in inputs if p is not None]
    allowed = {_resolved(Path(p), "") for p in committed}
    for out in outputs:
        where = _resolved(out.path, out.flag)
        if ".git" in where.parts:  # untracked, so no check below sees it: config, HEAD, index
            raise SuiteError(f"{out.flag} {out.path}: that is inside a .git folder, which only git writes")
        if not out.folder and where.is_dir():
            raise SuiteError(f"{out.flag} {out.path}: it is a folder")
        if out.suffix and Path(out.path).suffix.lower() != out.suffix:
            raise SuiteError(f"{out.flag} {out.path}: it writes a {out.suffix[1:].upper()} file; "
                             f"give a path ending in {out.suffix}")
        if where in taken:
            raise SuiteError(f"{taken[where]} and {out.flag} both name {out.path}: give each output its own path")
        taken[where] = out.flag
        for what, path in read:
            if _same(where, path):
                raise SuiteError(f"{out.flag} {out.path} is this run's {what}: an input is never overwritten")
        if where not in allowed:
            files, folders = _repository()
            if out.folder and (where == ROOT or where in folders):
                raise SuiteError(f"{out.flag} {out.path}: that folder holds the repository's own files; "
                                 "give a folder of its own")
            if where in files:
                raise SuiteError(f"{out.flag} {out.path} is a file of the repository: give a path outside it")
        # a folder the run fills with names of its own could take an input's name (a kernel saved as summary.md);
        # a missing input is its reader's error to report
        inside = next(((what, p) for what, p in read
                       if out.folder and p.exists() and _resolved(p, "").is_relative_to(where)), None)
        if inside:
            raise SuiteError(f"{out.flag} {out.path} holds this run's {inside[0]} ({inside[1]}): an input is never "
                             "overwritten; give a folder that holds no input")
    for out in outputs:
        check_writable(out)


def _resolved(path: Path, flag: str) -> Path:
    """``path`` absolute, links resolved; a name longer than the file system allows is refused here."""
    for part in Path(path).parts:
        if len(os.fsencode(part)) > 255:  # NAME_MAX of every file system the suite runs on
            raise SuiteError(f"{flag} {str(path)[:60]}…: a name of {len(os.fsencode(part))} bytes "
                             f"(at most 255)".lstrip())
    try:
        return Path(os.path.realpath(path))
    except OSError as err:
        raise SuiteError(f"{flag} {path}: {err.strerror or err}".lstrip()) from None


def _same(where: Path, path: Path) -> bool:
    try:
        return where == Path(os.path.realpath(path)) or (where.exists() and os.path.samefile(where, path))
    except OSError:
        return False


@functools.lru_cache(maxsize=1)
def _repository() -> tuple[frozenset[Path], frozenset[Path]]:
    """(the repository's files, the folders that hold them), absolute: git's tracked files, or without git
    every existing file of :data:`SOURCE_FOLDERS` and of the top level."""
    try:
        done = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=30)
        names = [n for n in done.stdout.decode("utf-8", "replace").split("\0") if n] if done.returncode == 0 else []
    except (OSError, subprocess.SubprocessError):
        names = []
    if names:
        files = {ROOT / n for n in names}
    else:
        files = {p for p in ROOT.iterdir() if p.is_file()}
        for folder in SOURCE_FOLDERS:
            files |= {p for p in (ROOT / folder).rglob("*") if p.is_file()}
    folders = {parent for f in files for parent in f.parents if parent.is_relative_to(ROOT)}
    return frozenset(files), frozenset(folders)


def check_writable(out: Output) -> None:
    """Create the output's folder (a folder output: the path itself) if needed; raise a one-line
    :class:`SuiteError`, naming its option, unless a file can be written there.

    A scratch file is made and removed there: permission bits alone do not tell (e.g. as root, or on /proc).
    """
    path, folder = Path(out.path), out.folder
    what = f"{out.flag} {path}"
    try:
        if folder and path.exists() and not path.is_dir():
            raise SuiteError(f"{what}: it is a file, not a folder")
        if not folder and path.is_dir():
            raise SuiteError(f"{what}: it is a folder")
        blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            raise SuiteError(f"{what}: {blocker} is a file, not a folder")
        home = path if folder else path.parent
        home.mkdir(parents=True, exist_ok=True)
        if not folder and path.exists():
            with path.open("a"):
                pass
        else:
            with tempfile.NamedTemporaryFile(dir=home, prefix=".write-check-"):
                pass
    except OSError as err:
        raise SuiteError(f"{what}: cannot be written ({err.strerror or err})") from None


def write_text(path: Path, text: str) -> None:
    """Write ``text`` (creating folders); an OS error becomes one line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise SuiteError(f"cannot write {path}: {err.strerror or err}") from None
