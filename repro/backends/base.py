"""What every backend offers: compile a kernel source, run it per step or looped.

Arrays crossing this interface are NumPy float32 unless a method says
"device": those take the backend's own arrays (``backend.xp``), so that the
benchmark and the closed loop keep their state where the kernel runs.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

import numpy as np

from repro.core.contract import Slots
from repro.core.errors import SuiteError
from repro.core.kernel_source import KernelSource
from repro.core.paths import ROOT


def cache_dir() -> Path:
    """Where compiled kernels live: the host's shared libraries, the coverage builds, NVRTC's CUBINs and PTX —
    ``$RLQ_CACHE_DIR``, else ``rlq`` in the user's cache folder (``$XDG_CACHE_HOME``, else ``~/.cache``). Never in
    the checkout (refused there): a change under review could otherwise bring a build of its own, named by the hash
    of a source it does not hold, for the gate to load (every entry is found by the hash of its inputs, never
    checked against them)."""
    if os.environ.get("RLQ_CACHE_DIR"):
        folder = Path(os.environ["RLQ_CACHE_DIR"])
    else:
        try:
            folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlq"
        except RuntimeError:  # no $HOME and no home in the password database
            raise SuiteError("the build cache has no folder: set RLQ_CACHE_DIR (or HOME)") from None
    if Path(os.path.realpath(folder)).is_relative_to(os.path.realpath(ROOT)):
        raise SuiteError(f"the build cache {folder} lies inside the checkout, where a change under review could "
                         "bring builds of its own: give RLQ_CACHE_DIR a folder outside it")
    return folder


#: Set in a confined process (:func:`repro.runners.confine.keep_caches_in`): there the build cache is read, never
#: written — a write outside the scratch folder is an attempt, which ends the process.
READ_ONLY_CACHE = "RLQ_READ_ONLY_CACHE"


def keep_in_cache(path: Path, data: bytes) -> None:
    """Write ``data`` to the cache file ``path`` atomically (a reader beside it sees all of it or nothing: a file of
    its own, synced, then renamed), except in a confined process (:data:`READ_ONLY_CACHE`); a cache that cannot be
    written (a read-only folder) is left be."""
    if os.environ.get(READ_ONLY_CACHE):
        return
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{path.stem}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


class CompiledKernel(ABC):
    """A controller compiled for one backend, with the looped harness around it."""

    source: KernelSource
    slots: Slots

    def _check_looped(self, isv, kl, target, pad: int = 0) -> None:
        """One ISV row per run (or a window of them), and KL/target traces of the same ``[T, S]`` shape."""
        rows = (kl.shape[1], self.slots.isv_len)
        shape_ok = isv.shape == rows if not pad else isv.shape == (2 * pad + rows[0] * rows[1],)
        if not shape_ok or target.shape != kl.shape:
            raise SuiteError(f"looped run: shapes disagree (isv {isv.shape}, kl {kl.shape}, target {target.shape})")

    def outside_state(self):
        """The state this build keeps outside the ISV: a :class:`repro.backends.host_state.HostState` (the host
        build's own writable data, against its load image), or None where the backend cannot read it."""
        return None

    def _check_batch(self, isv) -> None:
        if not (isv.flags.c_contiguous and isv.dtype == np.float32 and isv.shape[-1] == self.slots.isv_len):
            raise SuiteError("batched step needs a C-contiguous float32 [S, isv_len] ISV")

    @abstractmethod
    def run_per_step(self, isv0: np.ndarray, kl: np.ndarray, target: np.ndarray,
                     pad: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """One kernel launch per step on one ISV (``[isv_len]``), as a training loop does.

        Per step ``t``: write ``kl[t]`` and ``target[t]`` into their slots, launch,
        read λ. Returns ``(λ after each step [T], the final ISV)``. With ``pad``,
        ``isv0`` is a window (:func:`repro.core.isv.new_window`): the kernel gets the
        address ``pad`` floats in, and the whole window comes back.
        """

    @abstractmethod
    def run_looped(self, isv0: np.ndarray, kl: np.ndarray, target: np.ndarray,
                   pad: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """All steps of all runs in one harness call.

        ``isv0`` is ``[S, isv_len]`` (with ``pad``: a flat window around the S rows);
        ``kl`` and ``target`` are step-major ``[T, S]``; any dtype and layout (each backend converts them to
        C-contiguous float32: the inference passes strided views).
        Returns ``(λ [T, S], final ISVs [S, isv_len] or the final window)``.
        """

    @abstractmethod
    def run_as_threads(self, isv: np.ndarray, coords: np.ndarray, dims: tuple[int, ...], pad: int = 0) -> np.ndarray:
        """The controller once per ISV row ``i`` (``[n, isv_len]``), as thread ``coords[i]`` of a launch.

        ``coords`` is uint32 ``[n, 6]``: threadIdx x, y, z, blockIdx x, y, z;
        ``dims`` is blockDim x, y, z, gridDim x, y, z. Returns the final rows
        (with ``pad``: ``isv`` is a flat window around the rows, returned whole).
        """

    @abstractmethod
    def batched_step(self, isv) -> None:
        """Device: one controller step on each row of ``isv`` (``[S, isv_len]``), in place."""

    def run_private(self, lambda0, kl, target, out) -> None:
        """Device: the register-resident throughput harness (optional: the benchmark's throughput modes need it).

        ``kl`` and ``out`` are chunk-major ``[T/4, S, 4]`` float32 (T a multiple of 4 steps);
        ``lambda0`` and ``target`` are ``[S]``. See :func:`chunked` for the layout.
        """
        raise SuiteError(f"{type(self).__name__}: this backend has no throughput harness (run_private)")


#: ``rlq_learn``'s array arguments after the ISV, in its parameter order (``kernels/learning_loop.cuh``), with dtypes.
LEARN_INPUTS = {"seed": np.uint64, "beta": np.float64, "aux_reward": np.float64, "view": np.int64,
                "kl_site": np.int64, "kl_before": np.int64, "aux_odd": np.int64, "features": np.int64,
                "cum": np.float64, "next_state": np.int64, "reward": np.float64, "terminated": np.uint8,
                "initial_cum": np.float64, "par": np.float64, "dims": np.int64}
#: Its outputs, ``[evaluations, runs]`` each, in parameter order.
LEARN_OUTPUTS = {"lam": np.float32, "agree_mean": np.float64, "log10_agree_min": np.float64, "kl_ema": np.float64,
                 "episode_return": np.float64, "agree_unique": np.float64, "log10_min_unique": np.float64,
                 "n_unique": np.float64, "agree_odd": np.float64, "log10_min_odd": np.float64,
                 "agree_replay": np.float64, "log10_min_replay": np.float64, "quiet_floor_run": np.float64}


class Learner(ABC):
    """A controller compiled into the learning study's loop (``kernels/learning_loop.cuh``)."""

    @abstractmethod
    def start(self, isv: np.ndarray, inputs: dict[str, np.ndarray], n_evals: int,
              scratch: int) -> Callable[[], dict[str, np.ndarray]]:
        """Begin every step of every run (one ISV row each, ``[N, isv_len]`` seeded with λ); call the result to wait.

        ``inputs`` holds :data:`LEARN_INPUTS`; ``scratch`` is the doubles of state one run needs. The returned
        function gives :data:`LEARN_OUTPUTS` as NumPy ``[n_evals, N]`` arrays. (On the GPU each start runs on a
        stream of its own, so that several controllers' runs share the device; the host runs it at once.)
        """

    @abstractmethod
    def elementary(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The loop's own ``(exp(x), log(x))`` (float64, NumPy), to measure their error and compare backends."""


def learn_arguments(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The inputs as contiguous arrays of the kernel's dtypes, in its parameter order."""
    return [np.ascontiguousarray(inputs[k], dtype=dtype) for k, dtype in LEARN_INPUTS.items()]


class Backend(ABC):
    """A way to execute kernel sources (``host``: C++ compiler + ctypes; ``cupy``: NVRTC); registered, with its
    recipe, in :mod:`repro.backends`."""

    name: str  # set by repro.backends.get_backend from the registry
    xp = np  # array module of the device arrays

    @abstractmethod
    def compile(self, source: KernelSource, slots: Slots) -> CompiledKernel:
        """Compile (cached by content) or raise a one-line :class:`SuiteError`."""

    def compile_learner(self, source: KernelSource, slots: Slots) -> Learner:
        """The controller inside the learning study's loop (compiled and cached like :meth:`compile`; optional: the
        learning studies need it)."""
        raise SuiteError(f"{self.name} backend: no learning loop (compile_learner)")

    def check_compiles(self, source: KernelSource, slots: Slots) -> None:
        """Raise the one-line compile error, if any, without running candidate code in this process.

        (NVRTC runs no candidate code on the host, so compiling is enough; the host backend overrides it.)
        """
        self.compile(source, slots)

    @abstractmethod
    def describe(self) -> str:
        """The device, in words (GPU name, or the CPU and compiler)."""

    @property
    def math(self):
        """``exp`` and ``log`` over the device's float64 arrays, for the closed-loop toy: ``xp``'s own here (the host
        backend's are glibc's, the same bits on every x86-64 machine)."""
        return self.xp


def chunked(trace: np.ndarray) -> np.ndarray:
    """A step-major ``[T, S]`` trace in the throughput harness's layout ``[T/4, S, 4]`` (T a multiple of 4)."""
    steps, runs = trace.shape
    if steps % 4:
        raise ValueError(f"the throughput harness takes whole chunks of 4 steps, not {steps}")
    return np.ascontiguousarray(trace.reshape(steps // 4, 4, runs).transpose(0, 2, 1))


def unchunked(chunks: np.ndarray) -> np.ndarray:
    """Inverse of :func:`chunked`: ``[T/4, S, 4]`` back to step-major ``[T, S]``."""
    n, runs, _ = chunks.shape
    return np.ascontiguousarray(chunks.transpose(0, 2, 1).reshape(n * 4, runs))
