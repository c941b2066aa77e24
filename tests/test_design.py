"""docs/DESIGN.md §5's recipes ("How to add …") name real files, and each names where its registry lives."""

from __future__ import annotations

import inspect
import re

import pytest

from analysis.judge import property_checks, property_records
from analysis.present import property_columns
from repro import backends
from repro.backends import base
from repro.bench import command_times, modes
from repro.core.contract import CONTRACTS
from repro.core.paths import ROOT
from repro.runners import scenarios

#: A path in backticks: one with a '/' (a file or a folder), or a file name with a known ending.
PATH = re.compile(r"`([\w.-]*/[\w./-]*|[\w./-]+\.(?:py|toml|cu|cuh|h|md|ini))`")


def _recipes() -> dict[str, str]:
    """§5's bullets by what they add ("a controller", ...), each with its text."""
    text = (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    section = text.split("## 5. How to add", 1)[1].split("\n## ", 1)[0]
    parts = re.split(r"^- \*\*(a [^*]+)\*\*:", section, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def _where(obj) -> str:
    """The repo-relative file that defines ``obj`` (a module, class or function)."""
    return ROOT.joinpath(inspect.getsourcefile(obj)).relative_to(ROOT).as_posix()


#: Per extension point, the files that hold its registry and what an entry subclasses or fills in: what a new
#: entry must change (tests/test_backends.py, tests/test_evidence.py and tests/test_bench.py show an entry there,
#: and nothing else, works).
REGISTRIES = {
    "a controller": [CONTRACTS.relative_to(ROOT).as_posix()],
    "a backend": [_where(backends), _where(base.Backend)],
    "a property": [_where(property_checks), _where(property_records), _where(property_columns),
                   CONTRACTS.relative_to(ROOT).as_posix()],
    "a scenario": [_where(scenarios.catalogue)],
    "a benchmark mode": [_where(modes)],
    "a command": ["analysis/cli/__init__.py", "analysis/cli/policy.py", "docs/commands.md"],
    "a study": ["analysis/cli/studies.py", "tests/test_studies.py"],
    "a timed command": [_where(command_times)],
}


def test_every_extension_point_has_a_recipe():
    assert set(_recipes()) == set(REGISTRIES)


@pytest.mark.parametrize("what", sorted(REGISTRIES))
def test_a_recipe_names_only_files_that_exist_and_the_files_its_registry_needs(what):
    text = " ".join(_recipes()[what].split())
    named = set(PATH.findall(text))
    assert named, f"the recipe for {what} names no file"
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"the recipe for {what} names files that do not exist: {missing}"
    unnamed = [p for p in REGISTRIES[what] if p not in named]
    assert not unnamed, f"the recipe for {what} does not name {unnamed}"
