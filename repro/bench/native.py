"""The native launch floor: ``launch_loop.c`` built with the host's C compiler and run on a CUBIN.

The C program talks to the CUDA driver directly (dlopen of ``libcuda.so.1``),
so the difference between its µs per launch and CuPy's is what Python and
CuPy add to a launch. Built once per source hash into the suite's cache.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from repro.backends.host import cache_dir
from repro.core.errors import BackendUnavailable, SuiteError

SOURCE = Path(__file__).with_name("launch_loop.c")
FLAGS = ("-std=c11", "-O2", "-Wall")


def _cc() -> str | None:
    return next((shutil.which(c) for c in (os.environ.get("CC", ""), "cc", "gcc", "clang") if c and shutil.which(c)),
                None)


def launcher_unavailable() -> str | None:
    """None when the C loop can run here, else why not."""
    if _cc() is None:
        return "native launcher: no C compiler (install gcc or set CC)"
    try:
        ctypes.CDLL("libcuda.so.1")  # what the C program dlopens
    except OSError as err:
        return f"native launcher: no CUDA driver library ({err})"
    return None


def build() -> Path:
    """The compiled launcher (cached by the hash of its source and flags)."""
    cc = _cc()
    if cc is None:
        raise BackendUnavailable("native launcher: no C compiler (install gcc or set CC)")
    key = hashlib.sha256("\0".join([SOURCE.read_text(), *FLAGS, cc]).encode()).hexdigest()[:16]
    exe = cache_dir() / f"launch_loop-{key}"
    if not exe.exists():
        exe.parent.mkdir(parents=True, exist_ok=True)
        tmp = exe.with_suffix(f".{os.getpid()}.tmp")
        done = subprocess.run([cc, *FLAGS, str(SOURCE), "-o", str(tmp), "-ldl"], capture_output=True, text=True)
        if done.returncode != 0:
            raise SuiteError(f"{SOURCE.name} does not compile: {done.stderr.strip().splitlines()[:1]}")
        os.replace(tmp, exe)
    return exe


def run(image: bytes, symbol: str, isv0: np.ndarray, rounds: int, async_launches: int, sync_launches: int,
        verify_steps: int) -> dict:
    """Run the C loop: ``{"async_us": [...], "sync_us": [...], "isv": ISV after verify_steps launches}`` (µs/launch)."""
    if image is None:
        raise SuiteError("native launcher: the kernel has no CUBIN (built through cupy.RawModule)")
    exe = build()
    with tempfile.TemporaryDirectory(prefix="rlq-native-") as tmp:
        folder = Path(tmp)
        (folder / "k.cubin").write_bytes(image)
        np.ascontiguousarray(isv0, dtype=np.float32).tofile(folder / "isv.in")
        args = [str(exe), str(folder / "k.cubin"), symbol, str(folder / "isv.in"), str(folder / "isv.out"),
                str(rounds), str(async_launches), str(sync_launches), str(verify_steps)]
        done = subprocess.run(args, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise SuiteError((done.stderr.strip() or f"launch_loop exited {done.returncode}").splitlines()[-1])
        result = json.loads(done.stdout)
        result["isv"] = np.fromfile(folder / "isv.out", dtype=np.float32)
    return result
