"""The build caches: the host backend's keyed by content and shared safely by concurrent workers; NVRTC's PTX kept
with its log, and never written by a confined process."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from repro.backends.host import FLAGS, HostBackend, cache_dir, includes_cxx_headers
from repro.core import spec
from repro.core.errors import SuiteError
from repro.core.isv import new_isv


def _fused(flags, folder) -> np.float32:
    """a·a + c from ``a * a + c`` in C++ built with ``flags`` (the host build's own, give or take): 2^-24 where the
    compiler fused the two into one FMA, 0 where it rounded a·a first (as CUDA's --fmad=false and the spec do)."""
    import ctypes
    import subprocess

    unit, lib = folder / f"fuse{len(flags)}.cpp", folder / f"fuse{len(flags)}.so"
    unit.write_text('extern "C" float fuse(float a, float c) { return a * a + c; }\n')
    subprocess.run([HostBackend().cxx, *flags, str(unit), "-o", str(lib)], check=True, capture_output=True)
    fn = ctypes.CDLL(str(lib)).fuse
    fn.argtypes, fn.restype = [ctypes.c_float, ctypes.c_float], ctypes.c_float
    return np.float32(fn(1 + 2.0**-12, -(1 + 2.0**-11)))


def test_a_multiply_then_add_is_never_fused_even_for_a_cpu_with_fma(tmp_path):
    """CUDA's --fmad=false and the spec model round a·a before adding c; the host build must too, even where the
    compiler may emit FMA instructions (-mfma): the same build without -ffp-contract=off fuses them (checked, so
    that the probe shows it can tell)."""
    if "fma" not in Path("/proc/cpuinfo").read_text().split():
        pytest.skip("this CPU has no FMA instruction: the probe could not run a fused build")
    assert _fused((*FLAGS, "-mfma"), tmp_path) == 0.0
    loose = tuple(f for f in FLAGS if f != "-ffp-contract=off")
    assert _fused((*loose, "-mfma"), tmp_path) == np.float32(2.0**-24)


def _seed(folder):
    """A fresh build cache with the run's precompiled prelude (if built yet) copied in: its 0.5 s build is not
    what these tests are about."""
    for path in cache_dir().glob("prelude-*.h*"):
        shutil.copy2(path, folder / path.name)


def test_cache_is_keyed_by_content_and_its_precompiled_prelude_is_speed_only(contract, tmp_path, monkeypatch):
    """One library per content; and with the precompiled standard headers (.gch) replaced by garbage, the
    compiler reads their text: a kernel built then still equals the spec model bit for bit."""
    _seed(tmp_path)
    monkeypatch.setenv("RLQ_CACHE_DIR", str(tmp_path))
    src = contract.source("fixed")
    HostBackend().compile(src, contract.slots)
    HostBackend().compile(src, contract.slots)
    assert len(list(tmp_path.glob("*.so"))) == 1
    HostBackend().compile(src.with_defines(MIN_LAMBDA=0.07), contract.slots)
    assert len(list(tmp_path.glob("*.so"))) == 2
    assert cache_dir() == tmp_path
    pchs = list(tmp_path.glob("prelude-*.h.gch"))
    assert pchs
    for pch in pchs:
        pch.write_bytes(b"not a precompiled header")
    kl = np.geomspace(1e-4, 10.0, 400).astype(np.float32)[:, None]
    target = np.full_like(kl, 0.1)
    got = HostBackend().compile(src.with_defines(MIN_LAMBDA=0.0725), contract.slots).run_looped(
        new_isv(contract.slots, 0.3, 1), kl, target)[0]
    assert len(list(tmp_path.glob("*.so"))) == 3
    want = spec.run(spec.Rule.of(contract.controller("fixed"), floor=0.0725), [0.3], kl, target)
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    # a prelude that fails a build (clang refuses a stale .gch outright; g++ reads this text beside the garbage):
    # the shim's own text decides
    for pch in pchs:
        pch.with_suffix("").write_text("#error a stale precompiled prelude\n")
    HostBackend().compile(src.with_defines(MIN_LAMBDA=0.075), contract.slots)
    assert len(list(tmp_path.glob("*.so"))) == 4


def _compile_in_a_child(answers) -> None:
    from repro.core.contract import CONTRACTS, load
    from repro.core.kernel_source import load_kernel

    c = load(CONTRACTS)
    e = c.controller("fixed")
    k = HostBackend().compile(load_kernel(e.kernel, e.symbol).with_defines(MIN_LAMBDA=0.0625), c.slots)
    answers.put(k.source.sha256)


def test_concurrent_compiles_share_one_library(tmp_path, monkeypatch):
    """Four processes compiling one new kernel at once (forked: separate processes, without four interpreter
    start-ups): one library, no temporary file left."""
    import multiprocessing as mp

    _seed(tmp_path)
    monkeypatch.setenv("RLQ_CACHE_DIR", str(tmp_path))
    ctx = mp.get_context("fork")
    answers = ctx.Queue()
    procs = [ctx.Process(target=_compile_in_a_child, args=(answers,)) for _ in range(4)]
    for p in procs:
        p.start()
    outs = [answers.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert all(p.exitcode == 0 for p in procs)
    assert len(set(outs)) == 1 and len(list(tmp_path.glob("*.so"))) == 1
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob("*.cpp"))


@pytest.mark.parametrize("header", ["memory", "string"])
def test_a_controller_including_a_libstdcxx_header_compiles_under_the_shims_noinline(contract, header):
    """libstdc++ spells ``__attribute__((__noinline__))`` (shared_ptr_base.h from GCC 12, basic_string.h from 13),
    which the shim's CUDA macro ``__noinline__`` would break: a controller that includes such a header gets them
    read first (through its precompiled prelude, and through the shim's text where the prelude is not used)."""
    src = contract.source("fixed")
    text = src.text.replace('extern "C"', f"#include <{header}>\n" + 'extern "C"', 1)
    assert text != src.text
    assert includes_cxx_headers(text) and not includes_cxx_headers(src.text)
    kernel = HostBackend().compile(type(src)(text, src.symbol, f"includes_{header}.cu"), contract.slots)
    kl = np.array([[0.5], [0.001]], dtype=np.float32)
    got = kernel.run_looped(new_isv(contract.slots, 0.1, 1), kl, np.full_like(kl, 0.02))[0]
    want = spec.run(spec.Rule.of(contract.controller("fixed")), [0.1], kl, np.full_like(kl, 0.02))
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()


@pytest.fixture()
def ptx_cache(tmp_path, monkeypatch):
    """:mod:`repro.backends.ptx` with a writable build cache of this test's own (``tmp_path / "cache"``); a skip
    where NVRTC is not installed."""
    from repro.backends import ptx
    from repro.backends.base import READ_ONLY_CACHE

    if ptx.nvrtc_unavailable():
        pytest.skip(ptx.nvrtc_unavailable())
    monkeypatch.setenv("RLQ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(READ_ONLY_CACHE, raising=False)
    return ptx


def test_nvrtc_ptx_is_kept_with_its_log_and_a_confined_process_writes_none(contract, ptx_cache, tmp_path,
                                                                              monkeypatch):
    """The PTX and the ptxas report of a unit come back from the cache without NVRTC, identical; under
    ``READ_ONLY_CACHE`` (set in a confined process) NVRTC builds it and nothing is written."""
    from repro.backends.base import READ_ONLY_CACHE

    ptx = ptx_cache
    src = contract.source("fixed")
    built = ptx.compile_ptx(src.text, src.origin)
    assert "Used" in built[1] and ".entry" in built[0]  # the ptxas report and the entry point
    assert len(list((tmp_path / "cache" / "ptx").glob("*.json"))) == 1

    def no_nvrtc(*_args):
        raise AssertionError("NVRTC ran though its PTX was kept")

    monkeypatch.setattr(ptx, "_compile_ptx", no_nvrtc)
    assert ptx.compile_ptx(src.text, src.origin) == built
    monkeypatch.undo()
    monkeypatch.setenv("RLQ_CACHE_DIR", str(tmp_path / "confined"))
    monkeypatch.setenv(READ_ONLY_CACHE, "1")
    assert ptx.compile_ptx(src.text, src.origin)[0] == built[0]  # (the log says how long ptxas took)
    assert not (tmp_path / "confined").exists()


def test_another_nvrtc_build_of_the_same_version_builds_again(contract, ptx_cache, tmp_path, monkeypatch):
    """The PTX kept for one NVRTC build is not read for another that reports the same major.minor (a patch
    release): the key holds the build NVRTC writes above its PTX (Compiler Build ID, release and V-number)."""
    ptx = ptx_cache
    src = contract.source("fixed")
    built = ptx.compile_ptx(src.text, src.origin)
    identity = ptx._compiler()
    assert "Compiler Build ID" in identity and "Cuda compilation tools, release" in identity, identity
    assert all(line.strip() in built[0] for line in identity.splitlines())  # the unit's own PTX says the same
    patched = identity.replace("Build ID: CL-", "Build ID: CL-1")
    monkeypatch.setattr(ptx, "_compiler", lambda: patched)
    ran = []
    monkeypatch.setattr(ptx, "_compile_ptx", lambda *a: ran.append(1) or ("ptx", "log"))
    ptx.compile_ptx(src.text, src.origin)
    assert ran == [1] and len(list((tmp_path / "cache" / "ptx").glob("*.json"))) == 2


def test_the_build_cache_lies_outside_the_checkout(tmp_path, monkeypatch):
    """A change under review cannot bring builds of its own for the gate to load: without $RLQ_CACHE_DIR the cache
    is the user's (``$XDG_CACHE_HOME``, else ``~/.cache``); one given inside the repository is refused."""
    from repro.core.paths import ROOT

    monkeypatch.delenv("RLQ_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "rlq"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "rlq"
    assert not cache_dir().resolve().is_relative_to(ROOT.resolve())
    monkeypatch.setenv("RLQ_CACHE_DIR", str(ROOT / ".cache" / "rlq"))  # a folder of the checkout is refused
    with pytest.raises(SuiteError, match="inside the checkout"):
        cache_dir()
