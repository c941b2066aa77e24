"""Bad input to the kernels' tools: one clear line, exit code 2 from the CLIs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from analysis.cli import gate
from analysis.cli.policy import dispatch
from repro.core.contract import Slots, load
from repro.core.errors import SuiteError
from repro.core.kernel_source import load_kernel
from repro.core.paths import ROOT
from tests import commands


def test_missing_file_exits_2_with_one_line(capsys):
    assert dispatch(["gate", "no/such/kernel.cu", "--backend", "host"]) == 2
    assert capsys.readouterr().err.strip() == "gate: error: kernel file not found: no/such/kernel.cu"


def test_a_command_failing_in_this_process_leaves_its_stop_handling_as_it_was(capsys):
    """A command's failure ignores SIGINT and SIGTERM while its one line is written, then puts back the caller's
    handling of both: a SIGTERM left ignored is inherited by every process the caller starts after, and
    multiprocessing's ``terminate()`` then ends none of their workers (a worker let go of held its exit for ever)."""
    from analysis.cli.policy import STOPS

    before = {sig: signal.getsignal(sig) for sig in STOPS}
    assert dispatch(["gate", "no/such/kernel.cu", "--backend", "host"]) == 2
    assert {sig: signal.getsignal(sig) for sig in STOPS} == before


def test_compile_error_shows_the_compilers_message(tmp_path, capsys):
    bad = tmp_path / "broken.cu"
    bad.write_text('extern "C" __global__ void rl_q_distill_lambda_controller(float* isv) {\n  isv[0] = nope;\n}\n')
    assert gate.main([str(bad), "--backend", "host"]) == 2
    err = capsys.readouterr().err
    assert "does not compile" in err and "broken.cu:2" in err and "nope" in err
    assert len(err.strip().splitlines()) == 1


def test_missing_symbol_is_named(tmp_path, capsys):
    other = tmp_path / "other.cu"
    other.write_text('extern "C" __global__ void something_else(float* isv) {}\n')
    assert gate.main([str(other), "--backend", "host"]) == 2
    assert "no kernel named 'rl_q_distill_lambda_controller' (found: something_else)" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--contract", "nope"], ["--backend", "tpu"]])
def test_usage_errors_exit_2(args, capsys):
    assert dispatch(["gate", *args]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_unavailable_backend_is_a_clear_error(monkeypatch, capsys):
    from repro.core.errors import BackendUnavailable

    def unavailable(name="auto"):
        raise BackendUnavailable("cupy backend: no CUDA device")

    monkeypatch.setattr(gate, "get_backend", unavailable)
    assert gate.main(["--backend", "cupy"]) == 2
    assert capsys.readouterr().err.strip() == "gate: error: cupy backend: no CUDA device"


def test_unknown_define_is_rejected(contract):
    with pytest.raises(SuiteError, match="no #define named MIN_LAMDA"):
        contract.source("fixed").with_defines(MIN_LAMDA=0.1)


def test_define_override_is_visible_in_behaviour(contract, host):
    """The variant mechanism changes the compiled kernel: a floor of 0.2 is where λ settles."""
    from repro.runners.runner import run_scenarios
    from repro.runners.scenarios import catalogue

    variant = contract.source("fixed").with_defines(MIN_LAMBDA=0.2)
    aligned = next(s for s in catalogue(contract.controller("fixed")) if s.name == "decay_from_ceiling")
    lam = run_scenarios(host.compile(variant, contract.slots), [aligned])[0].lam
    assert lam[-1] == np.float32(0.2) and lam.min() == np.float32(0.2)


def test_isv_too_small_for_the_slots():
    with pytest.raises(SuiteError, match="too small for slot 491"):
        Slots(486, 488, 491, 491, 0)


def test_malformed_contract(tmp_path):
    bad = tmp_path / "contracts.toml"
    bad.write_text("[slots]\nlambda = 486\n")
    with pytest.raises(SuiteError, match="missing key"):
        load(bad)
    bad.write_text("[slots\n")
    with pytest.raises(SuiteError, match="not valid TOML"):
        load(bad)


def test_unreadable_kernel_file(tmp_path):
    binary = tmp_path / "k.cu"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SuiteError, match="cannot read kernel file"):
        load_kernel(binary, "x")


def test_a_study_may_rewrite_only_its_own_committed_results(tmp_path):
    """The committed results a study as declared may rewrite: files of studies/results/ (through a link too) named
    as its own; a path elsewhere with the same name, another study's file there, or a link named as its own that
    points at another study's file is not among them."""
    from repro.core.outputs import committed_results
    from repro.core.paths import RESULTS

    (tmp_path / "results").symlink_to(RESULTS)
    own, other = RESULTS / "exploration_4_search.json", RESULTS / "preregistered_3_cupy.json"
    elsewhere, linked = tmp_path / own.name, tmp_path / "results" / own.name
    disguised = tmp_path / "exploration_4_other.json"  # named as the search's, pointing at the third study's
    disguised.symlink_to(other)
    got = committed_results([None, own, other, elsewhere, str(linked), disguised],
                            lambda name: name.startswith("exploration_4_"))
    assert got == [own, str(linked)]


KERNEL = "kernels/rl_q_distill_lambda_controller.cu"
LONG = "a" * 300  # a file name longer than any file system takes (255 bytes)
#: Files a bad output path could destroy: each is compared byte for byte after every case.
GUARDED = (KERNEL, "kernels/contracts.toml", "studies/preregistered.toml", "studies/results/preregistered_host.json",
           "studies/results/preregistered_host.md", "reports/summary.md", "README.md")


FIRST, SECOND = "studies/results/preregistered_cupy.json", "studies/results/preregistered_2_cupy.json"


@pytest.mark.parametrize("args, out", [([], "out/report"), (["--out", "reports"], "reports")])
def test_the_report_rewrites_the_committed_one_only_when_out_names_it(monkeypatch, capsys, args, out):
    """By default the report goes to a folder git ignores (the checkout stays clean); ``--out reports`` is the
    one way to the committed report, whose tracked files any other folder's check would refuse."""
    from analysis.cli import report

    real, checked = report.check_outputs, []

    def check(outputs, **kw):
        checked.extend(outputs)
        return real(checked, **kw)

    def stop(*a, **k):  # the outputs passed their check: nothing is measured or written here
        raise SuiteError("stopped after the check")

    monkeypatch.setattr(report, "check_outputs", check)
    monkeypatch.setattr(report, "measure", stop)
    assert report.main([*args, "--backend", "host"]) == 2
    assert capsys.readouterr().err.strip() == "report: error: stopped after the check"
    assert report.shown(checked[0].path) == out
    if not args:
        done = subprocess.run(["git", "check-ignore", "-q", "out/report/summary.md"], cwd=ROOT)
        if done.returncode == 128:
            pytest.skip("not a git checkout: what git ignores cannot be asked")
        assert done.returncode == 0, "out/report/ is not ignored by git"


def _kernel_as(path):
    """A copy of the fixed kernel at ``path`` (a name a report writes: summary.md)."""
    path.write_bytes((ROOT / KERNEL).read_bytes())
    return str(path)


def _trace(tmp, text="kl,kl_target\n0.1,0.1\n0.3,0.1\n", name="t.csv"):
    path = tmp / name
    path.write_text(text)
    return str(path)


# command × bad input → the refusal's words. Every case is refused before any work (no kernel runs).
CASES = [
    # no input is ever an output
    ("gate", lambda t: [KERNEL, "--json", KERNEL], "is this run's kernel"),
    ("gate", lambda t: ["--junit", "kernels/contracts.toml"], "is this run's contract"),
    ("gate", lambda t: ["--json", "README.md"], "is a file of the repository"),
    ("gate", lambda t: ["--json", f"{t}/x.json", "--junit", f"{t}/x.json"], "--json and --junit both name"),
    ("toy", lambda t: ["--controller", "fixed", "--json", KERNEL], "is this run's kernel"),
    ("toy", lambda t: ["--controller", "fixed", "--json", f"{t}/A.png", "--plot", f"{t}/A.png"], "both name"),
    ("study", lambda t: ["--json", "studies/preregistered.toml"], "is this run's pre-registration"),
    ("study", lambda t: ["--steps", "5200", "--json", "studies/results/preregistered_host.json"],
     "is a file of the repository"),  # the committed result: only the study as pre-registered writes it
    ("replay", lambda t: [_trace(t), "--csv", _trace(t)], "is this run's trace"),
    ("replay", lambda t: [_trace(t), "--plot", f"{t}/x.png", "--csv", f"{t}/x.png"], "both name"),
    ("replay", lambda t: [_trace(t), "--csv", "kernels/contracts.toml"], "is this run's contract"),
    ("report", lambda t: ["--out", ""], "an empty path"),
    ("report", lambda t: ["--out", "."], "holds the repository's own files"),
    ("report", lambda t: ["--out", "kernels"], "holds the repository's own files"),
    ("report", lambda t: ["--out", "reports/data"], "holds the repository's own files"),
    ("report", lambda t: ["--kernel", _kernel_as(t / "summary.md"), "--out", str(t)], "holds this run's kernel"),
    ("bench", lambda t: ["--out", "kernels"], "holds the repository's own files"),
    ("bench", lambda t: ["--out", "reports/bench"], "holds the repository's own files"),  # only --record writes it
    ("bench", lambda t: ["--out", "."], "holds the repository's own files"),
    ("bench", lambda t: ["--record", "--baseline", "kernels", "--out", f"{t}/b"], "holds the repository's own files"),
    ("bench", lambda t: ["--out", "reports/bench/baselines/NVIDIA_H200"], "holds the repository's own files"),
    ("study", lambda t: ["--second", "--calibrate", "--from-json", SECOND], "--calibrate runs the calibration"),
    # git's own files are untracked: no output goes inside a .git folder (a stranger's --json .git/config broke the
    # clone); a scratch one here, so that a regression breaks no repository
    ("gate", lambda t: ["--json", f"{t}/.git/config"], "inside a .git folder"),
    ("replay", lambda t: [_trace(t), "--csv", f"{t}/.git/HEAD"], "inside a .git folder"),
    ("study", lambda t: ["--json", f"{t}/.git/index"], "inside a .git folder"),
    # a study as pre-registered (or redrawn) rewrites its own committed results, never another study's
    ("study", lambda t: ["--second", "--from-json", SECOND, "--markdown", "studies/results/preregistered_host.md"],
     "is a file of the repository"),
    ("study", lambda t: ["--json", SECOND], "is a file of the repository"),
    ("study", lambda t: ["--second", "--calibrate", "--json", FIRST], "is a file of the repository"),
    # an option the run would ignore without a word
    ("study", lambda t: ["--second", "--from-json", SECOND, "--json", f"{t}/s.json"], "--from-json takes no --json"),
    ("study", lambda t: ["--second", "--from-json", SECOND, "--env", "FrozenLake-v1"], "--from-json takes no --env"),
    ("study", lambda t: ["--second", "--calibrate", "--steps", "5200"], "--calibrate takes no --steps"),
    # an input that is missing, empty, or another command's
    ("gate", lambda t: [""], "an empty path"),  # `gate "$KERNEL"` with KERNEL unset: not the contract's kernel
    ("study", lambda t: ["--seeds", ""], "--seeds '': expected A:B"),  # not the pre-registered seeds
    ("bench", lambda t: ["--out", ""], "an empty path"),
    ("bench", lambda t: ["--baseline", ""], "an empty path"),
    ("report", lambda t: ["--studies", f"{t}/a.json", f"{t}/b.json"], "cannot read the first study's JSON"),
    ("report", lambda t: ["--studies", SECOND, FIRST], "not the first learning-loop study's JSON"),
    ("study", lambda t: ["--second", "--from-json", FIRST], "not the second learning-loop study's JSON"),
    ("study", lambda t: ["--from-json", SECOND], "--from-json is the second study's: give --second"),
    ("study", lambda t: ["--calibrate"], "--calibrate is the second study's: give --second"),
    # names too long, folders, permission
    ("gate", lambda t: ["--json", f"{t}/{LONG}.json"], "a name of 305 bytes (at most 255)"),
    ("toy", lambda t: ["--controller", "fixed", "--json", f"{t}/{LONG}"], "(at most 255)"),
    ("toy", lambda t: ["--controller", "fixed", "--kernel", f"{t}/{LONG}.cu"], "File name too long"),
    ("study", lambda t: ["--json", f"{t}/{LONG}"], "(at most 255)"),
    ("replay", lambda t: [f"{t}/{LONG}.csv", "--target", "0.1"], "File name too long"),
    ("report", lambda t: ["--out", f"{t}/{LONG}"], "(at most 255)"),
    ("gate", lambda t: ["--json", str(t)], "it is a folder"),
    ("toy", lambda t: ["--controller", "fixed", "--plot", str(t)], "it is a folder"),
    ("gate", lambda t: ["--json", "/proc/version"], "cannot be written"),  # EACCES even as root
    ("gate", lambda t: [str(t)], "is a folder; name the .cu file in it"),
    ("gate", lambda t: ["/dev/null"], "is not a regular file"),
    ("replay", lambda t: [str(t), "--target", "0.1"], "is a folder"),
    # bounds on every number
    ("gate", lambda t: ["--timeout", "1e400"], "at most 3600, not inf"),
    ("gate", lambda t: ["--timeout", "7200"], "at most 3600"),
    ("toy", lambda t: ["--controller", "fixed", "--steps", "100000000"], "at most 1000000"),
    ("toy", lambda t: ["--controller", "fixed", "--seed", str(2**70)], "--seed must be an integer from 0 to"),
    ("toy", lambda t: ["--controller", "fixed", "--plot", f"{t}/a.txt"], "give a path ending in .png"),
    ("study", lambda t: ["--steps", "20000000000"], "at most 10000000"),
    ("study", lambda t: ["--seeds", "0:100000000000"], "at most 1000000"),
    ("replay", lambda t: [_trace(t, "kl\n0.1\n1e39\n"), "--target", "0.1"], ":3: '1e39' overflows float32"),
    ("replay", lambda t: [_trace(t, "kl\n0.1\n1e-50\n"), "--target", "0.1"], "it would be fed as 0"),
    ("replay", lambda t: [_trace(t, "kl\n0.1\n"), "--target", "1e39"], "that float32 holds"),
    ("replay", lambda t: [_trace(t, "kl\n0.1\n"), "--target", "1e-50"], "that float32 holds"),
    ("replay", lambda t: [_trace(t), "--contract", "nosuch"], "names the seed λ of a --kernel; there is none"),
    ("replay", lambda t: [_trace(t), "--kernel", KERNEL, "--contract", "nosuch"], "unknown contract 'nosuch'"),
    # what every command shares
    ("gate", lambda t: ["--backend", "nosuch"], "invalid choice"),
    ("report", lambda t: ["--backend", "nosuch"], "invalid choice"),
    ("replay", lambda t: [], "the following arguments are required"),
    ("toy", lambda t: [], "the following arguments are required"),
    ("toy", lambda t: ["--controller", "fixed", "--seed", "-1"], "--seed must be an integer"),
    ("toy", lambda t: ["--controller", "fixed", "--steps", "abc"], "invalid int value"),
    ("study", lambda t: ["--backend", "nosuch"], "invalid choice"),
    ("study", lambda t: ["--env", ""], "at least one name"),
    ("bench", lambda t: ["--slow-ns", "abc"], "invalid int value"),
    ("nosuch", lambda t: [], "unknown command 'nosuch'"),
]


@pytest.mark.parametrize("command, args, words", CASES, ids=[f"{c}-{w[:30]}" for c, _, w in CASES])
def test_every_command_line_refuses_bad_input_in_one_line(command, args, words, tmp_path, capsys, monkeypatch):
    """As a user types it (``python -m analysis COMMAND …`` is :func:`dispatch`): exit 2, one line on stderr
    naming the problem, nothing on stdout, no kernel compiled, no guarded file changed."""
    from repro.backends import base

    def no_work(*a, **k):
        raise AssertionError("a kernel was compiled before the input was checked")

    for cls in base.Backend.__subclasses__():
        monkeypatch.setattr(cls, "compile", no_work, raising=False)
        monkeypatch.setattr(cls, "compile_learner", no_work, raising=False)
    monkeypatch.chdir(ROOT)
    before = {f: (ROOT / f).read_bytes() for f in GUARDED}
    argv = args(tmp_path)
    if command not in ("nosuch", "bench") and "--backend" not in argv:
        argv += ["--backend", "host"]
    code = dispatch([command, *argv])
    out = capsys.readouterr()
    assert code == 2 and out.out == "", out
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and words in lines[0], out.err
    assert {f: (ROOT / f).read_bytes() for f in GUARDED} == before
    assert not list(ROOT.glob("summary.md")) and not list(ROOT.glob("fig*.png"))


def test_the_report_stops_in_one_line_on_a_kernel_that_crashes(tmp_path, capsys, monkeypatch):
    """The report's later sections run the kernel in its own process: a candidate that crashed in its isolated
    runs stops the report there (exit 2, one line naming the crash), before anything runs it in process."""
    from repro.backends import base

    source = (ROOT / KERNEL).read_text().replace("if (threadIdx.x != 0 || blockIdx.x != 0) return;",
                                                 "if (threadIdx.x != 0 || blockIdx.x != 0) return;\n"
                                                 "    *(volatile float*)0 = 1.0f;")
    (tmp_path / "crash.cu").write_text(source)

    here = os.getpid()  # the isolated workers (forked) compile it, as they must
    for cls in base.Backend.__subclasses__():
        def compile_(self, source, *a, real=cls.compile, **k):
            assert os.getpid() != here or not source.origin.endswith("crash.cu"), \
                "the crashing kernel was loaded into the report's process"
            return real(self, source, *a, **k)

        monkeypatch.setattr(cls, "compile", compile_)
    code = dispatch(["report", "--kernel", str(tmp_path / "crash.cu"), "--out", str(tmp_path / "r"), "--backend",
                     "host"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 2 and "crashes (SIGSEGV)" in err[-1], err  # its progress line, then the error
    assert not (tmp_path / "r" / "summary.md").exists()


def _command(*args) -> list[str]:
    return [sys.executable, "-m", "analysis", *map(str, args)]


COMMANDS = ("gate", "report", "bench", "replay", "toy", "study")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_closed_or_full_stdout_is_one_line_exit_2(command, monkeypatch, capsys):
    """``>&-`` (Python's stdout is None) and ``> /dev/full``: exit 2 and one line on stderr, for every command
    (in-process: the policy is the dispatcher's; one real process of each kind below)."""
    monkeypatch.setattr(sys, "stdout", None)
    assert dispatch([command, "--help"]) == 2
    assert capsys.readouterr().err == f"{command}: error: stdout is closed: the output would be lost " \
                                      "(>/dev/null discards it)\n"
    if Path("/dev/full").exists():
        with open("/dev/full", "w") as full:
            monkeypatch.setattr(sys, "stdout", full)
            assert dispatch([command, "--help"]) == 2
        assert capsys.readouterr().err == f"{command}: error: the output could not be written " \
                                          "(No space left on device)\n"


@pytest.mark.parametrize("redirect, words", [(">&-", "stdout is closed"),
                                             (">/dev/full", "the output could not be written (No space left")])
def test_a_closed_or_full_stdout_in_a_real_process(redirect, words):
    if redirect == ">/dev/full" and not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    done = subprocess.run(["sh", "-c", f'exec "$@" {redirect}', "sh", *_command("replay", "tests/data/sample_trace.csv",
                                                                              "--backend", "host")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and lines == [f"replay: error: {words}" + lines[0].split(words, 1)[-1]], done.stderr


def test_a_closed_stderr_is_said_on_stdout_before_any_work():
    done = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", *_command("gate", "no/such.cu")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout.startswith("gate: error: stderr is closed")


def _interrupt(argv: list, after: str | None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Start ``argv``, press Ctrl-C (SIGINT to its process group, as a terminal does) once a stderr line contains
    ``after`` (None: half a second in, while it imports), and collect what it says."""
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,  # SIGINT's own handling: a runner may have ignored it
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    if after is None:
        time.sleep(0.5)  # past the interpreter's own start (before it, SIGINT kills Python outright)
    else:
        for line in proc.stderr:
            seen.append(line)
            if after in line:
                break
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(argv, proc.returncode, out, "".join(seen) + err)


def _ctrl_c():
    raise KeyboardInterrupt


def _while_reporting_it():  # pytest 9.2's report of a Ctrl-C can raise (a frame whose line number is None)
    try:
        _ctrl_c()
    except KeyboardInterrupt:
        raise TypeError("unsupported operand type(s) for -: 'NoneType' and 'int'") from None


def _cutting_an_import_short():  # a C extension whose initialisation the Ctrl-C cut (matplotlib's ft2font)
    try:
        _ctrl_c()
    except KeyboardInterrupt as err:
        raise ImportError("initialization failed") from err


def _caused_by_something_else():  # an explicit cause does not hide the Ctrl-C being handled
    try:
        _ctrl_c()
    except KeyboardInterrupt:
        raise ImportError("initialization failed") from ValueError("a cause of its own")


@pytest.mark.parametrize("make, said", [(_ctrl_c, "interrupted"), (_while_reporting_it, "interrupted"),
                                        (_cutting_an_import_short, "interrupted"),
                                        (_caused_by_something_else, "interrupted"),
                                        (lambda: 1 - None, "internal error: TypeError")])
def test_an_error_a_ctrl_c_caused_is_the_ctrl_c(make, said, capsys, monkeypatch):
    """An exception raised while a Ctrl-C was handled, or caused by one, ends as the Ctrl-C, without a traceback
    under --debug (seen in about 1 run in 100 of the bench's Ctrl-C test: pytest's TypeError, matplotlib's
    ImportError); any other exception is an internal error."""
    from analysis.cli import policy
    monkeypatch.setattr(policy, "_interrupted", False)  # put back after: this process goes on
    monkeypatch.setattr(signal, "signal", lambda *a: signal.SIG_DFL)  # _fail's own SIGINT handling, not this worker's
    with pytest.raises(BaseException) as raised:
        make()
    assert policy._fail("probe", raised.value, debug=True) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith(f"probe: error: {said}") and (len(lines) == 1) == (said == "interrupted"), lines
    assert policy._interrupted == (said == "interrupted")


@pytest.mark.parametrize("command, args, after", [
    ("gate", [], None),  # while importing; the other moments (1-3 s each, the slow job) end through other code:
    # policy.leave after a run (toy, report) and the child pytest's run (bench)
    pytest.param("toy", ["--controller", "fixed", "--steps", "1000000", "--backend", "host"], "toy: fixed (",
                 marks=pytest.mark.slow),  # mid-run
    pytest.param("report", ["--backend", "host", "--out", "{tmp}"], "[1/5]",  # while the gate's child processes run
                 marks=pytest.mark.slow),
    pytest.param("bench", ["--mode", "host ctypes", "--out", "{tmp}"], "bench: run",  # as the child pytest starts
                 marks=pytest.mark.slow),  # (the child gets the SIGINT too)
])
def test_ctrl_c_at_any_moment_is_one_line_exit_2(command, args, after, tmp_path):
    done = _interrupt(_command(command, *[a.replace("{tmp}", str(tmp_path)) for a in args]), after)
    errors = [ln for ln in done.stderr.splitlines() if "error:" in ln or "Traceback" in ln or "KeyboardInterrupt" in ln]
    assert done.returncode == 2 and errors == [f"{command}: error: interrupted"], done.stderr


def test_an_internal_error_is_one_line_and_debug_shows_the_traceback(monkeypatch, capsys):
    """The same policy for every command, here the toy (the gate's own test is in test_gate_cli.py)."""
    from analysis.cli import toy

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(toy, "one_run", broken)
    monkeypatch.setattr(toy, "compile_subject", lambda *a, **k: None)
    argv = ["--controller", "fixed", "--backend", "host", "--steps", "10"]
    assert toy.main(argv) == 2
    assert capsys.readouterr().err == "toy: error: internal error: RuntimeError: boom (run with --debug for the traceback)\n"
    assert toy.main([*argv, "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.endswith("toy: error: internal error: RuntimeError: boom "
                                               "(run with --debug for the traceback)\n")


def test_traces_as_spreadsheets_save_them_are_read(tmp_path, capsys):
    """A byte-order mark and CRLF line ends (as Excel writes CSV) give the same replay as the plain file."""
    from analysis.cli import replay

    plain = ROOT / "tests" / "data" / "sample_trace.csv"
    saved = tmp_path / "excel.csv"
    saved.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes().replace(b"\n", b"\r\n"))
    assert replay.main([str(plain), "--backend", "host"]) == 0
    expected = capsys.readouterr().out
    assert replay.main([str(saved), "--backend", "host"]) == 0
    assert capsys.readouterr().out == expected and "over 60 steps" in expected


def test_a_kernel_with_a_bom_is_named_as_such(tmp_path):
    bom = tmp_path / "bom.cu"
    bom.write_bytes(b"\xef\xbb\xbf" + (ROOT / KERNEL).read_bytes())
    with pytest.raises(SuiteError, match="starts with a UTF-8 byte-order mark"):
        load_kernel(bom, "rl_q_distill_lambda_controller")


def test_long_work_shows_progress_from_the_start(monkeypatch, capsys):
    """The toy reports every tenth of a long run on stderr (the threshold lowered here to keep the test short);
    the study's per-block lines are checked in test_study.py, the report's here."""
    from analysis.cli import report, toy

    monkeypatch.setattr(toy, "LONG_STEPS", 100)
    assert toy.main(["--controller", "fixed", "--backend", "host", "--steps", "100"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("toy: fixed (kernels/rl_q_distill_lambda_controller.cu) on host, 100 steps")
    assert err[1:] == [f"toy: step {t} of 100" for t in range(10, 100, 10)]

    def stop(*a, progress, **k):
        progress("[1/5] first line")
        raise SuiteError("stopped")

    monkeypatch.setattr(report, "measure", stop)
    assert report.main(["--backend", "host", "--out", "/tmp/never-written"]) == 2
    assert capsys.readouterr().err.splitlines() == ["report: [1/5] first line", "report: error: stopped"]


def test_the_dispatcher_without_a_command_is_one_line(capsys):
    from analysis.cli.policy import dispatch

    assert dispatch([]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("analysis: error: no command given (one of: gate, report")
    assert dispatch(["--help"]) == 0 and "commands:" in capsys.readouterr().out


def test_ctrl_c_waits_while_the_command_imports(tmp_path, monkeypatch):
    """Ctrl-C halfway through an import breaks it (numpy's C extension makes it an ImportError; importlib can
    swallow it and the command runs on: 5 of 200 SIGINTs into `toy`'s first 0.8 s, measured): SIGINT is blocked
    while the dispatcher imports the command's module and unblocked before the command runs."""
    from analysis import cli
    from analysis.cli import policy

    (tmp_path / "rlq_probe_command.py").write_text(
        "import signal\nBLOCKED = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])\n"
        "def main(argv):\n    global RUNS_BLOCKED\n"
        "    RUNS_BLOCKED = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])\n    return 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "probe", ("rlq_probe_command", "a probe of the import"))
    assert policy.dispatch(["probe"]) == 0
    import rlq_probe_command as probe

    assert probe.BLOCKED and not probe.RUNS_BLOCKED
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


@pytest.mark.slow  # 2 s: a gate on a hanging candidate in a process of its own
def test_ctrl_c_on_a_hanging_candidate_ends_the_gate_at_once():
    """Ctrl-C while the gate waits on a hung worker: one line, exit 2, and no worker outlives the gate (they are
    killed, not asked to stop: a polite stop waited 5 s for a worker inside the hung kernel). How soon is a timing,
    not asserted here (a wall-clock bound fails on a loaded machine, not on a wrong gate)."""
    argv = _command("gate", "tests/candidates/hang_always.cu", "--backend", "host")
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(1.5)  # past the start-up, inside a group's limit on a hung worker
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and err.strip().splitlines()[-1] == "gate: error: interrupted", err
    deadline = time.monotonic() + 10  # an orphaned worker that was killed waits for init to reap it
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _group_alive(proc.pid), "a worker outlived the interrupted gate"


def _group_alive(pgid: int) -> bool:
    """Whether any process of the process group ``pgid`` is still there."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_missing_run_dependency_stops_the_tests_in_one_line():
    """pandas and matplotlib (the run group) are needed everywhere: without one, pytest says so once, exit 4."""
    code = "import sys, pytest; sys.modules['pandas'] = None; sys.exit(pytest.main(['--co', '-q', 'tests/test_spec.py']))"
    done = commands.python(code, timeout=60)
    said = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 4 and said == ["ERROR: missing pandas: the tests need the dependency groups (pip install "
                                             "--group test, pip >= 25.1), or run them with tox, which installs them"], \
        done.stderr
