"""The learning-loop studies, one record each: the ``study`` option that runs it, its help line, and the
committed results (``studies/results/``) each kind of its runs may rewrite.

Every study goes the same way — a declaration committed before its runs (``studies/*.toml``) → the runs (the
module its option names) → a JSON of measurements, judged by ``analysis/judge/`` → its report section
(``analysis/present/``). ``python -m analysis study [OPTION] …`` takes the study from here, and every run checks
its outputs against :func:`owns` before any work, so that no study writes over another's committed results.

Adding a study:

1. Its declaration under ``studies/`` and its runs in a module of this folder whose ``body(argv, owns) -> int``
   parses its own options (``policy.Parser``) and returns the exit code; ``owns(name)`` says which files of
   studies/results/ its run as declared may rewrite (the entry's names, handed over by the registry).
2. One entry in :data:`STUDIES`: its option, a line for ``study --help``, the names of the committed results it
   may rewrite (a regular expression per kind of run, matched against the whole name) and ``run``
   (``_body("analysis.cli.MODULE", KIND)``: the module's ``body`` given ``owns(KIND)``). ``tests/test_studies.py``
   checks that every committed result has exactly one owner, and registers a made-up study, and nothing else, to
   see ``study`` run it.
3. Its options in ``docs/commands.md``.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Study:
    flag: str | None                          # the ``study`` option selecting it; None: the first study (no option)
    what: str                                 # one line for ``study --help``
    results: dict[str, str]                   # kind of run → names of studies/results/ files it may rewrite (regex)
    run: Callable[[list[str]], int] | None    # its command (None: analysis/cli/study.py's own parser)


def _body(module: str, kind: str) -> Callable[[list[str]], int]:
    """``module.body(argv, owns(kind))``, imported when the study runs (PyTorch's studies import it there, not
    at ``--help``)."""
    return lambda argv: importlib.import_module(module).body(argv, owns(kind))


#: The studies. A kind no command is given (``…_inputs``) names the files of a study's pilots, calibrations and
#: logs: made by other tools or by hand, read or recorded by the study, rewritten by no ``study`` run.
STUDIES: dict[str, Study] = {
    "first": Study(None, "the first pre-registered study (the default)",
                   {"first": r"preregistered_(host|cupy)(_[a-z]+)?\.(json|md|png)"}, None),
    "second": Study("--second", "the second pre-registered study",
                    {"second": r"preregistered_2_(host|cupy)(_[a-z]+)?\.(json|md|png)",
                     "calibration": r"preregistered_2_calibration\.json",
                     "exploratory": r"exploratory_2_[a-z0-9_]+\.json"}, None),
    "third": Study("--deep", "the third pre-registered study, PyTorch",
                   {"third": r"preregistered_3_(host|cupy)(_[a-z]+)?\.(json|md|png|npz)",
                    "third_inputs": r"preregistered_3_(calibration|power|probe_bench)\.json|preregistered_3_[a-z]+\.log"},
                   _body("analysis.cli.deep_study", "third")),
    "search": Study("--explore-4", "the fourth study's exploratory regime search, PyTorch",
                    {"search": r"exploration_4_(search|judged|map_[A-Za-z0-9-]+)\.(json|png)",
                     "search_inputs": r"exploration_4_calibration_[A-Za-z0-9-]+\.json"},
                    _body("analysis.cli.explore_study", "search")),
    "confirmation": Study("--confirm-4", "the fourth study's confirmatory replication, PyTorch",
                          {"confirmation": r"confirmation_4(_judged)?\.json", "confirmation_inputs": r"confirmation_4\.log"},
                          _body("analysis.cli.confirm_study", "confirmation")),
}


def chosen(argv: list[str] | None) -> Study | None:
    """The study whose option ``argv`` gives and which has a command of its own; None for study.py's parser."""
    return next((s for s in STUDIES.values() if s.run and argv and s.flag in argv), None)


def owns(kind: str) -> Callable[[str], bool]:
    """Whether a file name of studies/results/ is a committed result a run of ``kind`` may rewrite."""
    (pattern,) = [s.results[kind] for s in STUDIES.values() if kind in s.results]
    return lambda name: re.fullmatch(pattern, name) is not None
