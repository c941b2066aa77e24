"""A candidate's code runs confined (repro/runners/confine.py): it writes only in its worker's scratch folder,
starts no process, opens no socket; an attempt is a failing execution row that names it, and nothing outside
the scratch folder changes. Where no sandbox can be installed the gate says so, and --require-sandbox exits 2."""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
from pathlib import Path

import pytest

from analysis.cli.evaluate import evaluate
from analysis.cli.policy import dispatch
from repro.core import scratch
from repro.core.contract import ROOT
from repro.core.kernel_source import load_kernel
from repro.runners import confine, plain
from tests import commands

CANDIDATES = Path(__file__).parent / "candidates"
ESCAPES = sorted(CANDIDATES.glob("escape_*.cu"))
SYMBOL = "rl_q_distill_lambda_controller"
MARKER = "gate_escape_marker.txt"  # the file each hostile candidate would leave in the folder it was started from


def expected_text(path: Path) -> str:
    """The ``// expect-text:`` of a candidate's header: the attempt its execution row must name."""
    return next(line.partition(":")[2].strip() for line in path.read_text().splitlines()
                if line.startswith("// expect-text:"))


@pytest.fixture
def sandbox():
    why = confine.unavailable()
    if why:
        pytest.skip(why)


@pytest.fixture
def started_here(tmp_path, monkeypatch):
    """The gate started from an empty folder of its own (the candidates write to ``$PWD``)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", str(tmp_path))
    return tmp_path


def test_a_write_outside_the_scratch_folder_is_an_execution_row_and_writes_nothing(sandbox, started_here, contract,
                                                                                   host):
    """The host-only fopen of escape_write.cu, in process: every worker that ran it was ended, the row names
    the file it tried to open, and the folder the gate was started from is still empty."""
    path = CANDIDATES / "escape_write.cu"
    verdict = evaluate(load_kernel(path, SYMBOL), "fixed", host, contract)
    row = next(f for f in verdict.findings if f.key == "execution")
    assert not row.ok
    attempts = [f for f in row.detail["faults"] if "sandbox" in f]
    assert attempts and all(f"tried to open {started_here / MARKER} for writing" in f for f in attempts), row.detail
    assert list(started_here.iterdir()) == []


@pytest.mark.slow  # the fixed kernel's gate once more (the suite runs it confined elsewhere, without this folder check)
def test_the_fixed_kernel_is_not_hindered_by_its_sandbox(sandbox, started_here, contract, host):
    """The reference runs confined too (its coverage build writes its counters inside its scratch folder)."""
    entry = contract.controller("fixed")
    verdict = evaluate(load_kernel(entry.kernel, SYMBOL), "fixed", host, contract)
    assert verdict.ok, [(f.key, f.detail) for f in verdict.failed]
    coverage = next(f for f in verdict.findings if f.key == "coverage")
    assert coverage.measured, coverage.detail  # counters were written and read back
    assert list(started_here.iterdir()) == []


def _gate(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = dispatch(["gate", *args])
    return code, out.getvalue(), err.getvalue()


def test_without_a_sandbox_the_gate_says_so_and_require_sandbox_exits_2(monkeypatch):
    reason = "sandbox: seccomp is not permitted here (a test's stand-in)"
    monkeypatch.setattr(confine, "unavailable", lambda: reason)
    code, out, err = _gate(str(ROOT / "kernels" / "rl_q_distill_lambda_controller.cu"), "--require-sandbox")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"gate: error: {reason} (--require-sandbox)"], err


@pytest.mark.slow  # a gate process each (2-3 s)
@pytest.mark.parametrize("path", ESCAPES, ids=[p.stem for p in ESCAPES])
def test_each_escape_through_the_cli_changes_nothing(path, tmp_path):
    """As a CI job runs it: from a folder of its own, exit 1, the execution row naming the attempt, no marker."""
    if confine.unavailable():
        pytest.skip(confine.unavailable())
    verdict = tmp_path / "out" / "verdict.json"
    verdict.parent.mkdir()
    mode = tmp_path.stat().st_mode  # escape_chmod.cu's target
    done = commands.run("gate", path, "--backend", "host", "--json", verdict, cwd=tmp_path, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    row = next(p for p in json.loads(verdict.read_text())["properties"] if p["key"] == "execution")
    assert not row["ok"] and any(expected_text(path) in f for f in row["detail"]["faults"]), row["detail"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and tmp_path.stat().st_mode == mode
    assert not (ROOT / MARKER).exists()


@pytest.mark.slow  # a pytest inside pytest (5 s)
def test_pytest_kernel_runs_the_candidate_confined(sandbox, tmp_path):
    """``pytest --kernel`` judges a candidate through the gate's workers: escape_write.cu fails its execution test
    naming the attempt, and the folder pytest was started from gets no marker (pytest-benchmark's own storage
    folder aside)."""
    path = CANDIDATES / "escape_write.cu"
    junit = tmp_path / "junit" / "pytest.xml"
    run_in = tmp_path / "cwd"
    run_in.mkdir()
    done = commands.run("pytest", f"--kernel={path}", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                        "--benchmark-disable", "--rootdir", ROOT, "-c", ROOT / "pyproject.toml",
                        "-k", "execution and host", f"--junitxml={junit}", ROOT / "tests" / "test_properties.py",
                        cwd=run_in, timeout=120)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr
    assert f"the candidate tried to open {run_in / MARKER} for writing" in junit.read_text(), done.stdout[-2000:]
    assert [p.name for p in run_in.iterdir() if p.name != ".benchmarks"] == []


def _confined_gpu_child(conn, scratch: str) -> None:
    """A spawned GPU worker's life in short: CUDA and NVRTC start, the sandbox goes on, kernels run, then an
    escape is tried (a socket) after answering."""
    import socket

    from repro.backends import get_backend
    from repro.core.contract import CONTRACTS, load
    from repro.runners.campaign import run_group

    confine.keep_caches_in(Path(scratch))  # as repro.runners.isolation's worker: before CUDA starts
    contract = load(CONTRACTS)
    entry = contract.controller("fixed")
    kernel = get_backend("cupy").compile(load_kernel(entry.kernel, entry.symbol), contract.slots)
    confine.confine(conn, Path(scratch), forked=False)
    runs = run_group(kernel, entry, "nonfinite")
    run_group(kernel, entry, "threads")  # its grid module is compiled on first use: NVRTC under the sandbox
    conn.send(("ran", len(runs)))
    with contextlib.suppress(OSError):
        socket.socket()
    conn.send(("survived", None))


@pytest.mark.gpu
def test_a_confined_gpu_worker_runs_kernels_and_its_escape_is_named(tmp_path):
    """On the GPU: CUDA keeps working under the sandbox (launches, copies, a lazily compiled module), and an
    attempt made afterwards still ends the worker with the attempt named."""
    import multiprocessing as mp
    import multiprocessing.reduction as reduction

    if confine.unavailable():
        pytest.skip(confine.unavailable())
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_confined_gpu_child, args=(child, str(tmp_path)), daemon=True)
    proc.start()
    child.close()
    try:
        assert parent.poll(120), "the worker did not confine itself"
        assert plain.loads(parent.recv_bytes())[0] == "confined"
        watch = confine.SyscallWatch(reduction.recv_handle(parent), proc.pid, tmp_path)
        assert parent.poll(120)
        kind, n = parent.recv()
        assert kind == "ran" and n > 0, (kind, n)
        proc.join(60)
        assert watch.attempt == "the candidate tried to open a socket (socket)", watch.attempt
    finally:
        proc.kill()


@pytest.mark.slow  # a gate process with an empty build cache: the reference is built again (2-4 s in all)
def test_a_candidate_is_gated_with_an_empty_build_cache(tmp_path):
    """The reference kernel is built in the gate's process, not in its confined worker (which may not write the
    cache): with an empty cache every candidate's gate ended with exit 2, "the reference kernel … did not load"."""
    if confine.unavailable():
        pytest.skip(confine.unavailable())
    done = commands.run("gate", CANDIDATES / "date_bomb.cu", cwd=tmp_path, timeout=120,
                        env=commands.environment(tmp_path, RLQ_CACHE_DIR=str(tmp_path / "cache")))
    assert done.returncode == 1 and "device_view" in done.stdout, done.stdout + done.stderr


def _confined(body, scratch: Path) -> tuple[int | None, str | None]:
    """``(exit code, None)`` of ``body`` run by :func:`confine.run_confined`, or ``(None, the attempt it named)``."""
    try:
        return confine.run_confined(body, scratch), None
    except confine.Escaped as err:
        return None, str(err)


def _syscall(nr: int, *args) -> int:
    """A raw system call from the confined child: its errno, 0 when it succeeded."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return 0 if libc.syscall(nr, *args) >= 0 else ctypes.get_errno()


_AT_FDCWD = -100


def _metadata_calls(target: Path) -> dict:
    """Calls that change a file's metadata by path, a machine's libseccomp may not know by name (numbers from 424 on
    are every architecture's): each is an attempt on a file outside the scratch folder."""
    import ctypes

    path = ctypes.c_char_p(str(target).encode())
    return {
        "fchmodat2": (452, lambda: _syscall(452, _AT_FDCWD, path, 0o777, 0)),
        "setxattrat": (463, lambda: _syscall(463, _AT_FDCWD, path, 0, ctypes.c_char_p(b"user.x"), None, 0)),
        "removexattrat": (466, lambda: _syscall(466, _AT_FDCWD, path, 0, ctypes.c_char_p(b"user.x"))),
        "file_setattr": (469, lambda: _syscall(469, _AT_FDCWD, path, None, 0, 0)),
        "utime": (132, lambda: _syscall(132, path, None)),  # x86-64's number: glibc's utime() calls utimensat
    }


@pytest.mark.parametrize("call", ["fchmodat2", "setxattrat", "removexattrat", "file_setattr",
                                  *(["utime"] if platform.machine() == "x86_64" else [])])
def test_a_metadata_change_outside_the_scratch_folder_is_named_and_changes_nothing(sandbox, tmp_path, call):
    """Calls outside the allow-list, some newer than the machine's libseccomp knows by name (then named by number):
    a chmod 0777 or an mtime of 1970 on a file outside, as root, which Landlock alone would not stop."""
    scratch, target = tmp_path / "scratch", tmp_path / "outside.txt"
    scratch.mkdir()
    target.write_text("theirs")
    target.chmod(0o644)
    before = target.stat()
    number, make = _metadata_calls(target)[call]
    code, attempt = _confined(lambda: make() and 0, scratch)
    assert code is None and attempt in (f"the candidate tried to make the system call {name}" for name in (call, number))
    after = target.stat()
    assert (after.st_mode, after.st_mtime_ns) == (before.st_mode, before.st_mtime_ns)


def test_another_process_s_limits_and_priority_are_named_and_left_alone(sandbox, tmp_path):
    """prlimit64 on the gate (an RLIMIT_AS of 64 MiB set on it hangs it for good), setpriority of another process."""
    import resource

    me = os.getpid()
    limits, nice = resource.getrlimit(resource.RLIMIT_NOFILE), os.getpriority(os.PRIO_PROCESS, me)
    assert _confined(lambda: resource.prlimit(me, resource.RLIMIT_NOFILE, (3, limits[1])) and 0, tmp_path) == \
        (None, "the candidate tried to change another process's resource limits (prlimit64)")
    assert _confined(lambda: os.setpriority(os.PRIO_PROCESS, me, 19) or 0, tmp_path) == \
        (None, "the candidate tried to change a process's priority (setpriority)")
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == limits and os.getpriority(os.PRIO_PROCESS, me) == nice


def test_kernel_objects_that_outlive_the_run_are_named(sandbox, tmp_path):
    import ctypes

    shmget = ctypes.CDLL(None, use_errno=True).shmget
    assert _confined(lambda: shmget(0, 4096, 0o1000 | 0o600) and 0, tmp_path) == \
        (None, "the candidate tried to make a kernel object that outlives the run (shmget)")


def test_a_call_outside_the_allow_list_is_named_and_one_s_own_limits_go_through(sandbox, tmp_path):
    """Deny by default: pinning another process, the mount API and a call newer than any kernel the list was measured
    on are each an attempt named by the call; reading and setting one's own limits is on the list."""
    import resource

    parent = os.getpid()
    for call, body in (("sched_setaffinity", lambda: os.sched_setaffinity(parent, {0}) or 0),
                       ("fsopen", lambda: _fsopen() or 0), ("520", lambda: _syscall(520) and 0)):
        assert _confined(body, tmp_path) == (None, f"the candidate tried to make the system call {call}"), call

    def own_limits() -> int:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard))
        return 0 if resource.getrlimit(resource.RLIMIT_NOFILE) == (soft - 1, hard) else 3

    assert _confined(own_limits, tmp_path) == (0, None)


def test_a_signal_on_a_ready_descriptor_to_another_process_is_named(sandbox, tmp_path):
    """F_SETOWN + F_SETSIG + O_ASYNC let a confined child have the kernel deliver a signal to the gate's own process
    whenever a descriptor became ready (SIGKILL would end the gate), where Landlock cannot scope signals (ABI < 6):
    fcntl is allowed for the commands measured only."""
    import fcntl

    def body() -> int:
        fcntl.fcntl(os.open(os.devnull, os.O_RDONLY), fcntl.F_SETOWN, os.getppid())
        return 0

    assert _confined(body, tmp_path) == (None, f"the candidate tried to use fcntl command {fcntl.F_SETOWN} (not among "
                                               "F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_GETLK, F_SETLK, F_SETLKW, "
                                               "F_DUPFD_CLOEXEC, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW)")


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="arch_prctl is x86-64's")
def test_the_cpu_state_permission_query_goes_through_and_another_arch_prctl_is_named(sandbox, tmp_path):
    """PyTorch's oneDNN asks for the AMX tile permission (arch_prctl ARCH_GET_XCOMP_SUPP/PERM, ARCH_REQ_XCOMP_PERM)
    in a confined study on an Intel host: those operations act on the process alone and go through (the query may
    answer an errno on an old kernel: never an attempt); another operation (ARCH_GET_CPUID) is named with its
    number."""
    import ctypes

    def query() -> int:
        supported = ctypes.c_uint64(0)
        _syscall(158, 0x1021, ctypes.byref(supported))
        return 0

    assert _confined(query, tmp_path) == (0, None)
    assert _confined(lambda: _syscall(158, 0x1011, 0) and 0, tmp_path) == (
        None, "the candidate tried to use arch_prctl operation 0x1011 (not among ARCH_GET_XCOMP_SUPP, "
              "ARCH_GET_XCOMP_PERM, ARCH_REQ_XCOMP_PERM)")


def test_a_thread_names_itself_and_makes_an_event_counter_but_another_prctl_is_named(sandbox, tmp_path):
    """A thread's start (the CUDA driver's, PyTorch's) names the thread (prctl PR_SET_NAME) and may make an event
    counter (eventfd2) and a pipe (pipe2, O_CLOEXEC: PyTorch's CUDA start in the confined study on an H100): each
    acts on the process alone and goes through; another prctl option (PR_SET_PTRACER, which would let another
    process trace this one) is named with its number."""
    import ctypes

    def own_name_counter_and_pipe() -> int:
        libc = ctypes.CDLL(None, use_errno=True)
        named = libc.prctl(15, b"rlq-test", 0, 0, 0) == 0
        os.close(os.eventfd(0))
        for fd in os.pipe2(os.O_CLOEXEC):
            os.close(fd)
        return 0 if named else 3

    assert _confined(own_name_counter_and_pipe, tmp_path) == (0, None)
    tracer = lambda: ctypes.CDLL(None).prctl(0x59616D61, 0, 0, 0, 0) and 0  # noqa: E731
    assert _confined(tracer, tmp_path) == (
        None, "the candidate tried to use prctl option 0x59616d61 (not among PR_SET_NAME, PR_GET_NAME)")


def test_the_audit_log_lists_a_call_outside_the_list_and_lets_it_go_on(sandbox, tmp_path, monkeypatch):
    """How the allow-list is measured on a new machine (RLQ_SANDBOX_AUDIT): the call is logged with its arguments and
    answered as unconfined; the run is not an attempt."""
    log = tmp_path / "audit.jsonl"
    monkeypatch.setenv(confine.AUDIT_VAR, str(log))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert _confined(lambda: 0 if os.uname().sysname else 3, scratch) == (0, None)
    calls = [json.loads(line)["call"] for line in log.read_text().splitlines()]
    assert "uname" in calls, calls


def _fsopen() -> None:
    code = _syscall(430, b"tmpfs", 0)
    if code:
        raise OSError(code, os.strerror(code))


def test_the_child_holds_no_capability_even_as_root(sandbox, tmp_path):
    """Root's capabilities let a worker make a block device and write a disk through it, or mark a file immutable
    (both work as CI's root); the confined child gives up every one."""

    def body() -> int:
        lines = Path("/proc/self/status").read_text().splitlines()
        status = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
        return 0 if all(int(status[k], 16) == 0 for k in ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb")) else 3

    assert _confined(body, tmp_path) == (0, None)


def test_metadata_and_device_nodes_are_attempts_inside_the_scratch_folder_too(sandbox, tmp_path):
    """Landlock does not check them: outside the allow-list, a chmod or a FIFO is an attempt inside the scratch
    folder too, decided by the call alone (no path is read), and changes nothing."""
    mine = tmp_path / "mine.txt"
    mine.write_text("the child's own")
    mine.chmod(0o600)
    assert _confined(lambda: os.chmod(mine, 0o777) or 0, tmp_path) == \
        (None, "the candidate tried to make the system call chmod")
    assert _confined(lambda: os.mkfifo(tmp_path / "fifo") or 0, tmp_path) == \
        (None, "the candidate tried to make the system call mknodat")
    assert mine.stat().st_mode & 0o777 == 0o600 and not (tmp_path / "fifo").exists()


def test_a_terminal_push_a_file_flag_and_a_lease_are_attempts(sandbox, tmp_path):
    """TIOCSTI (its request with high bits set, which the kernel drops), FS_IOC_SETFLAGS, and a lease (one on the
    worker's /proc stat file held the gate's open 45 s)."""
    import ctypes
    import fcntl

    libc = ctypes.CDLL(None, use_errno=True)
    null = tmp_path / "file.txt"
    null.write_text("x")

    def ioctl(request: int):
        return lambda: libc.ioctl(os.open(os.devnull, os.O_RDONLY), ctypes.c_ulong(request), ctypes.c_char_p(b"x")) and 0

    assert _confined(ioctl((1 << 32) | 0x5412), tmp_path) == \
        (None, "the candidate tried to make an ioctl the sandbox does not allow (request 0x5412)")
    assert _confined(ioctl(0x40086602), tmp_path) == \
        (None, "the candidate tried to make an ioctl the sandbox does not allow (request 0x40086602)")
    lease = lambda: fcntl.fcntl(os.open(null, os.O_RDONLY), 1024, fcntl.F_RDLCK) and 0  # noqa: E731
    _, attempt = _confined(lease, tmp_path)
    assert attempt is not None and attempt.startswith("the candidate tried to use fcntl command 1024 "), attempt


def test_a_process_group_s_priority_and_a_terminal_s_settings_are_attempts(sandbox, tmp_path):
    """setpriority(PRIO_PGRP, 0) reached the gate's whole group (who 0 is no other process, which 0 is), and a
    terminal opened read-only took TCSETS and TIOCSWINSZ: each named, nothing changed."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    nice = os.getpriority(os.PRIO_PGRP, 0)
    assert _confined(lambda: os.setpriority(os.PRIO_PGRP, 0, 7) or 0, tmp_path) == \
        (None, "the candidate tried to change a process's priority (setpriority)")
    assert os.getpriority(os.PRIO_PGRP, 0) == nice
    term = lambda: libc.ioctl(os.open(os.devnull, os.O_RDONLY), ctypes.c_ulong(0x5402), ctypes.create_string_buffer(64))  # noqa: E731
    assert _confined(lambda: term() and 0, tmp_path) == \
        (None, "the candidate tried to make an ioctl the sandbox does not allow (request 0x5402)")


def test_a_tree_deeper_than_python_recurses_is_removed(tmp_path):
    """A candidate's 1,100 nested folders ended the gate with shutil.rmtree's RecursionError and stayed in /tmp."""
    root = tmp_path / "scratch"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    for _ in range(1100):
        os.mkdir("d", dir_fd=fd)
        deeper = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = deeper
    os.close(os.open("payload", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
    os.close(fd)
    scratch.remove(root)
    assert not root.exists()


def test_the_child_is_the_out_of_memory_killer_s_first_choice(sandbox, tmp_path):
    """Memory held in a memfd counts in no RSS: the killer would pick the gate or a job beside it."""
    assert _confined(lambda: 0 if Path("/proc/self/oom_score_adj").read_text().strip() == "1000" else 3,
                     tmp_path) == (0, None)


def test_another_process_s_shared_objects_and_a_new_session_are_attempts(sandbox, tmp_path):
    """Writing into another process's SysV segment, setting its semaphore, deleting its POSIX queue, and taking a
    console as its own terminal after setsid: each call is named before the kernel looks at it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for call, body in (("shmat", lambda: libc.shmat(0, None, 0) and 0), ("semctl", lambda: libc.semctl(0, 0, 0) and 0),
                       ("mq_unlink", lambda: libc.mq_unlink(b"/rlq-none") and 0), ("setsid", lambda: os.setsid() or 0)):
        _, attempt = _confined(body, tmp_path)
        assert attempt is not None and (attempt.endswith(f"({call})") or attempt.endswith(f" {call}")), (call, attempt)


def test_an_ioctl_on_a_device_opened_in_the_sandbox_is_refused(sandbox, tmp_path):
    """Landlock (ABI 5+) refuses ioctls on a device opened after the sandbox: a loop device bound to a file outside,
    /dev/loop-control, a console. /dev/null stands in: TCGETS there is ENOTTY unconfined."""
    import ctypes
    import errno

    if confine.landlock_abi() < 5:
        pytest.skip(f"Landlock ABI {confine.landlock_abi()} here: device ioctls are ABI 5's")
    libc = ctypes.CDLL(None, use_errno=True)

    def body() -> int:
        fd = os.open(os.devnull, os.O_RDONLY)
        failed = libc.ioctl(fd, ctypes.c_ulong(0x5401), ctypes.create_string_buffer(64))  # TCGETS
        return 0 if failed and ctypes.get_errno() == errno.EACCES else 3

    assert _confined(body, tmp_path) == (0, None)
