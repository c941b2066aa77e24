"""The report's figures drawn side by side in forked children (``analysis.cli.report.draw``): the same bytes as one
after another, every figure once in the progress lines, and a figure a child could not draw drawn by the command
itself, whose error is then the command's."""

from __future__ import annotations

import os

import pytest


def _figure(height: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4, 3))
    fig.add_subplot().plot([0, 1, 2], [0, height, 0])
    return fig


@pytest.fixture()
def drawing(monkeypatch):
    """``f(figures, out, processes)`` → (the paths, the progress lines): ``report.draw`` with ``figures`` (name →
    maker) as the report's."""
    from analysis.cli import report

    def draw(figures, out, processes):
        monkeypatch.setattr(report.summary, "figures", lambda _report: figures)
        lines = []
        out.mkdir()
        return report.draw(None, out, lines.append, processes), lines

    return draw


FIGURES = {f"fig{i}.png": (lambda h=i: _figure(h)) for i in range(5)}


def _drawn_by(log):
    """FIGURES, each maker noting the pid of the process that draws it in ``log``."""
    def noted(make):
        def draw():
            with open(log, "a") as f:
                f.write(f"{os.getpid()}\n")
            return make()
        return draw
    return {name: noted(make) for name, make in FIGURES.items()}


def test_side_by_side_gives_the_bytes_of_one_after_another(drawing, tmp_path):
    alone, _ = drawing(FIGURES, tmp_path / "alone", 1)
    paths, lines = drawing(_drawn_by(tmp_path / "pids"), tmp_path / "side", 3)
    drawers = (tmp_path / "pids").read_text().split()
    assert len(drawers) == 5 and len(set(drawers)) == 3 and str(os.getpid()) not in drawers  # three children
    assert [p.name for p in paths] == list(FIGURES)
    assert all(p.read_bytes() == q.read_bytes() for p, q in zip(alone, paths, strict=True))
    assert sorted(line.rsplit(" ", 1)[1] for line in lines) == sorted(FIGURES)
    assert [line.split(":")[0].split()[-1] for line in lines] == [f"{i}/5" for i in range(1, 6)]


def test_a_figure_a_child_could_not_draw_is_drawn_by_the_command(drawing, tmp_path):
    command = os.getpid()

    def only_here():
        if os.getpid() != command:
            raise RuntimeError("not in a child")
        return _figure(7)

    paths, lines = drawing({**FIGURES, "fig_here.png": only_here}, tmp_path / "out", 2)
    assert all(p.stat().st_size > 1000 for p in paths) and len(lines) == 6


def test_a_figure_that_fails_everywhere_raises_in_the_command(drawing, tmp_path):
    def broken():
        raise ValueError("no data for this figure")

    with pytest.raises(ValueError, match="no data for this figure"):
        drawing({**FIGURES, "fig_broken.png": broken}, tmp_path / "out", 2)


def test_a_child_that_goes_silent_is_ended_and_its_figures_drawn_here(drawing, tmp_path, monkeypatch):
    """A child stuck (here: asleep in its first figure) past FIGURE_WAIT is killed and its share drawn by the
    command, rather than the report waiting on it without a limit."""
    import time

    from analysis.cli import report

    command = os.getpid()

    def stuck_in_a_child():
        if os.getpid() != command:
            time.sleep(60)
        return _figure(9)

    monkeypatch.setattr(report, "FIGURE_WAIT", 1.0)
    start = time.monotonic()
    paths, lines = drawing({"fig_stuck.png": stuck_in_a_child, **FIGURES}, tmp_path / "out", 2)
    assert time.monotonic() - start < 30 and len(lines) == 6 and all(p.stat().st_size > 1000 for p in paths)
