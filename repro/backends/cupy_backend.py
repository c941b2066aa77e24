"""The cupy backend: the same source through NVRTC (``cupy.RawModule``), on the GPU.

Per-step runs are the production pattern: per step a feed kernel writes KL
and target into the device ISV, the controller is launched ``(1,),(1,)``, and
a record kernel copies λ out, all queued on one stream with one
synchronisation at the end.

Compilation calls NVRTC directly rather than through ``cupy.RawModule``:
CuPy appends ``-ftz=true`` to every NVRTC compile it makes, after the
caller's options. Measured on the H200 (CuPy 14.2): built that way a
subnormal KL or target reads as zero and trips the ``<= 0`` guards, so the
GPU and the spec model disagree (``tests/test_agreement.py`` pins it). The
options here keep IEEE float32 semantics, as the host's flags do:
``--fmad=false`` matches ``-ffp-contract=off`` and ``--ftz=false`` keeps
subnormals. ``compile(..., cupy_defaults=True)`` builds the RawModule way.
"""

from __future__ import annotations

import contextlib
from functools import cache, partial

import numpy as np

from repro.backends.base import LEARN_OUTPUTS, Backend, CompiledKernel, Learner, keep_in_cache, learn_arguments
from repro.backends.translation_unit import (
    IDENTITY_PROGRAM,
    LEARNING_LOOP,
    NVRTC_OPTIONS,
    compile_error,
    compiler_identity,
    device_grid_unit,
    entry,
    harness_unit,
    nvrtc_cache_file,
)
from repro.core.contract import Slots
from repro.core.errors import BackendUnavailable
from repro.core.kernel_source import KernelSource

#: Adds source lines to the CUBIN (no change to the code), so compute-sanitizer names the kernel line.
LINE_INFO = "--generate-line-info"
THREADS = 256
#: Threads per block of the learning loop: few, so that one controller's runs spread over many SMs (each
#: thread runs a whole run's steps; the loop is latency-bound, not throughput-bound).
LEARN_THREADS = 32

_FEED_RECORD = r"""
extern "C" __global__ void rlq_feed(float* isv, const float* kl, const float* target, long long t) {
    isv[RLQ_KL_SLOT] = kl[t];
    isv[RLQ_TARGET_SLOT] = target[t];
}
extern "C" __global__ void rlq_record(const float* isv, float* out, long long t) {
    out[t] = isv[RLQ_LAMBDA_SLOT];
}
"""


def _import_cupy():
    try:
        import cupy
    except Exception as err:  # ImportError, or a CUDA library that fails to load
        raise BackendUnavailable(f"cupy backend: cupy does not import ({type(err).__name__}: {err})") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:
        raise BackendUnavailable(f"cupy backend: no CUDA device answers ({err})") from None
    if count < 1:
        raise BackendUnavailable("cupy backend: no CUDA device")
    return cupy


class CupyKernel(CompiledKernel):
    def __init__(self, cp, source: KernelSource, slots: Slots, options: tuple[str, ...], cupy_defaults: bool):
        self.cp, self.source, self.slots = cp, source, slots
        _module = partial(_rawmodule if cupy_defaults else _nvrtc_module, cp)
        slot_defs = (
            f"#define RLQ_LAMBDA_SLOT {slots.lambda_}\n#define RLQ_KL_SLOT {slots.kl}\n"
            f"#define RLQ_TARGET_SLOT {slots.target}\n"
        )
        if cupy_defaults:
            self.image = None
            self.step = _module(source.text, source.origin, options).get_function(source.symbol)
        else:  # the controller's own module; its image is what a native launcher loads too
            self.image = _nvrtc_image(cp, source.text, source.origin, options)
            self.step = _load(self.image).get_function(source.symbol)
        harness = _module(harness_unit(source, slots, for_device=True), source.origin, options)
        self._batched = harness.get_function("rlq_batched_step")
        self._looped = harness.get_function("rlq_looped")
        self._private = harness.get_function("rlq_looped_private")
        helpers = _module(slot_defs + _FEED_RECORD, "feed/record helpers", options)
        self._feed = helpers.get_function("rlq_feed")
        self._record = helpers.get_function("rlq_record")
        self._grid_module = lambda: _module(device_grid_unit(source, slots), source.origin, options)
        self._grid = None

    def launch(self, isv, grid=(1,), block=(1,)) -> None:
        """Device: one launch of the controller on a device ISV."""
        self.step(grid, block, (isv,))

    def run_per_step(self, isv0, kl, target, pad=0):
        cp = self.cp
        window = cp.asarray(np.asarray(isv0, dtype=np.float32).reshape(-1))
        isv = window[pad : window.size - pad]  # a view: the kernel gets the address pad floats in
        kl_d = cp.asarray(np.asarray(kl, dtype=np.float32))
        tg_d = cp.asarray(np.asarray(target, dtype=np.float32))
        out = cp.empty(kl_d.shape[0], dtype=cp.float32)
        one = ((1,), (1,))
        for t in range(kl_d.shape[0]):
            tt = np.int64(t)
            self._feed(*one, (isv, kl_d, tg_d, tt))
            self.step(*one, (isv,))
            self._record(*one, (isv, out, tt))
        return cp.asnumpy(out), cp.asnumpy(window)

    def run_looped(self, isv0, kl, target, pad=0):
        cp = self.cp
        window = cp.asarray(np.ascontiguousarray(isv0, dtype=np.float32))
        kl_d = cp.asarray(np.ascontiguousarray(kl, dtype=np.float32))
        tg_d = cp.asarray(np.ascontiguousarray(target, dtype=np.float32))
        self._check_looped(window, kl_d, tg_d, pad)
        isv = window[pad : window.size - pad] if pad else window
        n_steps, n_runs = kl_d.shape
        out = cp.empty((n_steps, n_runs), dtype=cp.float32)
        self._looped(_grid(n_runs), (THREADS,), (isv, kl_d, tg_d, out, np.int64(n_runs), np.int64(n_steps)))
        return cp.asnumpy(out), cp.asnumpy(window)

    def run_as_threads(self, isv, coords, dims, pad=0):
        cp = self.cp
        if self._grid is None:
            module = self._grid_module()
            self._grid = (module.get_function("rlq_set_coords"), module.get_function("rlq_as_threads"))
        set_coords, as_threads = self._grid
        window = cp.asarray(np.ascontiguousarray(isv, dtype=np.float32))
        rows = window[pad : window.size - pad] if pad else window
        coords_d = cp.asarray(np.ascontiguousarray(coords, dtype=np.uint32).reshape(-1))
        dims_d = cp.asarray(np.ascontiguousarray(dims, dtype=np.uint32))
        set_coords((1,), (1,), (coords_d, dims_d))
        n = coords_d.size // 6
        as_threads(_grid(n), (THREADS,), (rows, np.int64(n)))
        return cp.asnumpy(window)

    def batched_step(self, isv):
        self._check_batch(isv)
        n = isv.shape[0]
        self._batched(_grid(n), (THREADS,), (isv, np.int64(n)))

    def run_private(self, lambda0, kl, target, out):
        n_chunks, n_runs, _ = kl.shape
        self._private(_grid(n_runs), (THREADS,), (lambda0, kl, target, out, np.int64(n_runs), np.int64(n_chunks)))


class CupyLearner(Learner):
    """``rlq_learn`` as one thread per run."""

    def __init__(self, cp, module):
        self.cp, self._fn, self._elementary = cp, module.get_function("rlq_learn"), module.get_function("rlq_learn_elementary")

    def elementary(self, x):
        cp = self.cp
        x_d = cp.asarray(np.ascontiguousarray(x, dtype=np.float64))
        exp_x, log_x = cp.empty_like(x_d), cp.empty_like(x_d)
        self._elementary(_grid(x_d.size), (THREADS,), (x_d, exp_x, log_x, np.int64(x_d.size)))
        return cp.asnumpy(exp_x), cp.asnumpy(log_x)

    def start(self, isv, inputs, n_evals, scratch):
        cp = self.cp
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            isv_d = cp.asarray(np.ascontiguousarray(isv, dtype=np.float32))
            args = [cp.asarray(a) for a in learn_arguments(inputs)]
            n = isv_d.shape[0]
            work = cp.empty(n * scratch, dtype=cp.float64)
            outs = {k: cp.empty((n_evals, n), dtype=dtype) for k, dtype in LEARN_OUTPUTS.items()}
            grid = (max(1, -(-n // LEARN_THREADS)),)
            self._fn(grid, (LEARN_THREADS,), (isv_d, *args, work, np.int64(n), np.int64(1), *outs.values(),
                                              np.int64(n), np.int64(0), np.int64(n)))

        in_use = [isv_d, *args, work]  # held until the kernel is done, not left to the pool while it runs

        def finish():
            with stream:
                result = {k: cp.asnumpy(v, stream=stream) for k, v in outs.items()}
            stream.synchronize()
            in_use.clear()
            return result

        return finish


def _grid(n_runs: int) -> tuple[int]:
    return (max(1, (n_runs + THREADS - 1) // THREADS),)


def _nvrtc_module(cp, code: str, origin: str, options: tuple[str, ...]):
    """NVRTC with exactly ``options`` (plus the device's architecture), loaded as a module."""
    return _load(_nvrtc_image(cp, code, origin, options))


def _load(image: bytes):
    from cupy.cuda import function

    module = function.Module()
    module.load(image)
    return module


def _nvrtc_image(cp, code: str, origin: str, options: tuple[str, ...]) -> bytes:
    """The CUBIN NVRTC builds from ``code`` with exactly ``options`` (plus the device's architecture), read from
    the build cache where an earlier build left it (the gate's own process builds every unit a worker loads,
    :meth:`CupyBackend.check_compiles`: a worker then loads them instead of running NVRTC, about 0.15 s a
    unit; a confined worker never writes there)."""
    from cupy_backends.cuda.libs import nvrtc

    path = nvrtc_cache_file("nvrtc/{}.cubin", nvrtc.getVersion(), _compiler(), cp.cuda.Device().compute_capability,
                            options, origin, code)
    with contextlib.suppress(OSError):
        kept = path.read_bytes()
        if kept.startswith(b"\x7fELF"):  # a CUBIN is an ELF file; anything else is built again
            return kept
    image = _nvrtc_build(cp, code, origin, options)
    keep_in_cache(path, image)
    return image


@cache
def _compiler() -> str:
    """The NVRTC build CuPy calls in this process (translation_unit.compiler_identity, read from the PTX of a
    one-line program: about 10 ms once per process), the same in the gate and in its workers; empty where that
    program does not build (the unit's own build then says why)."""
    from cupy_backends.cuda.libs import nvrtc

    try:
        prog = nvrtc.createProgram(IDENTITY_PROGRAM, "identity.cu", (), ())
        try:
            nvrtc.compileProgram(prog, [])
            ptx = nvrtc.getPTX(prog)
        finally:
            nvrtc.destroyProgram(prog)
    except Exception:  # noqa: BLE001 — NVRTCError or a binding without these calls: the key keeps the version alone
        return ""
    return compiler_identity(ptx.decode(errors="replace") if isinstance(ptx, bytes) else str(ptx))


def _nvrtc_build(cp, code: str, origin: str, options: tuple[str, ...]) -> bytes:
    from cupy_backends.cuda.libs import nvrtc

    arch = cp.cuda.Device().compute_capability
    prog = nvrtc.createProgram(code, origin, (), ())  # errors name the user's file
    try:
        try:
            nvrtc.compileProgram(prog, [*options, f"--gpu-architecture=sm_{arch}"])
        except nvrtc.NVRTCError:
            raise compile_error(origin, "NVRTC", nvrtc.getProgramLog(prog)) from None
        return nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)


def _rawmodule(cp, code: str, origin: str, options: tuple[str, ...]):
    """The way most CuPy users build a kernel; CuPy appends ``-ftz=true`` to ``options``."""
    try:
        module = cp.RawModule(code=code, options=options)
        module.compile()
    except cp.cuda.compiler.CompileException as err:
        raise compile_error(origin, "NVRTC", str(err)) from None
    return module


class CupyBackend(Backend):
    def __init__(self):
        self.cp = _import_cupy()
        self.xp = self.cp
        self._loaded: dict[tuple, CupyKernel | CupyLearner] = {}

    def device_name(self) -> str:
        """The current device's name (CUDA hands it over as bytes)."""
        name = self.cp.cuda.runtime.getDeviceProperties(self.cp.cuda.Device().id)["name"]
        return name.decode() if isinstance(name, bytes) else name

    def describe(self) -> str:
        cp = self.cp
        name = self.device_name()
        driver = cp.cuda.runtime.driverGetVersion()
        return f"{name} (CUDA driver {driver // 1000}.{driver % 1000 // 10}, CuPy {cp.__version__})"

    def check_compiles(self, source: KernelSource, slots: Slots) -> None:
        """NVRTC builds and loads every unit a worker loads (no candidate code runs on the host), the thread probe's
        too: their CUBINs stay in the build cache, from which each worker loads them."""
        self.compile(source, slots)
        _nvrtc_image(self.cp, device_grid_unit(source, slots), source.origin, NVRTC_OPTIONS)

    def compile(self, source: KernelSource, slots: Slots, options: tuple[str, ...] = NVRTC_OPTIONS,
                cupy_defaults: bool = False) -> CupyKernel:
        """Compile with NVRTC; ``cupy_defaults`` builds through ``cupy.RawModule`` (which adds FTZ)."""
        entry(source)  # production launches it by name, or one line says why not
        key = (source.text, source.symbol, slots, options, cupy_defaults)
        if key not in self._loaded:
            self._loaded[key] = CupyKernel(self.cp, source, slots, options, cupy_defaults)
        return self._loaded[key]

    def compile_learner(self, source: KernelSource, slots: Slots) -> CupyLearner:
        entry(source)
        key = ("learner", source.text, source.symbol, slots)
        if key not in self._loaded:
            unit = harness_unit(source, slots, for_device=True, harness=LEARNING_LOOP)
            module = _nvrtc_module(self.cp, unit, source.origin, NVRTC_OPTIONS)
            self._loaded[key] = CupyLearner(self.cp, module)
        return self._loaded[key]
