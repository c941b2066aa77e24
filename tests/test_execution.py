"""How a candidate is built and run: discovery, the host shim's CUDA semantics, the thread probe, coverage."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from repro.core.f32 import F32
from repro.core.kernel_source import KernelSource, load_kernel
from tests import commands


def test_approximate_intrinsics_are_found_with_their_lines():
    src = KernelSource("// __expf(x) in a comment\nfloat y = __expf(x);\nfloat z = __fdividef(a, b) + __fdiv_rn(a, b);\n",
                       "k", "t.cu")
    assert src.approximate_intrinsics() == [("__expf", 2), ("__fdividef", 3)]


# A probe "controller": reads inputs from slots 0..5, writes CUDA intrinsics' results to 10..15.
_PROBE = """
extern "C" __global__ void probe(float* v) {
    v[10] = __saturatef(v[0]);
    v[11] = fmaf(v[1], v[1], v[2]);
    v[12] = __fmul_rn(v[1], v[1]) + v[2];
    v[13] = __uint_as_float(__float_as_uint(v[3]) ^ 0x80000000u);
    v[14] = fminf(v[4], v[5]);
    v[15] = __fdiv_rn(v[1], v[5]);
    v[16] = __int_as_float(__float2int_rn(v[3]));
    v[17] = max(v[4], v[5]);
    v[18] = __int_as_float(__popc(__float_as_uint(v[3])) + __clz(__float_as_int(v[3])));
    v[19] = __uint_as_float(__brev(__float_as_uint(v[3])));
}
"""


def _probe(backend, contract, inputs):
    from repro.core.isv import new_isv

    kernel = backend.compile(KernelSource(_PROBE, "probe", "probe.cu"), contract.slots)
    isv = new_isv(contract.slots, 0.1)[0]
    isv[: len(inputs)] = inputs
    _, final = kernel.run_per_step(isv, isv[[contract.slots.kl]], isv[[contract.slots.target]])
    return final[10:20]


def test_host_intrinsics_have_cudas_semantics(contract, host):
    a = F32(1 + 2.0**-12)  # a·a = 1 + 2^-11 + 2^-24: only a fused multiply-add keeps the 2^-24
    out = _probe(host, contract, np.array([np.nan, a, -(1 + 2.0**-11), 2.5, np.nan, 3.0], dtype=F32))
    assert out[0].view(np.uint32) == 0, "__saturatef(NaN) is +0"
    assert out[1] == F32(2.0**-24) and out[2] == 0.0, "fmaf is fused, __fmul_rn then + is not"
    assert out[3] == -2.5 and out[4] == 3.0 and out[5] == F32(a / F32(3.0))
    assert out[6].view(np.int32) == 2 and out[7] == 3.0, "2.5 rounds to even; max(NaN, 3) is 3"
    # 2.5f is 0x40200000: bits 30 and 21 set, so popc 2, clz 1, and reversed: bits 1 and 10.
    assert out[8].view(np.int32) == 2 + 1 and out[9].view(np.uint32) == (1 << 1) | (1 << 10)


@pytest.mark.parametrize("x,expected", [(np.nan, 0), (3.5, 4), (-2.5, -2), (1e10, 2**31 - 1), (-np.inf, -(2**31))])
def test_float_to_int_saturates_as_on_the_gpu(contract, host, x, expected):
    out = _probe(host, contract, np.array([0, 1, 0, x, 0, 0], dtype=F32))
    assert out[6].view(np.int32) == expected


@pytest.mark.gpu
def test_intrinsics_agree_bit_for_bit_with_nvrtc(contract, host):
    from repro.backends import get_backend

    rng = np.random.default_rng(0)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1.0, 0.5, 2.0], dtype=F32)
    for _ in range(20):
        inputs = rng.choice(np.concatenate([special, rng.standard_normal(10).astype(F32)]), 6).astype(F32)
        cpu, gpu = _probe(host, contract, inputs), _probe(get_backend("cupy"), contract, inputs)
        # A NaN result is a NaN on both; its payload is not CUDA's to keep (the GPU returns its canonical
        # NaN 0x7FFFFFFF, the CPU propagates the operand's, as the suite's NaN comparisons allow everywhere).
        both_nan = np.isnan(cpu) & np.isnan(gpu)
        assert np.array_equal(cpu.view(np.uint32)[~both_nan], gpu.view(np.uint32)[~both_nan]), inputs
        assert np.array_equal(np.isnan(cpu), np.isnan(gpu)), inputs


def test_single_thread_probe(contract, backend):
    """Played as other threads of a grid, the fixed kernel leaves the ISV alone; without its guard it does not."""
    from repro.runners.probes import GRID_COORDS, single_thread
    from repro.runners.scenarios import REF_TARGET

    entry = contract.controller("fixed")
    fixed = load_kernel(entry.kernel, entry.symbol)
    guardless = fixed.with_edit("if (threadIdx.x != 0 || blockIdx.x != 0) return;", "", "no guard")
    for src, others in ((fixed, False), (guardless, True)):
        probe = single_thread(backend.compile(src, contract.slots), entry.value("seed_lambda"), REF_TARGET)
        for row in probe.changed.values():
            assert row[GRID_COORDS.index((0, 0))] is True
            assert all(c is others for coord, c in zip(probe.coords, row, strict=True) if coord != (0, 0))


def test_coverage_of_the_fixed_kernel_is_complete(contract, host):
    """The gate's own experiments run every line and both arcs of every branch of the fixed kernel."""
    from repro.runners import coverage

    if coverage.gcov_unavailable():
        pytest.skip(coverage.gcov_unavailable())
    entry = contract.controller("fixed")
    src = load_kernel(entry.kernel, entry.symbol)
    cov = coverage.measure(host, src, contract.slots, entry, timeout=20)
    write_line = src.text.splitlines().index("    isv[RL_Q_DISTILL_LAMBDA_INDEX] = lambda;") + 1
    assert cov.complete and not cov.faults, cov.summary()
    assert write_line in cov.lines and cov.branches_total >= 2 * 3  # three if statements, two arcs each at least


def test_out_of_bounds_writes_are_reported_with_their_offset(contract, host):
    from repro.runners.runner import run_scenarios
    from repro.runners.scenarios import catalogue

    entry = contract.controller("fixed")
    src = load_kernel(entry.kernel, entry.symbol)
    bad = src.with_edit("isv[RL_Q_DISTILL_LAMBDA_INDEX] = lambda;",
                        "isv[RL_Q_DISTILL_LAMBDA_INDEX] = lambda; isv[600] = 1.0f; isv[-1] = 1.0f;", "oob")
    runs = run_scenarios(host.compile(bad, contract.slots), catalogue(entry)[:1], "per_step")
    assert runs[0].stray == [-1, 600]
    # the guarded region is reused by the next run of its size: nothing of the stray writes is carried over
    runs = run_scenarios(host.compile(src, contract.slots), catalogue(entry)[:1], "per_step")
    assert runs[0].stray == []


def test_a_run_reads_nothing_an_earlier_run_left_below_its_window(contract, host):
    """Below a run's window, in the slack of its page rounding, a write is not seen (no canary there) and a read
    finds zeros, as in a fresh mapping, whichever runs came before: a kernel reading out of bounds gets the same
    λ before and after another kernel wrote there."""
    import mmap

    from repro.core.isv import PAD
    from repro.runners.runner import run_scenarios
    from repro.runners.scenarios import catalogue

    window = 4 * (2 * PAD + contract.slots.isv_len)
    if -window % mmap.PAGESIZE < 4:
        pytest.skip("a window that fills its pages leaves no slack below it")
    entry = contract.controller("fixed")
    src, below = load_kernel(entry.kernel, entry.symbol), f"isv[-{PAD + 1}]"
    set_lambda = "isv[RL_Q_DISTILL_LAMBDA_INDEX] = lambda;"
    writer = src.with_edit(set_lambda, f"{set_lambda} {below} = 0.25f;", "writes below")
    reader = src.with_edit(set_lambda, f"isv[RL_Q_DISTILL_LAMBDA_INDEX] = lambda + {below};", "reads below")
    scenario = catalogue(entry)[:1]

    def read():
        return run_scenarios(host.compile(reader, contract.slots), scenario, "per_step")[0].lam

    before = read()
    assert run_scenarios(host.compile(writer, contract.slots), scenario, "per_step")[0].stray == []
    assert np.array_equal(read().view(np.uint32), before.view(np.uint32))


def test_static_rules_see_local_memory_and_atomics(contract):
    """PTX of the fixed kernel: no atomics, no local memory; a volatile local and an atomic show up."""
    from repro.backends import ptx

    if ptx.nvrtc_unavailable():
        pytest.skip(ptx.nvrtc_unavailable())
    entry = contract.controller("fixed")
    src = load_kernel(entry.kernel, entry.symbol)
    clean = ptx.analyse(src)
    assert clean.atomics == () and clean.local_accesses == 0 and clean.registers is not None
    edited = src.with_edit("isv[RL_Q_DISTILL_LAMBDA_INDEX] = lambda;",
                           "volatile float spill = lambda;\n    atomicExch(isv + RL_Q_DISTILL_LAMBDA_INDEX, spill);", "local")
    dirty = ptx.analyse(edited)
    assert dirty.local_accesses > 0 and any(a.startswith("atom.") for a in dirty.atomics)


def test_without_nvrtc_the_gate_says_the_static_rules_did_not_run(contract, host, monkeypatch):
    from analysis.cli.evaluate import evaluate
    from repro.backends import ptx

    monkeypatch.setattr(ptx, "nvrtc_unavailable", lambda: "static checks: NVRTC not available (test)")
    entry = contract.controller("fixed")
    src = load_kernel(entry.kernel, entry.symbol)
    verdict = evaluate(src, "fixed", host, contract, coverage=False)
    assert "static checks not run: static checks: NVRTC not available (test)" in verdict.notes
    assert not {"no_atomics", "resources"} & {f.key for f in verdict.findings}


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_timeout_must_be_positive(value, capsys):
    from analysis.cli import gate

    assert gate.main(["--backend", "host", "--timeout", value]) == 2
    assert "--timeout must be a positive number" in capsys.readouterr().err


def test_a_crash_while_loading_the_kernel_is_an_execution_row(contract, host):
    """Host code run at load time (no NVRTC to refuse it) kills a worker, never the gate."""
    from pathlib import Path

    from analysis.cli.evaluate import evaluate

    path = Path(__file__).parent / "candidates" / "load_time_crash.cu"
    src = KernelSource(path.read_text(), "rl_q_distill_lambda_controller", str(path))
    verdict = evaluate(src, "fixed", host, contract, timeout=5, static=False, coverage=False)
    from analysis.present import render

    row = next(f for f in verdict.failed if f.key == "execution")
    assert "crash (SIGABRT while loading the kernel)" in render.where(row.where)
    assert all(f.scenario == "" for f in verdict.evidence.faults)


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_spawned_worker_compiles_and_answers_like_a_forked_one(contract, host, method):
    """A device backend's workers are not forked from the gate (CUDA does not survive a fork): they come from a
    forkserver (cupy) or a spawn and compile the kernel themselves: the same paths, tried on the host."""
    from repro.runners.campaign import run_group
    from repro.runners.isolation import Worker

    entry = contract.controller("fixed")
    src = load_kernel(entry.kernel, entry.symbol)
    worker = Worker(host, src, contract.slots, entry)
    worker.method = method
    try:
        answer = worker.ask(("nonfinite", None), timeout=60)
    finally:
        worker.stop()
    here = run_group(host.compile(src, contract.slots), entry, "nonfinite")
    assert answer.ok and [r[1] for r in answer.value] == [r[1] for r in here]
    assert all(np.array_equal(a[0].view(np.uint32), b[0].view(np.uint32)) for a, b in zip(answer.value, here, strict=True))


def test_a_ctrl_c_while_a_worker_starts_is_answered_and_the_worker_ignores_it(contract, host, ctrl_c_raises):
    """Ctrl-C pressed while a worker is being started reaches the command once it has started (it was
    ignored for the start, and lost: the command ran on to its end), and that worker is killed, not orphaned;
    a worker itself ignores SIGINT."""
    import multiprocessing as mp
    import os
    import signal

    from repro.runners import isolation

    class PressedDuringStart(mp.get_context("fork").Process):
        def start(self):
            super().start()
            os.kill(os.getpid(), signal.SIGINT)

    started = PressedDuringStart(target=time.sleep, args=(60,), daemon=True)
    with pytest.raises(KeyboardInterrupt):
        isolation._start_deaf_to_ctrl_c(started)
    assert started.exitcode == -signal.SIGKILL  # not left running, forgotten by the caller the Ctrl-C ended
    entry = contract.controller("fixed")
    worker = isolation.Worker(host, load_kernel(entry.kernel, entry.symbol), contract.slots, entry)
    try:
        assert worker.ask(("nonfinite", None), timeout=60).ok
        os.kill(worker.proc.pid, signal.SIGINT)
        assert worker.ask(("nonfinite", None), timeout=60).ok and worker.proc.is_alive()
    finally:
        worker.stop()


@pytest.mark.slow  # a fresh interpreter (multiprocessing's resource tracker not yet running) and a spawn: 1 s
@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_spawned_worker_starts_with_ctrl_c_blocked(method):
    """The first spawned or forkserver's (GPU) worker of a process inherits SIGINT blocked too: starting
    multiprocessing's resource tracker, which either does first, unblocks it, and the worker then started with
    Ctrl-C live (a traceback of its own during its imports)."""
    code = ("import multiprocessing as mp, signal\n"
            "from repro.runners.isolation import _start_deaf_to_ctrl_c\n"
            "probe = 'import signal, sys; sys.exit(0 if signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []) else 3)'\n"
            f"p = mp.get_context({method!r}).Process(target=exec, args=(probe,))\n"
            "_start_deaf_to_ctrl_c(p)\n"
            "p.join(60)\n"
            "raise SystemExit(p.exitcode)\n")
    done = commands.python(code)
    assert done.returncode == 0, f"the spawned worker's SIGINT was not blocked (exit {done.returncode})\n{done.stderr}"


def test_a_forked_worker_ends_when_its_parent_does(contract, host):
    """The parent's end of the pipe closed (the parent killed, or interrupted before it could stop the worker):
    the worker reads the end of the pipe and exits, instead of waiting on its own inherited copy of that end."""
    from repro.runners.isolation import Worker

    entry = contract.controller("fixed")
    worker = Worker(host, load_kernel(entry.kernel, entry.symbol), contract.slots, entry)
    try:
        assert worker.ask(("nonfinite", None), timeout=60).ok
        worker.conn.close()
        worker.proc.join(timeout=10)
        assert worker.proc.exitcode == 0
    finally:
        worker.discard()  # killed if still alive; its scratch folder removed


def test_a_forkserver_worker_ends_when_the_command_is_killed(tmp_path):
    """A command killed from outside (SIGKILL: no stop) takes its forkserver's workers with it, a worker hung in
    the candidate's loop (which never reads its pipe's end) included: the server ends at the end of its pipe from
    the command, and each worker dies with the server."""
    import os
    import signal
    import subprocess
    import sys

    from repro.core.paths import ROOT

    code = ("import os, time\n"
            "from repro.backends import get_backend\n"
            "from repro.core.contract import CONTRACTS, load\n"
            "from repro.core.kernel_source import load_kernel\n"
            "from repro.runners.isolation import Worker\n"
            "contract = load(CONTRACTS); entry = contract.controller('fixed')\n"
            "hangs = load_kernel('tests/candidates/hang_always.cu', entry.symbol)\n"
            "w = Worker(get_backend('host'), hangs, contract.slots, entry)\n"
            "w.method = 'forkserver'\n"
            "assert w.send(('nonfinite', None)) is None\n"
            "print(w.proc.pid, flush=True)\n"
            "time.sleep(60)\n")
    from tests.commands import environment

    # its scratch folder in tmp_path: a command killed by SIGKILL removes nothing
    command = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                               env=environment(ROOT, TMPDIR=str(tmp_path)))
    try:
        worker = int(command.stdout.readline())
        assert Path(f"/proc/{worker}").exists()
    finally:
        command.kill()
        command.wait()
    from repro.runners.isolation import _state

    deadline = time.monotonic() + 10
    while _state(worker) not in ("", "Z", "X") and time.monotonic() < deadline:  # gone, or dead and not yet reaped
        time.sleep(0.02)
    outlived = _state(worker) not in ("", "Z", "X")
    if outlived:  # not left spinning a core after the test
        os.kill(worker, signal.SIGKILL)
    assert not outlived, "the worker outlived the command"


def _hang_in_a_worker(answers, host, source, slots, entry, scratch_in: str) -> None:
    import tempfile

    from repro.runners.isolation import Worker

    tempfile.tempdir = scratch_in  # this "gate" is SIGKILLed: nothing of it runs to remove its worker's folder
    worker = Worker(host, source, slots, entry)
    worker._start()
    answers.put(worker.proc.pid)
    worker.ask(("per_step", None), timeout=600)  # the candidate never returns


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # dead, perhaps not yet reaped
    except FileNotFoundError:
        return True


def test_a_worker_whose_parent_left_without_reading_ends_quietly(contract, host, capfd):
    """The parent's end closed with the worker's "ready" still unread: the worker's read fails with a reset, not
    an end of file, and it ends in silence (it had answered with a send to the closed pipe, and a traceback)."""
    from repro.runners.isolation import Worker

    entry = contract.controller("fixed")
    worker = Worker(host, load_kernel(entry.kernel, entry.symbol), contract.slots, entry)
    worker.proc, worker.conn = proc, conn = worker._launch()
    try:
        time.sleep(0.5)  # "ready" sent, never read
        conn.close()
        proc.join(timeout=10)
        assert proc.exitcode == 0 and "Traceback" not in capfd.readouterr().err
    finally:
        worker.discard()  # its scratch folder removed


def test_a_candidate_that_always_hangs_ends_in_an_execution_row(contract, host):
    """tests/candidates/hang_always.cu in process: each group it hangs in ends at its limit as a time-out, the
    execution row fails, and every row those groups fed is "not measured" (failing, not violated). A fixed 0.2-s
    limit (``--timeout``): the derived limits spin the candidate 0.5 s a group, which the command-line test
    spends in the slow job (test_candidates)."""
    from analysis.cli.evaluate import evaluate
    from repro.core.paths import ROOT

    source = load_kernel(ROOT / "tests" / "candidates" / "hang_always.cu", contract.controller("fixed").symbol)
    verdict = evaluate(source, "fixed", host, contract, timeout=0.2, static=False, coverage=False)
    faults = verdict.evidence.faults
    assert faults and {f.kind for f in faults} == {"timeout"}, faults
    assert {f.group for f in faults} <= set(verdict.evidence.limits.per_group)
    failed = {f.key: f for f in verdict.failed}
    assert [k for k, f in failed.items() if "not_measured" not in f.detail] == ["execution"], failed
    assert {"floor", "guards", "nonfinite", "isolation"} <= set(failed)
    # ``--timeout`` is the user's own limit: wall-clock time, nothing waited for
    assert verdict.evidence.limits.waits == () and {f.detail for f in faults} == {"no answer within 0.2 s"}


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_a_hung_worker_dies_with_its_parent(contract, host, tmp_path):
    """The gate killed from outside (a CI job's time limit, SIGKILL) while its worker spins in a hung candidate:
    the worker, which never reads its pipe again, is killed too instead of spinning a core for ever."""
    import multiprocessing as mp
    import os
    import signal

    from repro.core.paths import ROOT

    entry = contract.controller("fixed")
    source = load_kernel(ROOT / "tests" / "candidates" / "hang_always.cu", entry.symbol)
    host.check_compiles(source, contract.slots)
    ctx = mp.get_context("fork")
    answers = ctx.Queue()
    gate = ctx.Process(target=_hang_in_a_worker, args=(answers, host, source, contract.slots, entry, str(tmp_path)))
    gate.start()
    worker = answers.get(timeout=60)
    time.sleep(0.2)  # inside the candidate's loop by now
    os.kill(gate.pid, signal.SIGKILL)
    gate.join()
    deadline = time.monotonic() + 10
    while not _gone(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not _gone(worker):
        os.kill(worker, signal.SIGKILL)
        pytest.fail("the worker outlived its parent")


def test_a_worker_let_go_without_a_stop_leaves_no_folder_when_its_process_exits(tmp_path):
    """A process that made a worker and let go of it neither stopped nor discarded (a script, a test session: no
    ``python -m analysis`` to remove leftovers last) removes the worker's scratch folder when it exits."""
    import os

    from repro.runners import confine

    if confine.unavailable():
        pytest.skip(f"{confine.unavailable()}: a worker gets no scratch folder of its own")
    code = ("from repro.backends import get_backend\n"
            "from repro.core.contract import CONTRACTS, load\n"
            "from repro.runners.isolation import Worker\n"
            "contract, host = load(CONTRACTS), get_backend('host')\n"
            # built here, as the gate builds it: a confined worker may not write the build cache
            "host.check_compiles(contract.source('fixed'), contract.slots)\n"
            "worker = Worker(host, contract.source('fixed'), contract.slots, contract.controller('fixed'))\n"
            "assert worker.ask(('nonfinite', None), timeout=60).ok\n"
            "assert len(worker.folders) == 1, worker.folders\n")
    done = commands.python(code, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.glob("rlq-*")) == []


def test_a_ctrl_c_while_a_worker_starts_leaves_no_folder(contract, host, tmp_path, monkeypatch):
    """A Ctrl-C while a worker starts (answered by killing it: :func:`repro.runners.isolation._start_deaf_to_ctrl_c`)
    leaves no scratch folder: the worker has no pid the folder could be kept under until a stop."""
    import tempfile

    from repro.runners import confine, isolation

    if confine.unavailable():
        pytest.skip(f"{confine.unavailable()}: a worker gets no scratch folder of its own")

    def pressed_during_start(proc) -> None:
        proc.start()
        proc.kill()
        proc.join()
        raise KeyboardInterrupt

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(isolation, "_start_deaf_to_ctrl_c", pressed_during_start)
    entry = contract.controller("fixed")
    worker = isolation.Worker(host, load_kernel(entry.kernel, entry.symbol), contract.slots, entry)
    with pytest.raises(KeyboardInterrupt):
        worker._launch()
    assert worker.folders == {} and sorted(p.name for p in tmp_path.glob("rlq-*")) == []


@pytest.mark.slow  # two isolated gatherings of a hanging and crashing candidate (about 4 s each)
def test_groups_started_side_by_side_after_a_hang_give_what_they_give_in_turn(contract, host, monkeypatch):
    """After the first hang the groups left start together (repro.runners.isolation.GroupRunner.ask_together):
    the same faults, skipped scenarios, scenarios run, λ bits and behaviour as when each waits for the one before.
    The candidate hangs on a NaN KL and crashes on KL = −inf, so side-by-side groups fail and are searched."""
    from repro.runners import isolation
    from repro.runners.gather import gather

    guard = "if (threadIdx.x != 0 || blockIdx.x != 0) return;"
    source = contract.source("fixed").with_edit(guard, guard + (
        "\n    { float k = isv[RL_Q_DISTILL_KL_EMA_INDEX]; if (k != k) for (volatile int s = 0; s >= 0; s = s | 1) {}"
        " if (k == -INFINITY) *(volatile float*)0 = 1.0f; }"), "hangs on NaN, crashes on -inf")
    controller = contract.controller("fixed")
    sent = []
    together = isolation.GroupRunner.ask_together
    monkeypatch.setattr(isolation.GroupRunner, "ask_together",
                        lambda self, groups: sent.append(groups) or together(self, groups))

    def evidence():
        ev = gather(host, source, contract.slots, controller, static=False, coverage=False, inference=True)
        runs = {g: [(r.scenario.name, r.lam.view(np.uint32).tobytes()) for r in getattr(ev, g)]
                for g in ("catalogue", "per_step", "guards", "nonfinite", "dead_zone", "vanishing")}
        return [(f.group, f.scenario, f.kind) for f in ev.faults], ev.skipped, runs, ev.groups_run, ev.behaviour

    side_by_side = evidence()
    assert sent and {"crash", "timeout"} <= {kind for _, _, kind in side_by_side[0]}
    monkeypatch.setattr(isolation.GroupRunner, "ask_together", lambda self, groups: {})
    assert side_by_side == evidence()


def _stopped_worker(host, contract):
    """A started worker for the fixed kernel whose limits count CPU time, then stopped (SIGSTOP) as a
    loaded host's scheduler or a stalled disk might leave it: the request sent next waits in its pipe."""
    import os
    import signal

    from repro.runners.isolation import Worker

    entry, source = contract.controller("fixed"), contract.source("fixed")
    host.check_compiles(source, contract.slots)
    worker = Worker(host, source, contract.slots, entry, cpu_time=True)
    assert worker._start() is None
    os.kill(worker.proc.pid, signal.SIGSTOP)
    return worker


def test_a_worker_kept_waiting_is_not_a_hang_and_the_wait_is_on_the_record(contract, host):
    """A limit derived from the reference counts the CPU time the worker used: stopped for 1.5× its limit, then
    let go, it answers in full with no fault, and the wait is in the evidence the execution row shows."""
    import os
    import signal
    import threading

    from repro.runners.isolation import Clock, GroupRunner

    entry = contract.controller("fixed")
    with _stopped_worker(host, contract) as worker:
        resume = threading.Timer(0.75, os.kill, (worker.proc.pid, signal.SIGCONT))
        resume.start()
        try:
            got, faults, _ = GroupRunner(worker, entry, {"catalogue": 0.5}, Clock(None)).run("catalogue")
        finally:
            resume.join()
    assert faults == [] and len(got["catalogue"]) > 0
    assert len(worker.waits) == 1 and worker.waits[0].startswith("catalogue: answered after ")
    assert worker.waits[0].endswith("against a 0.5-s limit of CPU time")


def test_a_worker_that_never_runs_is_ended_at_the_wall_clock_cap(contract, host):
    """A worker that uses no CPU (a candidate asleep or blocked, or a machine that never runs it) is ended at
    STALL_CAP × its limit, and the fault says what it used."""
    from repro.runners import isolation

    entry = contract.controller("fixed")
    with _stopped_worker(host, contract) as worker:
        _, faults, _ = isolation.GroupRunner(worker, entry, {"onsets": 0.2}, isolation.Clock(None)).run("onsets")
    (fault,) = faults
    assert fault.kind == "timeout" and f"{isolation.STALL_CAP:g}× its 0.2-s limit, in which it used 0 s of CPU" in fault.detail
    assert worker.waits == []


def _waiting(worker, thread) -> str:
    """Where a stuck ask waits: the asking thread's innermost frames, and the worker's threads' kernel states."""
    import sys
    import traceback

    frame = sys._current_frames().get(thread.ident)
    asking = " < ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in traceback.extract_stack(frame)[::-1][:6])
    pid = worker.proc.pid if worker.proc is not None else None
    tasks = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")) if pid else ():
        def read(name, task=task):
            try:
                return (task / name).read_text().split(")")[-1].strip()
            except OSError:
                return "?"
        tasks.append(f"{task.name} {read('stat').split(' ')[0]} in {read('wchan')} (syscall {read('syscall').split(' ')[0]})")
    return (f"asking at {asking}; worker {pid} answering {worker._asked!r}, confined: {pid in worker.watches}, "
            f"threads: {'; '.join(tasks) or 'none'}")


@pytest.mark.parametrize("name, kind, says", [
    ("close_pipe", "crash", "it closed its pipe to the gate and lived on"),
    ("half_reply", "timeout", "a message cut short (1 of 256 bytes): the candidate wrote into the gate's pipe"),
])
def test_a_candidate_that_meddles_with_its_pipe_is_ended(contract, host, name, kind, says, monkeypatch):
    """tests/candidates/close_pipe.cu closes every descriptor above stderr (the pipe to the gate, and the one
    multiprocessing watches for the process's end) and spins; half_reply.cu writes the start of a reply into them
    and sleeps. The gate once waited on either for ever: each ends as a fault naming what it did.

    Its own limits are the bound: ``limit`` s to start, ``limit`` s to answer, then at most REPLY_GRACE s for a
    frame and 5 s for a killed worker's end (``Worker._ended``); past them the failure says where each side waits.
    The grace is shortened here (its 2 s are the suite's longest wait); the slow job gates half_reply.cu with it."""
    import threading

    from repro.core.paths import ROOT
    from repro.runners import isolation
    from repro.runners.isolation import Worker

    monkeypatch.setattr(isolation, "REPLY_GRACE", 0.5)
    limit = 30.0
    entry = contract.controller("fixed")
    source = load_kernel(ROOT / "tests" / "candidates" / f"{name}.cu", entry.symbol)
    host.check_compiles(source, contract.slots)
    answers = []
    with Worker(host, source, contract.slots, entry, startup=limit) as worker:
        asking = threading.Thread(target=lambda: answers.append(worker.ask(("nonfinite", None), timeout=limit)),
                                  daemon=True)
        asking.start()
        asking.join(2 * limit + isolation.REPLY_GRACE + 10)
        assert not asking.is_alive(), f"the gate waited on the worker past its own limits: {_waiting(worker, asking)}"
    (answer,) = answers
    assert answer.fault == (kind, says)


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts descriptors in /proc (Linux)")
def test_a_worker_whose_pipe_lies_past_fd_setsize_answers(contract, host):
    """A busy process (a training job running ``pytest --kernel``) can hand the worker's pipe a descriptor past
    FD_SETSIZE (1024), which ``select`` refuses: the gate reads its replies all the same."""
    import os
    import resource

    from repro.runners.campaign import run_group
    from repro.runners.isolation import Worker

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"this machine allows {hard} descriptors a process, not the 1100 the test needs")
    entry = contract.controller("fixed")
    src = load_kernel(entry.kernel, entry.symbol)
    if soft != resource.RLIM_INFINITY and soft < 1100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1100, hard))
    held = []
    try:
        while not held or held[-1] < 1030:
            held.append(os.open(os.devnull, os.O_RDONLY))
        with Worker(host, src, contract.slots, entry) as worker:
            answer = worker.ask(("nonfinite", None), timeout=30)
            assert worker.conn.fileno() > 1024  # the premise
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert answer.ok, answer.fault
    assert [r[1] for r in answer.value] == [r[1] for r in run_group(host.compile(src, contract.slots), entry, "nonfinite")]


def test_the_forkserver_starts_early_deaf_to_ctrl_c():
    """``start_server`` starts a forkserver backend's server before any worker, with SIGINT blocked in it (its
    workers inherit it so); a fork backend's is nothing to start. In a fresh interpreter: one this process already
    runs would say nothing of this start, and stopping it waits for every worker it ever made."""
    code = ("import sys\n"
            "from dataclasses import replace\n"
            "from multiprocessing import forkserver\n"
            "from pathlib import Path\n"
            "from repro import backends\n"
            "from repro.runners import isolation\n"
            "isolation.start_server('host')\n"
            "assert forkserver._forkserver._forkserver_pid is None, 'a fork backend started a server'\n"
            "backends.REGISTRY['host'] = replace(backends.REGISTRY['host'], start_method='forkserver')\n"
            "isolation.start_server('host')\n"
            "pid = forkserver._forkserver._forkserver_pid\n"
            "status = Path(f'/proc/{pid}/status').read_text().splitlines()\n"
            "blocked = next(int(line.split()[1], 16) for line in status if line.startswith('SigBlk:'))\n"
            "sys.exit(0 if blocked & (1 << (2 - 1)) else 3)\n")
    done = commands.python(code)
    assert done.returncode == 0, f"exit {done.returncode} (3: SIGINT not blocked in the server)\n{done.stderr}"


def test_a_ctrl_c_while_the_forkserver_starts_is_answered_after():
    """A Ctrl-C pressed while the server starts is held, then raised once it has started (never lost). In a fresh
    interpreter: a Ctrl-C sent to a test runner's process may reach another of its threads, and be run after the
    test (an xdist worker once crashed on it)."""
    code = ("import os, signal, sys\n"
            "from multiprocessing import forkserver\n"
            "from repro.runners import isolation\n"
            "started = []\n"
            "def ensure_running():\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    started.append(True)\n"
            "forkserver.ensure_running = ensure_running\n"
            "try:\n"
            "    isolation._forkserver()\n"
            "except KeyboardInterrupt:\n"
            "    sys.exit(0 if started == [True] else 4)\n"
            "sys.exit(3)\n")
    done = commands.python(code)
    assert done.returncode == 0, f"exit {done.returncode} (3: the Ctrl-C was lost)\n{done.stderr}"


@pytest.mark.parametrize("candidate", ["device_helpers", pytest.param("crash_null_write", marks=pytest.mark.slow)])
def test_the_gate_through_a_forkserver_judges_as_through_forks(contract, host, monkeypatch, candidate):
    """The GPU backend's way (a forkserver started as the gate begins, its workers confined after they load the
    kernel, a crashed worker replaced from it), tried on the host: the same rows, the same verdict as forked
    workers give, for a refactor and for a candidate that crashes."""
    from dataclasses import replace

    from analysis.cli.evaluate import evaluate
    from repro import backends
    from repro.core.paths import ROOT
    from repro.runners import isolation

    source = load_kernel(ROOT / "tests" / "candidates" / f"{candidate}.cu", contract.controller("fixed").symbol)
    judged = lambda: evaluate(source, "fixed", host, contract, static=False, coverage=False)  # noqa: E731
    forked = judged()
    monkeypatch.setitem(backends.REGISTRY, "host", replace(backends.REGISTRY["host"], start_method="forkserver"))
    methods = []
    launch = isolation.Worker._launch
    monkeypatch.setattr(isolation.Worker, "_launch", lambda self: methods.append(self.method) or launch(self))
    served = judged()
    assert methods and set(methods) == {"forkserver"}
    assert [(f.key, f.ok) for f in served.findings] == [(f.key, f.ok) for f in forked.findings]
    assert served.ok == (candidate == "device_helpers")


def test_the_forkserver_imports_its_preload_wherever_the_command_runs(tmp_path):
    """A command run from another folder, the suite importable only through its own sys.path (a script, pytest's
    rootdir): the forkserver still imports the module that ties its life to the command's (it would skip it,
    silently, from a fresh interpreter's path), and so its workers have it."""
    import os
    import subprocess
    import sys

    from repro.core.paths import ROOT

    code = ("import sys\n"
            f"sys.path.insert(0, {str(ROOT)!r})\n"
            "from repro.runners import isolation\n"
            "def probe():\n"
            "    sys.exit(0 if 'repro.runners.forkserver_start' in sys.modules else 7)\n"
            "if __name__ == '__main__':\n"
            "    isolation._forkserver()\n"
            "    p = isolation._context('forkserver').Process(target=probe)\n"
            "    p.start(); p.join(60)\n"
            "    sys.exit(p.exitcode)\n")
    (tmp_path / "probe.py").write_text(code)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "probe.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**env, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr}"
