"""The fourth study's search mapped over Ray (issue 42 item 10; repro/learning/deep/explore_ray.py) on the CPU: the
reduced search's two shards, tasks of a local Ray of 2 CPUs, merge into the unsharded reduced JSON byte for byte
and print the same map; Ctrl-C while they run ends the command in one line, exit 2, with the Ray it started shut
down. ``tox -e deep`` (its ``ray`` dependency group); skipped with the reason where PyTorch or Ray is missing."""

from __future__ import annotations

import logging
import os
import signal

import pytest

torch = pytest.importorskip("torch", reason="the deep study needs PyTorch (pip install --group deep)")
ray = pytest.importorskip("ray", reason="the search on Ray needs Ray (pip install --group ray; tox -e deep has it)")

from analysis.cli import policy, study  # noqa: E402


def _cli(*argv) -> int:
    return study.main(["--explore-4", "--backend", "host", *map(str, argv)])


@pytest.fixture
def local_ray():
    """A new local Ray of 2 CPUs in this process (not $RAY_ADDRESS's), shut down after the test; the test's SIGTERM
    handling as it was (``ray.init`` replaces it)."""
    term = signal.getsignal(signal.SIGTERM)
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.ERROR)
    signal.signal(signal.SIGTERM, term)
    yield
    ray.shutdown()


def _map(out: str) -> list[str]:
    """stdout without the lines that carry timings."""
    return [line for line in out.splitlines() if not line.startswith(("loop:", "host: done"))]


def test_ray_shards_merge_into_the_unsharded_reduced_json_byte_for_byte(local_ray, tmp_path, capsys):
    assert _cli("--reduced", "--json", tmp_path / "all.json") == 0
    alone = capsys.readouterr().out
    assert _cli("--reduced", "--ray", 2, "--json", tmp_path / "ray.json") == 0
    out, err = capsys.readouterr()
    assert (tmp_path / "ray.json").read_bytes() == (tmp_path / "all.json").read_bytes()
    assert _map(out) == _map(alone) and "EXPLORATORY search" in out
    assert "ray: 2 shard(s) as tasks of one CPU each, on a cluster of 2 CPU(s)" in err
    assert "ray: shard 1/2 done: 1 group(s)" in err and "ray: shard 2/2 done: 1 group(s)" in err
    assert ray.is_initialized(), "a Ray the command joined is left running"


def test_ctrl_c_while_the_shards_run_is_one_line_and_shuts_down_the_ray_it_started(tmp_path, capsys, monkeypatch,
                                                                                ctrl_c_raises):
    """SIGINT once both tasks are submitted: exit 2, ``study: error: interrupted`` last and alone of its kind, the
    tasks cancelled and the local Ray the command started shut down (this process holds none after)."""
    said = policy.progress

    def progress(name):
        say = said(name)

        def and_stop(line):
            say(line)
            if line.startswith("ray: 2 shard(s)"):
                os.kill(os.getpid(), signal.SIGINT)

        return and_stop

    monkeypatch.setattr(policy, "progress", progress)
    # Ray's own override of a node's resources (what its autoscaler sets): the Ray the command starts has 2 CPUs
    monkeypatch.setenv("RAY_OVERRIDE_RESOURCES", '{"CPU": 2}')
    assert _cli("--reduced", "--ray", 2, "--ray-address", "local", "--json", tmp_path / "x.json") == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert "study: ray: 2 shard(s) as tasks of one CPU each, on a cluster of 2 CPU(s)" in lines
    assert lines[-1] == "study: error: interrupted" and sum("error" in line for line in lines) == 1, lines
    assert not ray.is_initialized()
    assert not (tmp_path / "x.json").exists(), "no shard finished: nothing written"
