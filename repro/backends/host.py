"""The host backend: the ``.cu`` file compiled by the system C++ compiler, called via ctypes.

This is what CI runs, so every CPU-only machine executes the exact kernel
source. The shim header maps CUDA spellings to C++; the flags keep IEEE
float32 semantics (no contraction into FMAs, no fast-math). Shared libraries
are cached by the hash of everything that goes into them; concurrent pytest
workers share the cache safely (a file lock, then an atomic rename).

The kernel's ISV lives in :class:`Guarded` memory, so a stray write outside
it faults (or, within a window's canaries, is seen with its offset) instead of
corrupting this process; the gate runs candidates in child processes
(:mod:`repro.runners.isolation`), where such a fault becomes a row.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import mmap
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from repro.backends.base import (
    LEARN_INPUTS,
    LEARN_OUTPUTS,
    Backend,
    CompiledKernel,
    Learner,
    cache_dir,
    learn_arguments,
)
from repro.backends.host_state import HostState, changed_objects
from repro.backends.kernel_entry import Entry
from repro.backends.preprocessed import find_cxx
from repro.backends.translation_unit import (
    HOST_GRID,
    HOST_INCLUDE,
    HOST_SHIM,
    LEARNING_LOOP,
    compile_error,
    entry,
    harness_unit,
    host_learning_unit,
)
from repro.core.contract import Slots
from repro.core.errors import BackendUnavailable, SuiteError
from repro.core.kernel_source import KernelSource
from repro.core.paths import ROOT

FLAGS = ("-std=c++17", "-O2", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared", "-w")
_c_long = ctypes.c_longlong
_ptr = ctypes.c_void_p
_PAGE = mmap.PAGESIZE
#: Address space made inaccessible on each side of a kernel's ISV (16 MiB: 4 Mi floats).
GUARD_BYTES = 1 << 24
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [_ptr, ctypes.c_size_t, ctypes.c_int]
_libc.madvise.argtypes = [_ptr, ctypes.c_size_t, ctypes.c_int]
#: Bodies this large ask for transparent huge pages: first-touching 4 KiB pages cost 3× the time (numpy's
#: own large arrays ask the same). Speed only: where the kernel refuses, madvise fails and nothing changes.
_HUGE = 2 << 20


class Guarded:
    """A float32 array between two inaccessible regions (``PROT_NONE``): a kernel write past either end faults.

    The array ends exactly where the upper guard region begins (a write past the
    end faults on the first float out); below it, the slack of the page rounding
    sits between the array and the lower guard. Each guard spans
    :data:`GUARD_BYTES` of address space (never backed by memory), so writes
    up to that far out fault too instead of landing in the process's heap.

    A context manager: on leaving, a small mapping goes back to this process's pool and the next region of
    the same size reuses it, its slack zeroed and its array written whole, as a fresh mapping reads
    (mapping and protecting a new one costs about 70 µs, as much as a short run; a large one is released,
    its runs dwarf that).
    """

    _free: dict[int, list[tuple[mmap.mmap, int]]] = {}  # body bytes -> unused (mapping, base address)
    _KEEP, _KEEP_BYTES = 4, 1 << 20  # mappings kept per size, and only bodies up to this size

    def __init__(self, values: np.ndarray):
        values = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        self._body = -(-max(values.nbytes, 1) // _PAGE) * _PAGE
        offset = GUARD_BYTES + self._body - values.nbytes
        try:  # list.pop is atomic: threads may share the pool
            self._map, self._base = self._free.get(self._body, []).pop()
            ctypes.memset(self._base + GUARD_BYTES, 0, offset - GUARD_BYTES)  # what an earlier run left there
        except IndexError:
            self._map, self._base = _guarded_mapping(self._body)
        self.array = np.frombuffer(self._map, dtype=np.float32, count=values.size, offset=offset)
        self.array[:] = values
        self.address = self._base + offset

    def __enter__(self) -> Guarded:
        return self

    def __exit__(self, *exc) -> None:
        self.array = None  # no view of the mapping outlives its use
        if self._body <= self._KEEP_BYTES:
            free = self._free.setdefault(self._body, [])
            if len(free) < self._KEEP:
                free.append((self._map, self._base))


def _guarded_mapping(body: int) -> tuple[mmap.mmap, int]:
    """``body`` bytes of memory between two :data:`GUARD_BYTES` regions no access may touch (and its base)."""
    region = mmap.mmap(-1, body + 2 * GUARD_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    for start in (base, base + GUARD_BYTES + body):
        if _libc.mprotect(start, GUARD_BYTES, 0) != 0:  # PROT_NONE
            raise OSError(ctypes.get_errno(), "mprotect failed")
    if body >= _HUGE and hasattr(mmap, "MADV_HUGEPAGE"):
        _libc.madvise(base + GUARD_BYTES, body, mmap.MADV_HUGEPAGE)
    return region, base


#: The standard headers the shim includes; the prelude precompiled once per compiler, flags and shim is
#: these and the shim's text: parsing ``<cmath>`` is about half of a kernel's build. Speed only: where the
#: precompiled header is missing or stale the compiler reads the prelude's text instead (same code, the old time).
STANDARD_HEADERS = "#include <assert.h>\n#include <limits.h>\n#include <math.h>\n#include <stdio.h>\n" \
                   "#include <stdlib.h>\n#include <string.h>\n#include <cmath>\n"


#: Prelude headers whose precompiled form failed to build, or failed a build that the shim's text passes: not used
#: again in this process
_NO_PRELUDE: set[Path] = set()


#: A controller that includes a C++ standard header (``#include <string>``, not ``<stdio.h>``): the shim then reads
#: the libstdc++ headers that spell ``__noinline__`` before defining it (kernels/host_shim.h, CXX_HEADERS).
_CXX_INCLUDE = re.compile(r"^\s*#\s*include\s*<(?![^>]*\.h>)", re.MULTILINE)
CXX_HEADERS = "RLQ_HOST_CXX_HEADERS"


def includes_cxx_headers(text: str) -> bool:
    """Whether a controller's text includes a C++ standard header (its host build then defines CXX_HEADERS)."""
    return _CXX_INCLUDE.search(text) is not None


def _prelude_header(cxx: str, flags: tuple[str, ...], cxx_headers: bool = False) -> Path | None:
    """The prelude header beside its precompiled form in the build cache (None: it could not be built; the
    failure is remembered for this process, so that each build does not pay a failed compile first)."""
    folder = cache_dir()
    # a copy of the shim's text, not an #include of the repository's file: clang refuses a precompiled header
    # whose included files' times changed (a checkout, an editor)
    define = f"#define {CXX_HEADERS} 1\n" if cxx_headers else ""
    prelude = f'{STANDARD_HEADERS}{define}#line 1 "{HOST_SHIM}"\n{HOST_SHIM.read_text()}'
    key = hashlib.sha256("\0".join([prelude, cxx, *flags]).encode()).hexdigest()[:16]
    header, pch = folder / f"prelude-{key}.h", folder / f"prelude-{key}.h.gch"
    if header in _NO_PRELUDE:
        return None
    if pch.exists():
        return header
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"prelude-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not pch.exists():
            header.write_text(prelude)
            tmp = folder / f"prelude-{key}.{os.getpid()}.gch.tmp"
            pch_flags = [f for f in flags if f != "-shared"]
            done = subprocess.run([cxx, *pch_flags, "-x", "c++-header", str(header), "-o", str(tmp)],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                tmp.unlink(missing_ok=True)
                _NO_PRELUDE.add(header)
                return None
            os.replace(tmp, pch)
    return header


def build(cxx: str, unit: Path, lib: Path, source, flags: tuple[str, ...] = FLAGS, cwd: Path | None = None) -> None:
    """Compile the translation unit at ``unit`` into the shared library ``lib`` the way every host build does
    (the CUDA stand-in headers on the include path, the shim first); a failure is ``source``'s compile error.
    The regular build (``FLAGS``) reads the shim and the standard headers precompiled (:func:`_prelude_header`); the
    coverage build reads them as text, so that gcov counts nothing of a precompiled header."""
    cxx_headers = includes_cxx_headers(source.text)
    prelude = _prelude_header(cxx, flags, cxx_headers) if flags == FLAGS else None

    def compile_with(first: Path) -> subprocess.CompletedProcess:
        define = [f"-D{CXX_HEADERS}=1"] if cxx_headers and first == HOST_SHIM else []  # the prelude defines it itself
        cmd = [cxx, *flags, *define, "-I", str(HOST_INCLUDE), "-include", str(first), "-x", "c++", str(unit), "-o",
               str(lib)]
        return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)

    done = compile_with(prelude or HOST_SHIM)
    if done.returncode != 0 and prelude is not None:  # the text alone decides (clang rejects a stale .gch)
        done = compile_with(HOST_SHIM)
        if done.returncode == 0:
            _NO_PRELUDE.add(prelude)
    if done.returncode != 0:
        raise compile_error(source.origin, Path(cxx).name, done.stderr)


def _void_function(lib: ctypes.CDLL, name: str, argtypes: list):
    """The C function ``name`` of ``lib``, returning void, with its argument types set."""
    fn = getattr(lib, name)
    fn.argtypes, fn.restype = argtypes, None
    return fn


class HostKernel(CompiledKernel):
    def __init__(self, lib: ctypes.CDLL, source: KernelSource, slots: Slots):
        self.source, self.slots, self._lib = source, slots, lib
        self.step = _void_function(lib, source.symbol, [_ptr])
        self._batched = _void_function(lib, "rlq_batched_step", [_ptr, _c_long])
        self._looped = _void_function(lib, "rlq_looped", [_ptr] * 4 + [_c_long] * 2)
        self._private = _void_function(lib, "rlq_looped_private", [_ptr] * 4 + [_c_long] * 2)
        self._as_threads = _void_function(lib, "rlq_as_threads", [_ptr, _ptr, _c_long, _ptr])

    def outside_state(self) -> HostState:
        return changed_objects(Path(self._lib._name), self.step)

    def dump_coverage(self) -> None:
        """A ``--coverage`` build (repro.runners.coverage): write the gcov counters now."""
        self._lib.rlq_gcov_dump()

    def run_per_step(self, isv0, kl, target, pad=0):
        s = self.slots
        kl = np.asarray(kl, dtype=np.float32)
        target = np.asarray(target, dtype=np.float32)
        out = np.empty(kl.shape[0], dtype=np.float32)
        with Guarded(isv0) as mem:  # a stray write lands in the canaries (pad) or faults, never in Python's heap
            isv = mem.array[pad : mem.array.size - pad]
            step, addr = self.step, mem.address + 4 * pad
            for t in range(kl.shape[0]):
                isv[s.kl] = kl[t]
                isv[s.target] = target[t]
                step(addr)
                out[t] = isv[s.lambda_]
            return out, mem.array.copy()

    def run_looped(self, isv0, kl, target, pad=0):
        kl = np.ascontiguousarray(kl, dtype=np.float32)
        target = np.ascontiguousarray(target, dtype=np.float32)
        self._check_looped(np.asarray(isv0), kl, target, pad)
        n_steps, n_runs = kl.shape
        out = np.empty((n_steps, n_runs), dtype=np.float32)
        with Guarded(isv0) as mem:
            self._looped(mem.address + 4 * pad, kl.ctypes.data, target.ctypes.data, out.ctypes.data, n_runs, n_steps)
            return out, mem.array.copy().reshape(np.shape(isv0))

    def run_as_threads(self, isv, coords, dims, pad=0):
        coords = np.ascontiguousarray(coords, dtype=np.uint32).reshape(-1, 6)
        dims = np.ascontiguousarray(dims, dtype=np.uint32)
        with Guarded(isv) as mem:
            self._as_threads(mem.address + 4 * pad, coords.ctypes.data, coords.shape[0], dims.ctypes.data)
            return mem.array.copy().reshape(np.shape(isv))

    def batched_step(self, isv):
        self._check_batch(isv)
        self._batched(isv.ctypes.data, isv.shape[0])

    def run_private(self, lambda0, kl, target, out):
        n_chunks, n_runs, _ = kl.shape
        self._private(lambda0.ctypes.data, kl.ctypes.data, target.ctypes.data, out.ctypes.data, n_runs, n_chunks)


class HostLearner(Learner):
    """``rlq_learn`` through ctypes, on every core: ranges of runs from threads (ctypes releases the GIL), each
    thread calling ``controller`` (the loop's library is built once per slot layout: :func:`host_learning_unit`)."""

    def __init__(self, lib: ctypes.CDLL, controller: HostKernel):
        self._lib, self._controller = lib, controller  # both libraries stay loaded
        self._with = _void_function(lib, "rlq_learn_with", [_ptr])
        self._fn = _void_function(lib, "rlq_learn", [_ptr] * (2 + len(LEARN_INPUTS)) + [_c_long] * 2
                                  + [_ptr] * len(LEARN_OUTPUTS) + [_c_long] * 3)
        self._elementary = _void_function(lib, "rlq_learn_elementary", [_ptr] * 3 + [_c_long])

    def elementary(self, x):
        x = np.ascontiguousarray(x, dtype=np.float64)
        exp_x, log_x = np.empty_like(x), np.empty_like(x)
        self._elementary(x.ctypes.data, exp_x.ctypes.data, log_x.ctypes.data, x.size)
        return exp_x, log_x

    def start(self, isv, inputs, n_evals, scratch):
        isv = np.ascontiguousarray(isv, dtype=np.float32)
        args = learn_arguments(inputs)
        n = isv.shape[0]
        work = np.empty(n * scratch)
        outs = {k: np.empty((n_evals, n), dtype=dtype) for k, dtype in LEARN_OUTPUTS.items()}
        pointers = [isv.ctypes.data, *(a.ctypes.data for a in args), work.ctypes.data, 1, scratch,
                    *(o.ctypes.data for o in outs.values()), n]
        cuts = np.linspace(0, n, min(n, os.cpu_count() or 1) + 1).astype(int)
        step = ctypes.cast(self._controller.step, _ptr).value

        def runs(i: int) -> None:
            self._with(step)  # this thread's controller
            self._fn(*pointers, int(cuts[i]), int(cuts[i + 1]))

        with ThreadPoolExecutor(len(cuts) - 1) as pool:
            list(pool.map(runs, range(len(cuts) - 1)))
        return lambda: outs


def cpu_model(default: str = "CPU") -> str:
    """The processor's model name (``/proc/cpuinfo``), or ``default`` where it cannot be read."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return default


#: In a confined command's child (:func:`repro.runners.confine.run_confined`): its pipe to the parent, which
#: builds the libraries the cache lacks (:func:`build_remotely`). None in every other process.
PARENT = None


def _built_by_parent(unit: str, source: KernelSource) -> Path | None:
    """In a confined command's child (:func:`repro.runners.confine.run_confined`): ``unit``'s library built by
    the parent (:func:`build_remotely`), or its compile error raised here; None outside such a child."""
    import json

    if PARENT is None:
        return None
    PARENT.send_bytes(json.dumps({"unit": unit, "origin": source.origin, "symbol": source.symbol}).encode())
    reply = json.loads(PARENT.recv_bytes())
    if "error" in reply:
        raise SuiteError(reply["error"])
    return Path(reply["lib"])


def _entry_by_parent(source: KernelSource) -> Entry:
    """In a confined command's child: ``source``'s entry (:func:`repro.backends.translation_unit.entry`) found by
    the parent, whose preprocessor reads the text (no program starts in the child), or its one-line error raised."""
    import json

    PARENT.send_bytes(json.dumps({"entry": {"text": source.text, "symbol": source.symbol,
                                            "origin": source.origin}}).encode())
    reply = json.loads(PARENT.recv_bytes())
    if "error" in reply:
        raise SuiteError(reply["error"])
    return Entry(source.symbol, str(reply["call"]))


def build_remotely(request: bytes) -> bytes:
    """The parent's side of :func:`_built_by_parent`: build the unit the child sent (JSON; a compiler runs none of
    its code) into the cache, as :meth:`HostBackend._library` would, and answer with the library's path or the
    compile error, as JSON (never a pickle: the child may run the candidate's code)."""
    import json

    try:
        ask = json.loads(request)
        if "entry" in ask:  # the kernel's entry (:func:`_entry_by_parent`): a preprocessor runs none of its code
            wanted = ask["entry"]
            source = KernelSource(str(wanted["text"]), str(wanted["symbol"]), str(wanted["origin"]))
            return json.dumps({"call": entry(source).call}).encode()
        source = KernelSource(str(ask["unit"]), str(ask["symbol"]), str(ask["origin"]))
        backend = HostBackend()
        return json.dumps({"lib": str(backend._build(ask["unit"], backend._key(ask["unit"]), source))}).encode()
    except SuiteError as err:
        return json.dumps({"error": str(err)}).encode()
    except (ValueError, KeyError, TypeError) as err:
        return json.dumps({"error": f"a malformed build request from the confined child ({err})"}).encode()


# glibc's exp and log over arrays, one C call per element: NumPy's own float64 exp/log are SIMD code on AVX-512
# CPUs and differ from glibc's in the last bit (repro/core/libm.py), which moved a toy run's verdict between CI
# machines. -O2 does not vectorise them (math-errno stays on).
LIBM_UNIT = """#include <math.h>
extern "C" void rlq_libm_exp(const double* x, double* y, long long n) { for (long long i = 0; i < n; ++i) y[i] = exp(x[i]); }
extern "C" void rlq_libm_log(const double* x, double* y, long long n) { for (long long i = 0; i < n; ++i) y[i] = log(x[i]); }
"""


class GlibcMath:
    """``exp`` and ``log`` of float64 arrays (any shape) as glibc computes them, through a compiled loop."""

    def __init__(self, lib: ctypes.CDLL):
        args = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
        self._exp, self._log = (_void_function(lib, f"rlq_libm_{f}", args) for f in ("exp", "log"))

    @staticmethod
    def _apply(fn, x) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float64)
        y = np.empty_like(x)
        fn(x.ctypes.data, y.ctypes.data, x.size)
        return y

    def exp(self, x) -> np.ndarray:
        return self._apply(self._exp, x)

    def log(self, x) -> np.ndarray:
        return self._apply(self._log, x)


class HostBackend(Backend):
    def __init__(self):
        cxx = find_cxx()
        if not cxx:
            raise BackendUnavailable("host backend: no C++ compiler found (install g++ or set CXX)")
        self.cxx = cxx
        version = subprocess.run([self.cxx, "--version"], capture_output=True, text=True)
        self.compiler_version = version.stdout.splitlines()[0] if version.stdout else self.cxx
        self._loaded: dict[str, HostKernel | HostLearner | GlibcMath] = {}

    def describe(self) -> str:
        return f"{cpu_model()} ({os.cpu_count()} cores), {self.compiler_version}"

    @property
    def math(self) -> GlibcMath:
        if "libm" not in self._loaded:
            source = KernelSource(LIBM_UNIT, "rlq_libm_exp", "glibc's exp and log (repro/backends/host.py)")
            self._loaded["libm"] = GlibcMath(ctypes.CDLL(str(self._build(LIBM_UNIT, self._key(LIBM_UNIT), source))))
        return self._loaded["libm"]

    def compile(self, source: KernelSource, slots: Slots) -> HostKernel:
        key, lib = self._library(source, slots)
        if key not in self._loaded:
            self._loaded[key] = HostKernel(ctypes.CDLL(str(lib)), source, slots)
        return self._loaded[key]

    def compile_learner(self, source: KernelSource, slots: Slots) -> HostLearner:
        controller = self.compile(source, slots)
        unit = host_learning_unit(slots)  # its errors are the loop's, not the controller's
        key, lib = self._library(KernelSource(unit, "rlq_learn", LEARNING_LOOP.relative_to(ROOT).as_posix()), slots, unit)
        key = f"{key}+{id(controller)}"  # one learner per loop library and loaded controller
        if key not in self._loaded:
            self._loaded[key] = HostLearner(ctypes.CDLL(str(lib)), controller)
        return self._loaded[key]

    def check_compiles(self, source: KernelSource, slots: Slots) -> None:
        """Build the library (or find it cached) without loading it: no candidate code runs in this process."""
        self._library(source, slots)

    def _library(self, source: KernelSource, slots: Slots, unit: str | None = None) -> tuple[str, Path]:
        """The library of ``unit`` (by default ``source`` with the looped harness) built or found cached, and its key."""
        if unit is None:  # the controller's own library: production launches it by name, or one line says why not
            entry(source, _entry_by_parent if PARENT is not None else None)
            unit = harness_unit(source, slots, for_device=False)
        key = self._key(unit)
        return key, self._build(unit, key, source)

    def _key(self, unit: str) -> str:
        """The cache key of ``unit``'s library: its text, the shim, what the include path adds, flags, compiler."""
        included = [HOST_SHIM, HOST_GRID, *sorted(HOST_INCLUDE.glob("*.h"))]
        return hashlib.sha256(
            "\0".join([unit, *(p.read_text() for p in included), " ".join(FLAGS), self.compiler_version]).encode()
        ).hexdigest()[:24]

    def _build(self, unit: str, key: str, source: KernelSource) -> Path:
        folder = cache_dir()
        lib = folder / f"{key}.so"
        if lib.exists():
            return lib
        remote = _built_by_parent(unit, source)
        if remote is not None:  # a confined command's child: no compiler may start here
            return remote
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one worker compiles, the others wait and reuse
            if lib.exists():
                return lib
            cpp = folder / f"{key}.{os.getpid()}.cpp"
            tmp = folder / f"{key}.{os.getpid()}.so.tmp"
            cpp.write_text(unit)
            try:
                build(self.cxx, cpp, tmp, source)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            finally:
                cpp.unlink(missing_ok=True)
            os.replace(tmp, lib)
        return lib
