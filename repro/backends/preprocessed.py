"""The candidate's text as a C preprocessor gives it: the device compilers' predefined macros, the output's tokens.

Shared by :mod:`repro.backends.device_view` (the candidate under each compiler's macros, against the host build's
view) and :mod:`repro.backends.kernel_entry` (the kernel the production path launches by name). Imports nothing of the
other backends, so that :mod:`repro.backends.translation_unit` can use it.
"""

from __future__ import annotations

import bisect
import itertools
import os
import re
import shutil

#: The GPU architectures the team builds for (``__CUDA_ARCH__``): A100 (sm_80) and H100/H200 (sm_90).
DEVICE_ARCHS = (800, 900)

#: Each device compiler's predefined macros that decide what a candidate's text preprocesses to.
DEVICE_COMPILERS = {
    "NVRTC": ("__CUDACC__", "__CUDACC_RTC__"),
    "nvcc": ("__CUDACC__", "__NVCC__"),
}
#: What the host preprocessor still defines under ``-undef`` that NVRTC does not (probed: a candidate keyed on
#: ``__STDC_UTF_16__`` passed the gate with a decay only NVRTC built; tests/test_gate_trust.py asks NVRTC again).
NOT_NVRTC = ("_GNU_SOURCE", "__STDC_UTF_16__", "__STDC_UTF_32__")
#: The host preprocessor's flags for NVRTC's view: only the language's standard macros stay (``-undef``), and the
#: stand-in headers are the only ones (``-nostdinc``), as NVRTC has no C library's.
NVRTC_VIEW_FLAGS = ("-std=c++17", "-undef", "-nostdinc", *(f"-U{m}" for m in NOT_NVRTC))

# The candidate's text goes in on stdin: its lines in the output carry this name in the line markers.
STDIN = "<stdin>"
_MARKER = re.compile(r'^#\s*(?:line\s+)?(\d+)\s+"((?:[^"\\]|\\.)*)"')
# C/C++ preprocessing tokens, enough to compare two outputs of one preprocessor: literals whole, then
# identifiers, numbers, and punctuators (the longest first).
TOKEN = re.compile(r"""
    //[^\n]*|/\*.*?\*/                                                # comments (dropped)
  | (?:u8|[uUL])?R"(?P<delim>[^()\\\s]{0,16})\(.*?\)(?P=delim)"   # raw string
  | (?:u8|[uUL])?"(?:[^"\\\n]|\\.)*"                               # string
  | (?:u8|[uUL])?'(?:[^'\\\n]|\\.)*'                               # character
  | \.?\d(?:[eEpP][+-]|[\w.'])*                                      # pp-number
  | [A-Za-z_]\w*
  | %:%:|\.\.\.|<<=|>>=|->\*|<=>|::|\#\#|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^!=<>]=|\.\*
  | \S""", re.X | re.S)


def device_macros() -> dict[str, tuple[str, ...]]:
    """Each device view's name and its predefined macros (every compiler × every arch in :data:`DEVICE_ARCHS`)."""
    return {f"{compiler} sm_{arch // 10}": (*names, f"__CUDA_ARCH__={arch}")
            for compiler, names in DEVICE_COMPILERS.items() for arch in DEVICE_ARCHS}


def find_cxx() -> str | None:
    """The host's C++ compiler (``$CXX``, else the first of c++, g++, clang++ on the path) as a full path; None
    where there is none."""
    cxx = os.environ.get("CXX") or next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
    return shutil.which(cxx) if cxx else None


def own_tokens(output: str) -> tuple[tuple[int, str], ...]:
    """``(line, token)`` for every token the preprocessor's output attributes to the candidate's own file
    (``-dD`` keeps its ``#define``/``#undef`` lines: a macro defined differently shows where), comments left out."""
    kept, current, line = [], None, 0
    for text in output.splitlines():
        marker = _MARKER.match(text)
        if marker:
            line, current = int(marker.group(1)), marker.group(2)
            continue
        if current == STDIN:
            kept.append((line, text))
        line += 1
    if not kept:
        return ()
    starts = list(itertools.accumulate((len(text) + 1 for _, text in kept[:-1]), initial=0))
    joined = "\n".join(text for _, text in kept)
    return tuple((kept[bisect.bisect_right(starts, m.start()) - 1][0], m.group(0)) for m in TOKEN.finditer(joined)
                 if not m.group(0).startswith(("//", "/*")))
