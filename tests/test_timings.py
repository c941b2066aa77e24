"""The generated performance page: its command registry, the measurement, and the one flag that writes it."""

from __future__ import annotations

import json

import pytest

from analysis.cli import timings
from analysis.present import performance_page
from repro.bench import command_times


def _row(cpu: str, gpu: str = "", wall: float = 1.0) -> dict:
    return {"machine": {"cpu": cpu, "cores": 2, "gpu": gpu}, "date": "2026-12-03", "commit": "abc",
            "runs": [{"name": "x", "what": "a thing", "wall_s": wall, "cpu_s": 0.5, "status": 0}], "left_out": []}


def test_a_new_timed_entry_alone_is_measured(monkeypatch, tmp_path, capsys):
    """One entry added to the registry and nothing else: it runs, is timed from outside, and shows on the page."""
    sleeper = command_times.Timed("sleeper", ("-c", "import time; time.sleep(0.3); print('noise')"), "sleeps 0.3 s")
    monkeypatch.setattr(command_times, "TIMED", (*command_times.TIMED, sleeper))
    assert timings.main(["--only", "sleeper", "--json", str(tmp_path / "row.json")]) == 0
    row = json.loads((tmp_path / "row.json").read_text())
    (run,) = row["runs"]
    assert run["name"] == "sleeper" and run["status"] == 0
    assert run["wall_s"] >= 0.3  # the sleep is inside the timed process
    out = capsys.readouterr().out
    assert "| `sleeper` | sleeps 0.3 s |" in out and "noise" not in out  # the command's own output stays out


def test_logs_keep_each_commands_output_for_the_one_who_asks(monkeypatch, tmp_path, capsys):
    """``--logs``: a command that fails on the page can be read afterwards (stdout and stderr, in order)."""
    noisy = command_times.Timed("noisy", ("-c", "import sys; print('to out', flush=True); sys.exit('to err')"), "fails")
    monkeypatch.setattr(command_times, "TIMED", (noisy,))
    assert timings.main(["--only", "noisy", "--logs", str(tmp_path / "logs")]) == 0
    assert (tmp_path / "logs" / "noisy.log").read_text().splitlines() == ["to out", "to err"]
    assert "to out" not in capsys.readouterr().out


def test_exit_status_and_cpu_time_come_from_the_child(tmp_path):
    busy = command_times.Timed("busy", ("-c", "import sys\nx=0\nfor i in range(3_000_000): x+=i\nsys.exit(3)"), "spins")
    measured = command_times.run_one(busy, tmp_path, timeout_s=60)
    assert measured.status == 3
    assert measured.cpu_s > 0.05  # the child's CPU, read by wait4, not this process's


def test_a_command_past_its_timeout_is_killed(tmp_path):
    slow = command_times.Timed("slow", ("-c", "import time; time.sleep(30)"), "sleeps 30 s")
    measured = command_times.run_one(slow, tmp_path, timeout_s=0.5)
    assert measured.status < 0 and measured.wall_s < 10


def test_a_machine_measured_again_replaces_its_row_and_keeps_the_others():
    rows = performance_page.merged([], _row("cpu A", wall=1.0))
    rows = performance_page.merged(rows, _row("cpu B", gpu="H200", wall=2.0))
    rows = performance_page.merged(rows, _row("cpu A", wall=3.0))
    assert [(r["machine"]["cpu"], r["runs"][0]["wall_s"]) for r in rows] == [("cpu A", 3.0), ("cpu B", 2.0)]
    text = performance_page.page(rows)
    assert text.count("## cpu A, 2 cores, no GPU") == 1 and "## cpu B, 2 cores, H200" in text
    assert "| 3.0 |" in text and "| 1.0 |" not in text


@pytest.mark.parametrize("argv, says", [
    (["--only", "nonesuch"], "unknown command name"),
    (["--timeout", "0"], "--timeout must be above 0"),
    (["--json", "docs/DESIGN.md"], "is a file of the repository"),
    (["--logs", "docs"], "holds the repository's own files"),
])
def test_bad_input_is_one_line_and_exit_2(argv, says, capsys):
    assert timings.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def test_device_commands_are_left_out_with_the_reason_where_no_gpu_answers(monkeypatch, tmp_path):
    monkeypatch.setattr(command_times, "has_device", lambda: False)
    quick = command_times.Timed("quick", ("-c", "pass"), "nothing")
    gpu = command_times.Timed("gpu-only", ("-c", "pass"), "needs a GPU", device=True)
    monkeypatch.setattr(command_times, "TIMED", (quick, gpu))
    runs, left = command_times.measure(None, 60)
    assert [r.name for r in runs] == ["quick"]
    assert left == ["gpu-only: needs a GPU and CuPy, none here"]


def test_the_timed_cpu_suite_is_toxs_default_command():
    """The page's `tests` row times what `tox` runs (tox.ini [testenv:tests]), not a variant of it."""
    import configparser
    import shlex

    from repro.core.paths import ROOT

    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini")
    command = shlex.split(ini["testenv:tests"]["commands"].strip())
    assert command[0] == "python" and command[-1] == "{posargs}"
    assert tuple(a for a in command[1:-1] if a != "-q") == tuple(a for a in command_times.CPU_TESTS if a != "-q")
