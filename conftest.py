"""Options, markers and fixtures shared by every test.

Parametrisation runs each test over controllers × backends (every backend of
:data:`repro.backends.REGISTRY`, with its entry's markers); a device backend's
tests carry the ``gpu`` marker and are skipped, with the reason, where it does
not answer (one collection hook, not a skip in every test). ``--kernel=PATH [--contract NAME]`` puts a candidate
kernel through the same property tests in place of the in-repo controllers.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

import pytest

from repro import backends
from repro.backends import backend_unavailable, get_backend
from repro.core.contract import load
from repro.core.kernel_source import load_kernel
from tests.catalogue import contracts_file, subjects


def pytest_addoption(parser):
    """``--kernel=PATH`` (with ``=``: pytest's first parse takes a bare path after an option it does not know yet
    for a test path), ``--contract NAME``, ``--require-gpu`` and the benchmark's ``--bench-*``."""
    group = parser.getgroup("rlq", "λ-controller suite")
    group.addoption("--kernel", type=Path, help="candidate kernel .cu to judge instead of the in-repo controllers "
                    "(write --kernel=PATH)")
    group.addoption("--contract", default="fixed", help="contract entry the --kernel candidate is judged against")
    group.addoption("--contracts", type=Path, metavar="FILE",
                    help="with --kernel: the contract file it is judged against (default kernels/contracts.toml)")
    group.addoption("--require-gpu", action="store_true",
                    help="fail, instead of skipping, when the gpu tests cannot run (the GPU suite: tox -e gpu)")
    group.addoption("--bench-slow-ns", type=int, default=0, metavar="NS",
                    help="benchmarks (tests/test_bench.py): slow the controller by a busy wait of about NS ns")
    group.addoption("--bench-rounds", type=int, default=None, metavar="N",
                    help="benchmarks: N timed rounds per mode instead of each mode's own")


def missing_run_dependencies() -> list[str]:
    """The packages of pyproject.toml's ``run`` group that do not import here (every test module needs them)."""
    import importlib.util
    import re
    import tomllib

    from repro.core.paths import ROOT

    run = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]["run"]
    names = [re.match(r"[A-Za-z0-9_.-]+", r).group(0) for r in run]
    return [n for n in names if importlib.util.find_spec(n) is None]


def pytest_configure(config):
    """Bounds on the benchmark's options; a --kernel that cannot be judged is a usage error (one line), not an
    error in every test; so is a missing package of the ``run`` group (not a collection error, then dozens of
    failing command-line tests)."""
    from repro.bench import ROUNDS_MAX, SLOW_NS_MAX
    from repro.core.errors import SuiteError

    missing = missing_run_dependencies()
    if missing:
        raise pytest.UsageError(f"missing {', '.join(missing)}: the tests need the dependency groups (pip install "
                                "--group test, pip >= 25.1), or run them with tox, which installs them")
    ns, rounds = config.getoption("--bench-slow-ns"), config.getoption("--bench-rounds")
    if not 0 <= ns <= SLOW_NS_MAX:
        raise pytest.UsageError(f"--bench-slow-ns must be 0 to {SLOW_NS_MAX} ns, not {ns}")
    if rounds is not None and not 1 <= rounds <= ROUNDS_MAX:
        raise pytest.UsageError(f"--bench-rounds must be 1 to {ROUNDS_MAX}, not {rounds}")
    path, contracts = config.getoption("--kernel", default=None), config.getoption("--contracts", default=None)
    if contracts is not None and path is None:
        raise pytest.UsageError("--contracts FILE judges a --kernel candidate: give --kernel=PATH with it")
    if path is None:
        return
    try:
        load(contracts_file(config)).source(config.getoption("--contract"), path)
    except SuiteError as err:
        raise pytest.UsageError(f"--kernel: {err}") from None


def _device_unavailable(item, reasons: dict) -> str | None:
    """Why the ``gpu`` test ``item`` cannot run here: its own backend's reason where it is backend-parametrised,
    else None when any device backend answers (the first one's reason when none does)."""
    params = getattr(item, "callspec", None)
    name = params.params.get("backend_name") if params else None
    candidates = [name] if name else [e.name for e in backends.REGISTRY.values() if e.device]
    reasons_here = [reasons.setdefault(n, backend_unavailable(n)) for n in candidates]
    return None if not reasons_here or None in reasons_here else reasons_here[0]


def pytest_collection_modifyitems(config, items):
    reasons = {}
    for item in items:
        if item.get_closest_marker("gpu"):  # a marker, not a keyword (a folder named gpu is one)
            reason = _device_unavailable(item, reasons)
            if reason and config.getoption("--require-gpu"):
                raise pytest.UsageError(f"--require-gpu: {reason}")
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session", autouse=True)
def _multiprocessing_folder(tmp_path_factory):
    """multiprocessing's own folder (a GPU worker's forkserver's socket) in this session's temporary folder: an
    xdist worker ends without multiprocessing's clean-up, which would leave a ``pymp-*`` folder in the system's
    per worker and run (``python -m analysis`` puts it in its run's folder: analysis/cli/policy.py)."""
    import multiprocessing.process

    from repro.core import scratch

    config = multiprocessing.process.current_process()._config
    if config.get("tempdir") is not None:
        yield
        return
    folder = scratch.for_sockets(tmp_path_factory.getbasetemp() / "mp")
    config["tempdir"] = str(folder)
    yield
    if not folder.is_relative_to(tmp_path_factory.getbasetemp()):  # one in /tmp (a long basetemp)
        scratch.remove(folder)


@pytest.fixture(autouse=True)
def _gpu_share(request, tmp_path_factory):
    """Under pytest-xdist, a gpu test holds the device shared; one that uses ``gpu_alone`` holds it alone.

    A test that compares device timings must not run while other workers' kernels time-slice the GPU.
    """
    if "gpu_alone" in request.fixturenames or not request.node.get_closest_marker("gpu") \
            or "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    with _device_lock(tmp_path_factory, fcntl.LOCK_SH):
        yield


@pytest.fixture
def gpu_alone(tmp_path_factory):
    """The device to this test alone: every other worker's gpu test waits (see ``_gpu_share``)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    with _device_lock(tmp_path_factory, fcntl.LOCK_EX):
        yield


@contextlib.contextmanager
def _device_lock(tmp_path_factory, how: int):
    # the workers' basetemp is one folder per worker under the run's shared one
    lock = tmp_path_factory.getbasetemp().parent / "gpu.lock"
    with lock.open("a") as f:
        fcntl.flock(f, how)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def backend_params(slow_on_host: bool = False, device_only: bool = False):
    """Every registered backend with its entry's markers (a backend that is no device also ``slow`` if asked;
    only the devices if asked), for ``parametrize``."""
    return [pytest.param(e.name, id=e.name, marks=[getattr(pytest.mark, m) for m in e.marks]
                         + ([pytest.mark.slow] if slow_on_host and not e.device else []))
            for e in backends.REGISTRY.values() if e.device or not device_only]


def pytest_generate_tests(metafunc):
    if "backend_name" in metafunc.fixturenames:
        marked = metafunc.definition.get_closest_marker
        params = backend_params(slow_on_host=marked("slow_on_host") is not None,
                                device_only=marked("device_only") is not None)
        metafunc.parametrize("backend_name", params, scope="session")
    by_contract = getattr(metafunc.module, "parametrize_from_contract", None)
    if by_contract is not None:  # a test module's parameters read from the session's contract (after the backend)
        by_contract(metafunc, load(contracts_file(metafunc.config)))
    if "subject" in metafunc.fixturenames:
        candidate = metafunc.config.getoption("--kernel")
        # the suite's own controllers, read from the contract (tests/catalogue.py): a new entry is a new subject
        contract = load(contracts_file(metafunc.config))
        names = ["candidate"] if candidate else subjects(contract)
        if "prop" in metafunc.fixturenames:  # each subject with the properties its contract documents
            from analysis.judge.property_records import applicable

            judged = {n: metafunc.config.getoption("--contract") if n == "candidate" else n for n in names}
            pairs = [(n, p) for n in names for p in applicable(contract.controller(judged[n]))]
            # A candidate's ids are the gate's row names (pytest's --junitxml then lists the gate's rows).
            ids = [p if n == "candidate" else f"{n}-{p}" for n, p in pairs]
            metafunc.parametrize(("subject", "prop"), pairs, scope="session", ids=ids)
        else:
            metafunc.parametrize("subject", names, scope="session")


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in this test (a runner may have ignored it), put back after; skipped where
    the test does not run in the main thread, the only one Python's signal handlers run in."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only, and this test does not run there")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session")
def contract(request):
    """The session's contract (:func:`tests.catalogue.contracts_file`: ``--contracts FILE``, else the tracked one)."""
    return load(contracts_file(request.config))


@pytest.fixture(scope="session")
def backend(backend_name):
    return get_backend(backend_name)


@pytest.fixture(scope="session")
def host():
    return get_backend("host")


@pytest.fixture(scope="session")
def verdict_in_process(contract):
    """``(backend, kernel, against)`` → the verdict of the contract's ``kernel`` judged against entry ``against``,
    made once per session, in this process: for trusted in-repo kernels only, which neither crash nor hang
    (isolation is test_execution's and test_evidence's subject). A device build's data cannot be read, so there
    its PTX is gathered: outside_state's only evidence on a device backend."""
    from analysis.cli.evaluate import evaluate

    made: dict = {}

    def of(backend, kernel: str, against: str):
        key = (kernel, against, backend.name)
        if key not in made:
            made[key] = evaluate(contract.source(kernel), against, backend, contract,
                                 static=backend.name != "host", coverage=False, isolate=False)
        return made[key]

    return of


@pytest.fixture(scope="session")
def compiled(contract):
    """``(backend, name)`` → the contract's kernel ``name`` built once per session on ``backend``."""
    made: dict = {}

    def of(backend, name: str):
        if (name, backend.name) not in made:
            made[name, backend.name] = backend.compile(contract.source(name), contract.slots)
        return made[name, backend.name]

    return of


@pytest.fixture(scope="session")
def subject_contract(request, subject) -> str:
    """The contract entry the subject is judged against (its own, or --contract for a candidate)."""
    return request.config.getoption("--contract") if subject == "candidate" else subject


@pytest.fixture(scope="session")
def subject_source(request, contract, subject, subject_contract):
    """The kernel source under test: an in-repo controller, or the --kernel candidate."""
    entry = contract.controller(subject_contract)
    path = request.config.getoption("--kernel") if subject == "candidate" else entry.kernel
    return load_kernel(path, entry.symbol)


def pytest_benchmark_update_machine_info(config, machine_info):
    """Add the GPU (name, NVIDIA driver, CUDA and CuPy versions) and the machine's baseline tag to the JSON.

    ``python -m analysis bench`` reads ``rlq_machine`` to refuse judging or recording a run against
    another machine's baseline; pytest-benchmark's own CPU description does not name the GPU.
    """
    from repro.bench import gpu_info, machine_tag

    gpu = gpu_info()
    if gpu:
        machine_info["gpu"] = {**gpu, "driver": _nvidia_driver()}
    machine_info["rlq_machine"] = machine_tag(gpu)


def _nvidia_driver() -> str:
    """The NVIDIA driver version as nvidia-smi reports it ("unknown" without nvidia-smi)."""
    import subprocess

    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10)
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
