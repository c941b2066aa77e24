"""The host backend's compile cache: keyed by content, shared safely by concurrent workers."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from repro.backends.host import FLAGS, HostBackend, cache_dir
from repro.core.isv import new_isv
from repro.core.paths import ROOT


def test_ieee_flags():
    assert "-ffp-contract=off" in FLAGS and not any("fast-math" in f and "no" not in f for f in FLAGS)


def test_cache_is_keyed_by_content(contract, tmp_path, monkeypatch):

    monkeypatch.setenv("RLQ_CACHE_DIR", str(tmp_path))
    src = contract.source("fixed")
    HostBackend().compile(src, contract.slots)
    HostBackend().compile(src, contract.slots)
    assert len(list(tmp_path.glob("*.so"))) == 1
    HostBackend().compile(src.with_defines(MIN_LAMBDA=0.07), contract.slots)
    assert len(list(tmp_path.glob("*.so"))) == 2
    assert cache_dir() == tmp_path


def test_concurrent_compiles_share_one_library(tmp_path):
    script = (
        "from repro.backends.host import HostBackend; from repro.core.contract import load; "
        "from repro.core.kernel_source import load_kernel; c = load(); e = c.controller('fixed'); "
        "k = HostBackend().compile(load_kernel(e.kernel, e.symbol).with_defines(MIN_LAMBDA=0.0625), c.slots); "
        "print(k.source.sha256)"
    )
    env = {"RLQ_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin:/usr/local/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(set(outs)) == 1 and len(list(tmp_path.glob("*.so"))) == 1
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob("*.cpp"))


def test_a_stale_precompiled_prelude_costs_time_not_bits(contract, tmp_path, monkeypatch):
    """The precompiled standard headers are speed only: with the prelude's .gch replaced by garbage the compiler
    reads the text, and the kernel gives the same λ bits as the normal build."""
    monkeypatch.setenv("RLQ_CACHE_DIR", str(tmp_path))
    src = contract.source("fixed").with_defines(MIN_LAMBDA=0.0725)
    isv0 = new_isv(contract.slots, 0.3, 1)
    kl = np.geomspace(1e-4, 10.0, 64).astype(np.float32)[:, None]
    target = np.full_like(kl, 0.1)
    expected = HostBackend().compile(src, contract.slots).run_looped(isv0, kl, target)[0]
    [pch] = tmp_path.glob("prelude-*.h.gch")
    pch.write_bytes(b"not a precompiled header")
    for lib in tmp_path.glob("*.so"):
        lib.unlink()
    got = HostBackend().compile(src, contract.slots).run_looped(isv0, kl, target)[0]
    assert got.view(np.uint32).tolist() == expected.view(np.uint32).tolist()
