"""``python -m analysis study --deep``: bad input is one line and exit 2, before any run."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the deep study needs PyTorch (pip install --group deep)")

from analysis.cli import study  # noqa: E402


@pytest.mark.parametrize("argv, says", [
    (["--deep", "--seeds", "1"], "--seeds must lie in 2..1000"),
    (["--deep", "--steps", "333"], "--steps must be a multiple of 250"),
    (["--deep", "--cells", "nowhere", "--reduced", "--backend", "host"], "unknown cell(s) nowhere"),
    (["--deep", "--kernel", "no/such.cu", "--backend", "host"], "kernel file not found"),
    (["--deep", "--prereg", "no/such.toml"], "cannot read the pre-registration"),
    (["--deep", "--cells", ","], "--cells needs at least one name"),
    (["--deep", "--json", "studies/preregistered_3.toml"], "studies/preregistered_3.toml"),
    (["--deep", "--traces", "x.csv"], ".npz"),
])
def test_bad_input_is_one_line_exit_2(argv, says, capsys):
    assert study.main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("study: error:") and says in lines[0], err
    assert out == ""


def test_help_lists_the_deep_options(capsys):
    assert study.main(["--deep", "--help"]) == 0
    assert "--kernel" in capsys.readouterr().out
