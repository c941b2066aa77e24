"""The report's learning-loop part is assembled from the studies' sections registry
(``analysis.present.study_sections.SECTIONS``): a made-up entry, and nothing else, shows its lines in summary.md's
text, its figure in the report's list (numbered after the studies before it) and among what the report draws."""

from __future__ import annotations

import pytest


@pytest.fixture()
def fifth(monkeypatch):
    """A made-up fifth study's section registered for one test: one line read from the report, one figure."""
    from analysis.present import study_sections

    sections = dict(study_sections.SECTIONS)
    sections["fifth"] = study_sections.StudySection(
        "fifth", lambda report: ["## The fifth study", "", f"- read from the report: {report.header['backend']}"],
        {"fig_fifth.png": ("The fifth study's figure.", lambda report: ("drawn for", report.header["backend"]))})
    monkeypatch.setattr(study_sections, "SECTIONS", sections)
    return sections["fifth"]


class _Report:
    """What the sections' lines and drawings read here: a header only (the made-up entry reads nothing else)."""

    header = {"backend": "host"}


def test_a_new_entry_alone_is_in_the_summary_and_the_figures(fifth, monkeypatch):
    from analysis.present import study_sections, summary

    captions = list(summary.captions())
    assert "fig_fifth.png" in captions
    assert captions.index("fig_fifth.png") > captions.index("fig14_study2.png")  # after the studies before it
    # the summary's learning-loop part, read here with the made-up entry alone (the others read a whole report)
    monkeypatch.setattr(study_sections, "SECTIONS", {"fifth": fifth})
    assert study_sections.markdown(_Report()) == ["## The fifth study", "", "- read from the report: host", ""]
    assert study_sections.drawings(_Report())["fig_fifth.png"]() == ("drawn for", "host")


def test_every_section_draws_the_figures_it_captions():
    from analysis.present import study_sections

    for name, section in study_sections.SECTIONS.items():
        assert section.study == name and section.figures
        assert all(callable(draw) and caption for caption, draw in section.figures.values())


def test_captions_and_drawings_naming_different_figures_are_refused():
    from analysis.present import study_sections

    with pytest.raises(ValueError, match="name different figures"):
        study_sections._captioned({"a.png": "A."}, {"b.png": lambda report: None})
