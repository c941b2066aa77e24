"""``python -m analysis study --deep``: bad input is one line and exit 2, before any run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from repro.core.paths import ROOT
from repro.runners import confine
from tests import commands

pytest.importorskip("torch", reason="the deep study needs PyTorch (pip install --group deep)")

from analysis.cli import study  # noqa: E402

CANDIDATES = ROOT / "tests" / "candidates"
MARKER = "gate_escape_marker.txt"  # what escape_write.cu writes into $PWD


@pytest.mark.parametrize("argv, says", [
    (["--deep", "--seeds", "1"], "--seeds must lie in 2..1000"),
    (["--deep", "--steps", "333"], "--steps must be a multiple of 250"),
    (["--deep", "--cells", "nowhere", "--reduced", "--backend", "host"], "unknown cell(s) nowhere"),
    (["--deep", "--kernel", "no/such.cu", "--backend", "host"], "kernel file not found"),
    (["--deep", "--prereg", "no/such.toml"], "cannot read the pre-registration"),
    (["--deep", "--cells", ","], "--cells needs at least one name"),
    (["--deep", "--json", "studies/preregistered_3.toml"], "studies/preregistered_3.toml"),
    (["--deep", "--traces", "x.csv"], ".npz"),
    (["--deep", "--kernel", "kernels/rl_q_distill_lambda_controller.cu", "--markdown", "x.md"], "with --kernel write --json"),
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


def _study(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return commands.run("study", "--deep", "--backend", "host", *args, cwd=cwd, timeout=600)


def test_a_candidates_escape_ends_the_study_with_one_line_and_changes_nothing(tmp_path):
    """The candidate's host build runs in a confined child, as replay/toy/report --kernel run theirs."""
    if confine.unavailable():
        pytest.skip(confine.unavailable())
    run_in = tmp_path / "cwd"
    run_in.mkdir()
    done = _study(run_in, "--kernel", str(CANDIDATES / "escape_write.cu"), "--reduced", "--json", "out.json")
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("study: error:")]
    assert errors == [f"study: error: the candidate tried to open {run_in / MARKER} for writing: the run was ended "
                      "(nothing outside its scratch folder was changed; docs/DESIGN.md, sandbox)"], done.stderr
    assert [p for p in run_in.rglob("*")] == []


def test_the_fixed_kernel_as_a_candidate_runs_confined_and_its_json_lands(tmp_path):
    """Its outputs are written in the child's scratch folder and moved to the path given after an exit 0; it
    collapses in no more runs than itself, so the exit is 0."""
    if confine.unavailable():
        pytest.skip(confine.unavailable())
    fixed = ROOT / "kernels" / "rl_q_distill_lambda_controller.cu"
    done = _study(tmp_path, "--kernel", str(fixed), "--reduced", "--seeds", "2", "--json", "out.json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    arms = result["cells"]["primary"]["arms"]
    assert arms["candidate"]["per_seed"]["collapsed"] == arms["fixed"]["per_seed"]["collapsed"]
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
