"""Static facts about a kernel from its NVRTC build, on any machine (NVRTC needs no GPU).

The candidate is compiled to PTX and, through NVRTC's built-in ptxas, to an
sm_90 binary whose resource usage ptxas reports (``--ptxas-options=--verbose``).
NVRTC comes from the ``cuda-bindings`` and ``nvidia-cuda-nvrtc`` wheels
(``pip install --group static``); where they are missing, :func:`nvrtc_unavailable`
says so and the caller reports the checks as not run.

A source that the host shim accepts but NVRTC rejects fails here with the
compiler's message (a :class:`SuiteError`: not CUDA, exit 2 from the gate).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache, lru_cache

from repro.backends.base import keep_in_cache
from repro.backends.host_state import demangled
from repro.backends.translation_unit import (
    IDENTITY_PROGRAM,
    NVRTC_OPTIONS,
    compile_error,
    compiler_identity,
    nvrtc_cache_file,
)
from repro.core.errors import BackendUnavailable, unavailable_reason
from repro.core.kernel_source import KernelSource

#: The GPU the resource counts are for (the suite's reference device is an H200).
ARCH = "sm_90"

_ATOMIC = re.compile(r"^\s*(?:@!?%\w+\s+)?((?:atom|red)\.[\w.]+)", re.M)
_LOCAL = re.compile(r"^\s*(?:@!?%\w+\s+)?((?:ld|st)\.local[\w.]*)|^\s*\.local\b", re.M)
_GLOBAL_STORE = re.compile(r"^\s*(?:@!?%\w+\s+)?(st\.global[\w.]*)", re.M)
# One instruction: its opcode, its first operand (the destination, or a store's address) and the rest.
_INSTRUCTION = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.]*)\s+([^,;]+?)\s*(?:,\s*(.*?))?\s*;", re.M)
_ADDRESS = re.compile(r"\[\s*([%\w$.]+)")
# Stores to memory no parameter points at (a module variable) are what this reads; local, shared and
# parameter space are the thread's or the block's own.
_OWN_SPACES = {"local", "shared", "param"}


def outside_stores(ptx: str) -> tuple[str, ...]:
    """Each store (``st.global``, or a generic ``st``) whose address does not come from a kernel or function
    parameter (the ISV pointer) but from a module variable (``st.global.f32 [g_last_kl]``) or from anything else,
    as ``opcode [address]``. Registers are followed through ``ld.param``, ``mov``, ``cvta``, ``add``/``sub``/``mad``
    from a parameter; everything else is not the ISV."""
    from_param: set[str] = set()
    out = []
    for m in _INSTRUCTION.finditer(ptx):
        op, first, rest = m.group(1), m.group(2).strip(), m.group(3) or ""
        if op.startswith("st.") or op == "st":
            if set(op.split(".")[1:]) & _OWN_SPACES:
                continue
            base = _ADDRESS.match(first)
            if base is None or base.group(1) not in from_param:
                out.append(f"{op} {first}")
            continue
        sources = re.findall(r"%\w+|\[[^\]]*\]", rest)
        if op.startswith("ld.param") or (op.split(".")[0] in ("mov", "cvta", "add", "sub", "mad")
                                         and any(s in from_param for s in sources)):
            from_param.add(first)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class StaticReport:
    """What the PTX and ptxas say about one kernel (counts are instructions in the PTX text)."""

    atomics: tuple[str, ...]  # atom./red. instructions, as written (a tuple: analyse() hands out one report)
    local_accesses: int  # ld.local/st.local instructions and .local declarations
    global_stores: int  # st.global instructions
    outside_stores: tuple[str, ...]  # stores not through a parameter (the ISV): module variables (outside_stores())
    registers: int | None  # per thread, from ptxas (None when it did not say)
    stack_bytes: int | None
    spill_bytes: int | None  # spill stores + spill loads
    arch: str
    nvrtc: str  # NVRTC version

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@cache  # loaded and checked once per process (a failure is not kept: it raises again)
def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except Exception as err:  # ImportError, or the NVRTC library fails to load
        raise BackendUnavailable(f"static checks: NVRTC not available ({type(err).__name__}: {err}); "
                                 "pip install --group static") from None
    try:
        _check(nvrtc, nvrtc.nvrtcVersion())
    except Exception as err:
        raise BackendUnavailable(f"static checks: NVRTC does not load ({err}); pip install --group static") from None
    return nvrtc


def nvrtc_unavailable() -> str | None:
    """None when NVRTC is usable here, else the one-line reason."""
    return unavailable_reason(_nvrtc)


def _check(nvrtc, result):
    """Unwrap a cuda-bindings ``(status, *values)`` tuple; raise on a failed status."""
    status, *values = result if isinstance(result, tuple) else (result,)
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC: {status}")
    return values[0] if len(values) == 1 else tuple(values)


def compile_ptx(code: str, origin: str, arch: str = ARCH, options: tuple[str, ...] = NVRTC_OPTIONS) -> tuple[str, str]:
    """``(PTX text, compile log)`` of ``code``; a rejected source raises a one-line :class:`SuiteError`.

    Kept in the build cache under the hash of everything they depend on (NVRTC's version, the architecture, the
    options, the origin, the code): about 50 ms of NVRTC a unit otherwise. The log is kept with the PTX, so the
    ptxas report (registers, stack) is there on every run, as NVRTC's own cache would not keep it (see below)."""
    nvrtc, version = _nvrtc(), _version()
    path = nvrtc_cache_file("ptx/{}.json", version, _compiler(), arch, options, origin, code)
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(kept["ptx"], str) and isinstance(kept["log"], str) and kept["ptx"]:
            return kept["ptx"], kept["log"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    built = _compile_ptx(nvrtc, version, code, origin, arch, options)
    keep_in_cache(path, json.dumps({"ptx": built[0], "log": built[1]}).encode())
    return built


@cache
def _version() -> tuple[int, int]:
    """NVRTC's (major, minor), asked once per process."""
    nvrtc = _nvrtc()
    return tuple(_check(nvrtc, nvrtc.nvrtcVersion()))


@cache
def _compiler() -> str:
    """The NVRTC build this process's cuda.bindings calls (translation_unit.compiler_identity; one small
    compilation per process, about 10 ms)."""
    return compiler_identity(_compile_ptx(_nvrtc(), _version(), IDENTITY_PROGRAM, "identity.cu", ARCH, ())[0])


def _compile_ptx(nvrtc, version: tuple, code: str, origin: str, arch: str, options: tuple[str, ...]) -> tuple[str, str]:
    prog = _check(nvrtc, nvrtc.nvrtcCreateProgram(code.encode(), origin.encode(), 0, [], []))
    try:
        # NVRTC ≥ 12.9 caches compilations, and a cached one prints no ptxas report (registers, stack):
        # the resources row would go unmeasured on a second run (seen on the H200 with NVRTC 13.0).
        no_cache = ("--no-cache",) if version >= (12, 9) else ()
        opts = [o.encode() for o in (*options, *no_cache, f"--gpu-architecture={arch}", "--ptxas-options=--verbose")]
        status = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
        log = b" " * _check(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog))
        _check(nvrtc, nvrtc.nvrtcGetProgramLog(prog, log))
        log_text = log.decode(errors="replace").rstrip("\x00 \n")
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise compile_error(origin, "NVRTC", log_text)
        ptx = b" " * _check(nvrtc, nvrtc.nvrtcGetPTXSize(prog))
        _check(nvrtc, nvrtc.nvrtcGetPTX(prog, ptx))
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return ptx.decode(errors="replace").rstrip("\x00"), log_text


def _readable(stores: tuple[str, ...]) -> tuple[str, ...]:
    """The stores with a C++ symbol as its source spells it (``[_ZZ…E5calls]`` → ``[rl_q_…::calls]``)."""
    symbols = sorted({m.group(1) for s in stores for m in [re.search(r"\[(_Z\w+)", s)] if m})
    names = demangled(symbols)
    return tuple(re.sub(r"\[(_Z\w+)", lambda m: "[" + names.get(m.group(1), m.group(1)), s) for s in stores)


def _ptxas_number(log: str, pattern: str) -> int | None:
    found = re.findall(pattern, log)
    return sum(int(x) for x in found) if found else None


@lru_cache(maxsize=128)  # a pure function of the source: the gate's callers in one process ask again
def analyse(source: KernelSource, arch: str = ARCH) -> StaticReport:
    """Compile the candidate as launched in production (its own text) and read its PTX and ptxas report."""
    ptx, log = compile_ptx(source.text, source.origin, arch)
    major, minor = _version()
    # ptxas reports per entry function; the candidate's file may hold helpers, so read its kernel's block.
    block = log.split(f"entry function '{source.symbol}'", 1)[-1].split("Compiling entry function", 1)[0]
    spills = [_ptxas_number(block, r"(\d+) bytes spill stores"), _ptxas_number(block, r"(\d+) bytes spill loads")]
    return StaticReport(
        atomics=tuple(sorted(set(_ATOMIC.findall(ptx)))),
        local_accesses=len(_LOCAL.findall(ptx)),
        global_stores=len(_GLOBAL_STORE.findall(ptx)),
        outside_stores=_readable(outside_stores(ptx)),
        registers=_ptxas_number(block, r"Used (\d+) registers"),
        stack_bytes=_ptxas_number(block, r"(\d+) bytes stack frame"),
        spill_bytes=None if None in spills else sum(spills),
        arch=arch,
        nvrtc=f"{major}.{minor}",
    )
