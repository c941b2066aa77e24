"""The learning-loop studies' parts of the report, one entry each, in the order summary.md shows them.

An entry names its study (its key in ``analysis/cli/studies.py``'s ``STUDIES``), its section's Markdown lines
(read from the report's runs of the study or from the study's committed JSON: no number is written here) and its
figures, each a file name → (caption, a callable that draws it from the report). :mod:`analysis.present.summary`
assembles summary.md's learning-loop part, its figure list and the figures the report draws from :data:`SECTIONS`
alone.

Adding a study's section: its lines and figures in a module of this folder, then one entry in :data:`SECTIONS`.
``tests/test_study_sections.py`` adds a made-up entry, and nothing else, and finds its lines in summary.md's text
and its figure among those the report draws.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from analysis.judge.report_measures import Report
from analysis.present import deep_plots, deep_section, study_plots, study_section


@dataclass(frozen=True)
class StudySection:
    study: str                                                    # its key in analysis/cli/studies.py's STUDIES
    markdown: Callable[[Report], list[str]]                       # its section's lines (figures linked apart)
    figures: dict[str, tuple[str, Callable[[Report], object]]]    # file name → (caption, draw(report) → figure)


def _captioned(captions: dict[str, str], draw: dict[str, Callable[[Report], object]]) -> dict:
    """The section module's captions beside this module's drawings, by file name (the same names in both)."""
    if set(captions) != set(draw):
        raise ValueError(f"captions and drawings name different figures: {sorted(set(captions) ^ set(draw))}")
    return {name: (caption, draw[name]) for name, caption in captions.items()}


#: The studies' sections, in summary.md's order: the third study's committed (H200) deep loop leads, then the
#: first and the second, run by the report itself.
SECTIONS: dict[str, StudySection] = {
    "third": StudySection(
        "third", lambda r: deep_section.section(deep_section.committed(), r.contract, figures=False),
        _captioned(deep_section.FIGURES, {
            "fig_deep_cells.png": lambda r: deep_plots.cells(deep_section.committed()),
            "fig_deep_incident.png": lambda r: deep_plots.incident(deep_section.committed(),
                                                                   deep_section.primary_kl_target())})),
    "first": StudySection(
        "first", lambda r: study_section.section(r.study, figures=False),
        _captioned(study_section.FIGURES, {"fig11_study.png": lambda r: study_plots.overview(r.study),
                                           "fig12_study_grid.png": lambda r: study_plots.grid_heatmap(r.study)})),
    "second": StudySection(
        "second", lambda r: study_section.second_section(r.study2, r.study2_exploratory),
        _captioned(study_section.FIGURES_2, {"fig13_incident.png": lambda r: study_plots.incident(r.study2),
                                             "fig14_study2.png": lambda r: study_plots.second_overview(r.study2)})),
}


def captions() -> dict[str, str]:
    """Every study figure: file name → caption, in :data:`SECTIONS`' order."""
    return {name: caption for s in SECTIONS.values() for name, (caption, _) in s.figures.items()}


def drawings(report: Report) -> dict[str, Callable[[], object]]:
    """Every study figure: file name → a callable drawing it from ``report``."""
    return {name: (lambda d=draw: d(report)) for s in SECTIONS.values() for name, (_, draw) in s.figures.items()}


def markdown(report: Report) -> list[str]:
    """The studies' sections, one after another, each followed by an empty line."""
    return [line for s in SECTIONS.values() for line in (*s.markdown(report), "")]
