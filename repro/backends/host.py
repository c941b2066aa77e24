"""The host backend: the ``.cu`` file compiled by the system C++ compiler, called via ctypes.

This is what CI runs, so every CPU-only machine executes the exact kernel
source. The shim header maps CUDA spellings to C++; the flags keep IEEE
float32 semantics (no contraction into FMAs, no fast-math). Shared libraries
are cached by the hash of everything that goes into them; concurrent pytest
workers share the cache safely (a file lock, then an atomic rename).
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from repro.backends.base import Backend, CompiledKernel
from repro.backends.translation_unit import HOST_SHIM, compile_error, harness_unit
from repro.contract import Slots
from repro.errors import BackendUnavailable
from repro.kernel_source import KernelSource, check_symbol
from repro.paths import ROOT

FLAGS = ("-std=c++17", "-O2", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared", "-w")
_c_long = ctypes.c_longlong
_ptr = ctypes.c_void_p


def cache_dir() -> Path:
    """Where compiled kernels live (``$RLQ_CACHE_DIR``, else ``.cache/rlq`` in the repo)."""
    return Path(os.environ.get("RLQ_CACHE_DIR", ROOT / ".cache" / "rlq"))


def _ptr_of(a: np.ndarray) -> int:
    return a.ctypes.data


class HostKernel(CompiledKernel):
    def __init__(self, lib: ctypes.CDLL, source: KernelSource, slots: Slots):
        self.source, self.slots, self._lib = source, slots, lib
        self.step = getattr(lib, source.symbol)
        self.step.argtypes, self.step.restype = [_ptr], None
        self._batched = lib.rlq_batched_step
        self._batched.argtypes, self._batched.restype = [_ptr, _c_long], None
        self._looped = lib.rlq_looped
        self._looped.argtypes, self._looped.restype = [_ptr] * 4 + [_c_long] * 2, None
        self._private = lib.rlq_looped_private
        self._private.argtypes, self._private.restype = [_ptr] * 4 + [_c_long] * 2, None

    def run_per_step(self, isv0, kl, target):
        s = self.slots
        isv = np.array(isv0, dtype=np.float32, copy=True).reshape(-1)
        kl = np.asarray(kl, dtype=np.float32)
        target = np.asarray(target, dtype=np.float32)
        out = np.empty(kl.shape[0], dtype=np.float32)
        step, addr = self.step, _ptr_of(isv)
        for t in range(kl.shape[0]):
            isv[s.kl] = kl[t]
            isv[s.target] = target[t]
            step(addr)
            out[t] = isv[s.lambda_]
        return out, isv

    def run_looped(self, isv0, kl, target):
        isv = np.ascontiguousarray(isv0, dtype=np.float32).copy()
        kl = np.ascontiguousarray(kl, dtype=np.float32)
        target = np.ascontiguousarray(target, dtype=np.float32)
        self._check_looped(isv, kl, target)
        n_steps, n_runs = kl.shape
        out = np.empty((n_steps, n_runs), dtype=np.float32)
        self._looped(_ptr_of(isv), _ptr_of(kl), _ptr_of(target), _ptr_of(out), n_runs, n_steps)
        return out, isv

    def batched_step(self, isv):
        self._check_batch(isv)
        self._batched(_ptr_of(isv), isv.shape[0])

    def run_private(self, lambda0, kl, target, out):
        n_chunks, n_runs, _ = kl.shape
        self._private(_ptr_of(lambda0), _ptr_of(kl), _ptr_of(target), _ptr_of(out), n_runs, n_chunks)


class HostBackend(Backend):
    name = "host"

    def __init__(self, compiler: str | None = None):
        cxx = compiler or os.environ.get("CXX") or next(
            (c for c in ("c++", "g++", "clang++") if shutil.which(c)), None
        )
        if not cxx or not shutil.which(cxx):
            raise BackendUnavailable("host backend: no C++ compiler found (install g++ or set CXX)")
        self.cxx = shutil.which(cxx)
        version = subprocess.run([self.cxx, "--version"], capture_output=True, text=True)
        self.compiler_version = version.stdout.splitlines()[0] if version.stdout else self.cxx
        self._loaded: dict[str, HostKernel] = {}

    def describe(self) -> str:
        cpu = "CPU"
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        return f"{cpu} ({os.cpu_count()} cores), {self.compiler_version}"

    def compile(self, source: KernelSource, slots: Slots) -> HostKernel:
        check_symbol(source)
        unit = harness_unit(source, slots, for_device=False)
        key = hashlib.sha256(
            "\0".join([unit, HOST_SHIM.read_text(), " ".join(FLAGS), self.compiler_version]).encode()
        ).hexdigest()[:24]
        if key not in self._loaded:
            self._loaded[key] = HostKernel(ctypes.CDLL(str(self._build(unit, key, source))), source, slots)
        return self._loaded[key]

    def _build(self, unit: str, key: str, source: KernelSource) -> Path:
        folder = cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        lib = folder / f"{key}.so"
        if lib.exists():
            return lib
        with open(folder / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one worker compiles, the others wait and reuse
            if lib.exists():
                return lib
            cpp = folder / f"{key}.{os.getpid()}.cpp"
            tmp = folder / f"{key}.{os.getpid()}.so.tmp"
            cpp.write_text(unit)
            cmd = [self.cxx, *FLAGS, "-include", str(HOST_SHIM), "-x", "c++", str(cpp), "-o", str(tmp)]
            done = subprocess.run(cmd, capture_output=True, text=True)
            cpp.unlink(missing_ok=True)
            if done.returncode != 0:
                tmp.unlink(missing_ok=True)
                raise compile_error(source.origin, Path(self.cxx).name, done.stderr)
            os.replace(tmp, lib)
        return lib
