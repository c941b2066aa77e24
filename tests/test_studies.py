"""The studies' registry (analysis/cli/studies.py): each committed result has one owner, a run checks its outputs
against its own kind's names, and a new entry alone is a study ``python -m analysis study`` runs."""

from __future__ import annotations

import subprocess

import pytest

from analysis.cli import studies, study
from repro.core.errors import SuiteError
from repro.core.paths import RESULTS, ROOT

KINDS = [kind for s in studies.STUDIES.values() for kind in s.results]


def _committed() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "studies/results"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode:
        pytest.skip(f"no git checkout here ({listed.stderr.strip()})")
    return [line.rsplit("/", 1)[-1] for line in listed.stdout.splitlines()]


def test_every_committed_result_has_exactly_one_owner():
    """Each file of studies/results/ is the result of one kind of run of one study: no study's run as declared
    may rewrite another's (a rule by prefix alone let the first study's run write the third's files)."""
    names = _committed()
    assert names
    for name in names:
        owners = [k for k in KINDS if studies.owns(k)(name)]
        assert len(owners) == 1, (name, owners)
    assert len(KINDS) == len(set(KINDS))


@pytest.mark.parametrize("kind, name", [
    ("first", "preregistered_3_cupy.json"), ("first", "preregistered_2_cupy.json"),
    ("third", "preregistered_3_power.json"), ("third", "preregistered_3_calibration.json"),
    ("search", "exploration_4_calibration_CartPole-v1.json"), ("confirmation", "confirmation_4.log"),
    ("second", "preregistered_2_calibration.json"), ("calibration", "preregistered_2_cupy.json")])
def test_a_kind_owns_none_of_what_its_run_does_not_write(kind, name):
    """Too broad a name rule gives a run files it never writes: a pilot's or a calibration's, another study's."""
    assert not studies.owns(kind)(name)


def test_a_run_of_one_study_refuses_another_studys_committed_result(monkeypatch):
    """The first study as pre-registered, its --json at the third study's committed JSON: refused before any run
    (the file is tracked and not the first study's; a prefix rule let the study run 6 minutes and write it)."""
    from analysis.cli import study_runs

    third = RESULTS / "preregistered_3_cupy.json"
    before = third.read_bytes()
    monkeypatch.setattr(study_runs, "run_first", lambda *a, **k: pytest.fail("the study ran"))
    with pytest.raises(SuiteError, match="is a file of the repository"):
        study.main.__wrapped__(["--backend", "host", "--json", str(third)])
    assert third.read_bytes() == before


def test_a_new_entry_alone_is_a_study_the_command_runs(monkeypatch, capsys):
    """One entry, nothing else: ``study --help`` lists its option, ``study --fifth …`` runs its body with the
    arguments, and its kind owns the names it declares."""
    seen = []
    fifth = studies.Study("--fifth", "a made-up fifth study", {"fifth": r"fifth_[a-z]+\.json"},
                          lambda argv: seen.append(argv) or 0)
    monkeypatch.setitem(studies.STUDIES, "fifth", fifth)
    with pytest.raises(SystemExit):
        study.main.__wrapped__(["--help"])
    assert "--fifth" in capsys.readouterr().out
    assert study.main.__wrapped__(["--fifth", "--seeds", "3"]) == 0
    assert seen == [["--fifth", "--seeds", "3"]]
    assert studies.owns("fifth")("fifth_run.json") and not studies.owns("fifth")("preregistered_host.json")
