"""Commands that run a candidate in their own process (``replay``/``toy``/``report --kernel``) run it in a confined
child (analysis/cli/confined.py, repro/runners/confine.run_confined): it writes only inside its scratch folder, starts
no process, opens no socket; an attempt ends the command with exit 2 and one line naming it, and nothing outside
the scratch folder changes. The fixed kernel given as ``--kernel`` still gives the outputs it gives unconfined."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from analysis.cli.policy import dispatch
from repro.core.contract import ROOT
from repro.runners import confine
from tests import commands
from tests.catalogue import forger

CANDIDATES = Path(__file__).parent / "candidates"
FIXED = ROOT / "kernels" / "rl_q_distill_lambda_controller.cu"
TRACE = Path(__file__).parent / "data" / "sample_trace.csv"
MARKER = "gate_escape_marker.txt"  # what escape_write.cu writes into $PWD


@pytest.fixture
def sandbox():
    why = confine.unavailable()
    if why:
        pytest.skip(why)


def _attempt(body, scratch: Path) -> str | None:
    """The attempt :func:`confine.run_confined` named for ``body`` (None: it ended without one)."""
    try:
        confine.run_confined(body, scratch)
    except confine.Escaped as err:
        return str(err)
    return None


def test_a_write_outside_the_scratch_folder_ends_the_child_and_writes_nothing(sandbox, tmp_path):
    scratch, outside = tmp_path / "scratch", tmp_path / "outside.txt"
    scratch.mkdir()

    def body() -> int:
        with open(outside, "w") as f:  # noqa: PTH123 - a plain open(2), as a candidate's fopen
            f.write("escaped")
        return 0

    assert _attempt(body, scratch) == f"the candidate tried to open {outside} for writing"
    assert not outside.exists()


def test_a_process_started_by_the_child_is_named(sandbox, tmp_path):
    def body() -> int:
        os.system("true")  # noqa: S605, S607 - what std::system does
        return 0

    assert "the candidate tried to start a process" in (_attempt(body, tmp_path) or "")


def test_naming_its_own_thread_is_refused_and_the_child_lives_on(sandbox, tmp_path):
    """``pthread_setname_np`` on another of the child's threads opens /proc/self/task/TID/comm for writing
    (PyTorch names its pool's threads so): the open fails with EACCES, as Landlock would fail it, and is no
    attempt; a write outside afterwards still is one."""
    import errno
    import threading

    outside = tmp_path / "outside.txt"
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    def body() -> int:
        tid: list[int] = []
        ready, done = threading.Event(), threading.Event()
        helper = threading.Thread(target=lambda: (tid.append(threading.get_native_id()), ready.set(), done.wait()))
        helper.start()
        ready.wait()
        refused = []
        for name in (f"/proc/self/task/{tid[0]}/comm", f"/proc/{os.getpid()}/task/{tid[0]}/comm",
                     "/proc/thread-self/comm"):
            try:
                os.close(os.open(name, os.O_RDWR))
            except OSError as err:
                refused.append(err.errno)
        done.set()
        helper.join()
        if refused != [errno.EACCES] * 3:
            return 3
        outside.write_text("escaped")
        return 0

    assert _attempt(body, scratch) == f"the candidate tried to open {outside} for writing"
    assert not outside.exists()


def test_writes_inside_the_scratch_folder_and_the_exit_code_come_through(sandbox, tmp_path):
    def body() -> int:
        (tmp_path / "inside.txt").write_text("kept")
        return 1

    assert confine.run_confined(body, tmp_path) == 1
    assert (tmp_path / "inside.txt").read_text() == "kept"


@pytest.mark.slow  # a cold build (4 s)
def test_a_library_the_cache_lacks_is_built_by_the_parent(sandbox, tmp_path, monkeypatch, contract):
    """The child may start no compiler: a host build it needs is the parent's (repro.backends.host.build_remotely),
    and the kernel it loads runs as built unconfined (its bits, on the catalogue's first scenario)."""
    import numpy as np

    from repro.backends import get_backend, host
    from repro.runners.runner import run_scenarios
    from repro.runners.scenarios import catalogue

    monkeypatch.setenv("RLQ_CACHE_DIR", str(tmp_path / "cache"))  # cold: every library is built anew
    backend = get_backend("host")
    entry = contract.controller("fixed")
    source = contract.source("fixed")
    scenario = catalogue(entry)[0]
    out = tmp_path / "scratch"
    out.mkdir()

    def body() -> int:
        lam = run_scenarios(backend.compile(source, contract.slots), [scenario])[0].lam
        np.save(out / "lam.npy", lam)
        return 0

    assert confine.run_confined(body, out, serve=host.build_remotely) == 0
    here = run_scenarios(backend.compile(source, contract.slots), [scenario])[0].lam
    assert np.array_equal(np.load(out / "lam.npy").view(np.uint32), np.asarray(here, np.float32).view(np.uint32))


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = dispatch(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("command", [
    ("replay", str(TRACE), "--controller", "none"),
    ("toy", "--controller", "fixed"),
    ("report", "--out", "{tmp}/report"),
], ids=lambda c: c[0])
def test_without_a_sandbox_require_sandbox_exits_2(command, monkeypatch, tmp_path):
    reason = "sandbox: seccomp is not permitted here (a test's stand-in)"
    monkeypatch.setattr(confine, "unavailable", lambda: reason)
    args = [a.format(tmp=tmp_path) for a in command]
    code, out, err = _run(*args, "--kernel", str(FIXED), "--backend", "host", "--require-sandbox")
    assert (code, out) == (2, "")
    assert err.strip().splitlines()[-1] == f"{command[0]}: error: {reason} (--require-sandbox)", err
    assert not (tmp_path / "report" / "summary.md").exists()


def _cli(cwd: Path, command: str, *args: str) -> subprocess.CompletedProcess:
    return commands.run(command, *args, cwd=cwd)


def sandbox_aware(tmp_path: Path) -> Path:
    """escape_write.cu, made to behave in the gate's confined workers (whose working folder is an
    ``rlq-worker-`` scratch folder) and to write its marker anywhere else: the report's own runs meet it."""
    text = (CANDIDATES / "escape_write.cu").read_text()
    text = text.replace("#include <string>\n", "#include <string>\n#include <cstring>\n#include <unistd.h>\n")
    text = text.replace("    if (!done) {", '    char here[4096];\n    if (!done && getcwd(here, sizeof here) && '
                        '!std::strstr(here, "rlq-worker-")) {')
    assert "rlq-worker-" in text
    path = tmp_path / "sandbox_aware.cu"
    path.write_text(text)
    return path


@pytest.mark.slow  # command-line processes (2-10 s each)
@pytest.mark.parametrize("command", [
    ("replay", str(TRACE), "--controller", "none", "--csv", "out/r.csv", "--plot", "out/r.png"),
    ("toy", "--controller", "fixed", "--steps", "2000", "--json", "out/t.json", "--plot", "out/t.png"),
    ("report", "--out", "out"),
], ids=lambda c: c[0])
def test_an_escape_through_a_command_is_one_line_exit_2_and_changes_nothing(sandbox, command, tmp_path):
    """From a folder of its own, as a user runs it: exit 2, one line naming the attempt, no marker, no output
    (the report's candidate behaves in the gate's workers, so that the report's own runs meet it)."""
    run_in = tmp_path / "cwd"
    run_in.mkdir()
    kernel = sandbox_aware(tmp_path) if command[0] == "report" else CANDIDATES / "escape_write.cu"
    done = _cli(run_in, *command, "--kernel", str(kernel), "--backend", "host")
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if not line.startswith(f"{command[0]}: [")
              and not line.startswith(f"{command[0]}:       ")]  # the report's progress lines
    assert errors == [f"{command[0]}: error: the candidate tried to open {run_in / MARKER} for writing: the run was "
                      "ended (nothing outside its scratch folder was changed; docs/DESIGN.md, sandbox)"], done.stderr
    assert not (run_in / MARKER).exists() and not (ROOT / MARKER).exists()
    assert [p for p in run_in.rglob("*") if p.is_file()] == []


@pytest.mark.slow  # four command-line processes
def test_the_fixed_kernel_as_a_candidate_gives_what_it_gives_unconfined(sandbox, tmp_path):
    """toy --kernel FIXED (confined) against toy with the contract's kernel (run in the command's process): the same
    JSON but for the wall time, the same figure's bytes; replay likewise, its CSV but for the controller's name."""
    a, b = _cli(tmp_path, "toy", "--controller", "fixed", "--steps", "3000", "--json", "a.json", "--plot", "a.png",
                "--backend", "host"), \
        _cli(tmp_path, "toy", "--controller", "fixed", "--steps", "3000", "--json", "b.json", "--plot", "b.png",
             "--backend", "host", "--kernel", str(FIXED))
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr
    ja, jb = (json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab")
    assert {k: v for k, v in ja.items() if k != "seconds"} == {k: v for k, v in jb.items() if k != "seconds"}
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    c = _cli(tmp_path, "replay", str(TRACE), "--controller", "fixed", "--csv", "c.csv", "--backend", "host")
    d = _cli(tmp_path, "replay", str(TRACE), "--controller", "none", "--csv", "d.csv", "--backend", "host",
             "--kernel", str(FIXED))
    assert c.returncode == d.returncode == 0, c.stderr + d.stderr
    unconfined = re.sub(r"^fixed,", "candidate,", (tmp_path / "c.csv").read_text(), flags=re.MULTILINE)
    assert unconfined == (tmp_path / "d.csv").read_text()


@pytest.mark.slow  # command-line processes (2 s each)
@pytest.mark.parametrize("command, name, says", [
    (("replay", str(TRACE), "--controller", "none"), "run.json", "the candidate's replay is not λ for"),
    (("toy", "--controller", "fixed", "--steps", "2000"), "run.json", "the candidate's toy run holds other fields"),
], ids=lambda c: c[0] if isinstance(c, tuple) else "")
@pytest.mark.parametrize("status", [0, 1])
def test_what_a_commands_child_hands_back_is_read_by_schema(sandbox, tmp_path, command, name, says, status):
    """The candidate's load-time code writes a result of its own into the child's scratch folder and ends the child
    with exit 0 (before, the command's exit 0, printing nothing) or 1 (before, the command's exit 1): the parent
    reads what the child wrote by its schema, and either status without a readable result is one line, exit 2."""
    done = _cli(tmp_path, *command, "--kernel", str(forger(tmp_path, name, '{"$":"dict","items":[]}', status)),
                "--backend", "host")
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if f"{command[0]}: error:" in line]
    expected = says if status == 0 else "the confined run ended with exit status 1: no measurements read"
    assert len(errors) == 1 and expected in errors[0], done.stderr
    assert done.stdout == ""


#: Replies a candidate's host code forges on the gate's pipe: a pickle that runs ``touch TOUCHED`` wherever it is
#: unpickled, and well-formed plain data (repro/runners/plain.py) naming a type outside the replies' registry; and
#: what the gate says of each.
FORGED = {"pickle": ("cposix\nsystem\n(S'touch {touched}'\ntR.", "not a JSON message"),
          "outside_type": ('{{"$":"tuple","items":["ok",{{"$":"Popen","fields":{{"args":"touch {touched}"}}}}]}}',
                           "a 'Popen', no type of the suite's replies")}


def forging(tmp_path: Path, touched: Path, payload: str = FORGED["pickle"][0]) -> Path:
    """escape_write.cu whose host code writes, to every socket it holds (a gate worker's pipe), ``payload``
    (``{touched}`` filled in) framed as multiprocessing frames a message."""
    import struct

    payload = payload.format(touched=touched).encode()
    frame = "".join(f"\\x{b:02x}" for b in struct.pack("!i", len(payload)) + payload)
    text = (CANDIDATES / "escape_write.cu").read_text()
    start = text.index("    static bool done = false;")
    end = text.index("#endif", start)
    body = ("    static bool done = false;\n    if (!done) {\n        done = true;\n"
            f'        static const char frame[] = "{frame}";\n'
            "        for (int fd = 3; fd < 256; ++fd) {\n            struct stat st;\n"
            "            if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) write(fd, frame, sizeof frame - 1);\n"
            "        }\n    }\n")
    text = text[:start] + body + text[end:]
    text = text.replace("#include <string>\n", "#include <string>\n#include <sys/stat.h>\n#include <unistd.h>\n")
    path = tmp_path / "forging.cu"
    path.write_text(text)
    return path


@pytest.mark.slow  # a gate in process (3 s)
@pytest.mark.parametrize("forged", sorted(FORGED))
def test_a_forged_answer_on_the_gates_pipe_is_an_execution_row_and_runs_nothing(sandbox, tmp_path, contract, host,
                                                                               forged):
    """The worker's pipe is the candidate's to write to: the gate reads it as plain data, never unpickled; a
    pickle naming os.system, or plain data naming a type the replies never hold, ends the worker as a sandbox
    fault, and nothing it names runs."""
    from analysis.cli.evaluate import evaluate
    from repro.core.kernel_source import load_kernel

    touched = tmp_path / "touched_by_the_gate"
    payload, says = FORGED[forged]
    verdict = evaluate(load_kernel(forging(tmp_path, touched, payload), "rl_q_distill_lambda_controller"), "fixed",
                       host, contract)
    row = next(f for f in verdict.findings if f.key == "execution")
    assert not row.ok
    assert any(f"the candidate tried to write its own reply to the gate ({says}" in f for f in row.detail["faults"]), \
        row.detail
    assert not touched.exists()
