"""The candidate as the device compilers see it, against the host build's view: the C preprocessor, no GPU.

The host backend compiles the candidate with the C++ compiler and ``kernels/host_shim.h``; the GPU compiles
it with NVRTC or nvcc's device pass, which define ``__CUDA_ARCH__``, ``__CUDACC__`` and ``__CUDACC_RTC__``
(NVRTC) or ``__NVCC__`` (nvcc), and read no shim. A candidate whose own text preprocesses differently under
those compilers runs code on the GPU that no CPU run measured. :func:`views` preprocesses the candidate once
as the host build sees it (the shim force-included, the stand-in headers on the include path) and once per
device view (the device compiler's macros, the stand-in headers, no shim), with the host C preprocessor's
directives only (``-E -fdirectives-only -dD``: conditionals, includes and ``#define`` lines are processed,
macros in the code are left as written, so that the shim's spellings of ``__global__`` and the like change
no token), and keeps the tokens of the candidate's own file, each with its line, comments left out. Deterministic,
no GPU; nothing of the candidate runs.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from repro.backends.host import CXX_HEADERS, FLAGS, includes_cxx_headers
from repro.backends.preprocessed import (  # noqa: F401 - NOT_NVRTC: read as this module's by the tests
    DEVICE_COMPILERS,
    NOT_NVRTC,
    NVRTC_VIEW_FLAGS,
    STDIN,
    device_macros,
    own_tokens,
)
from repro.backends.translation_unit import HOST_INCLUDE, HOST_SHIM
from repro.core import scratch
from repro.core.kernel_source import KernelSource, code_only

#: The preprocessor's own predefined macros per view: the host build's flags (``-O2`` defines ``__OPTIMIZE__``);
#: nvcc's device pass sees its host compiler's macros and headers too; NVRTC neither (``NVRTC_VIEW_FLAGS``).
_HOST_FLAGS = tuple(f for f in FLAGS if f != "-shared")
_VIEW_FLAGS = {"NVRTC": NVRTC_VIEW_FLAGS, "nvcc": _HOST_FLAGS}
#: Two builds of the same text on other days (the build's clock and the file's time; 1970 and 2033), as the gate's
#: and production's are: where the fully expanded text differs between them, the kernel depends on its build's date.
#: (The file's name stays: an ``assert`` names it, and behaves the same.)
_BUILD_DAYS = (0, 2_000_000_000)


@dataclass(frozen=True)
class View:
    """The candidate's own tokens under one set of predefined macros (``tokens``: ``(line, token)``, in order),
    or the preprocessor's first error line where it stopped (``error``)."""

    name: str  # "host", or "NVRTC sm_90", "nvcc sm_80", …
    macros: tuple[str, ...]  # -D arguments (NAME or NAME=VALUE)
    tokens: tuple[tuple[int, str], ...] = ()
    error: str = ""


@functools.lru_cache(maxsize=8)
def _defined(cxx: str, flags: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``(name, value)`` of every macro the preprocessor defines with ``flags`` before a line of input (``-dM``)."""
    done = subprocess.run([cxx, "-E", "-dM", *flags, "-x", "c++", "-"], input="", capture_output=True, text=True)
    return tuple((m.group(1), m.group(2)) for m in map(re.compile(r"#define (\w+) ?(.*)").match, done.stdout.splitlines())
                 if m)


def predefined(cxx: str, compiler: str) -> dict[str, str]:
    """The macros the view of ``compiler`` (a key of :data:`DEVICE_COMPILERS`) predefines, before its
    ``__CUDA*`` ones: name → value."""
    return dict(_defined(cxx, _VIEW_FLAGS[compiler]))


def _host_flags(source: KernelSource) -> tuple[str, ...]:
    """The host build's preprocessing flags for ``source`` (host.build's: the shim first, and CXX_HEADERS where the
    text includes a C++ standard header)."""
    return (*_HOST_FLAGS, *([f"-D{CXX_HEADERS}=1"] if includes_cxx_headers(source.text) else []),
            "-include", str(HOST_SHIM))


def _as_built(source: KernelSource, harness: str) -> str:
    """The text the host build compiles up to the candidate's end: the harness's own macros first (under a file name
    of their own, so that their lines are not the candidate's), then the candidate's lines."""
    return f'#line 1 "<harness>"\n{harness}#line 1 "{STDIN}"\n{source.text}' if harness else source.text


def _preprocess(cxx: str, source: KernelSource, name: str, macros: tuple[str, ...], harness: str = "") -> View:
    # the host build reads the shim and the harness's macros; no device compiler does (production builds the file)
    flags = _VIEW_FLAGS[name.split()[0]] if macros else _host_flags(source)
    text = source.text if macros else _as_built(source, harness)
    cmd = [cxx, "-E", "-fdirectives-only", "-dD", *flags, "-x", "c++", "-I", str(HOST_INCLUDE),
           *(f"-D{m}" for m in macros), "-"]
    done = subprocess.run(cmd, input=text, capture_output=True, text=True)
    if done.returncode != 0:
        first = next((ln.strip() for ln in done.stderr.splitlines() if "error" in ln), done.stderr.strip()[:200])
        return View(name, macros, error=first.replace(STDIN, source.origin))
    return View(name, macros, own_tokens(done.stdout))


def views(cxx: str, source: KernelSource, harness: str = "") -> tuple[View, ...]:
    """The host view first (``harness``: the ``#define`` lines the gate's builds put before the candidate), then each
    device view of :func:`device_macros` (side by side; about 0.03 s of CPU each, the host view's standard headers
    the most of it)."""
    wanted = {"host": (), **device_macros()}
    with ThreadPoolExecutor(len(wanted)) as pool:
        return tuple(pool.map(lambda item: _preprocess(cxx, source, *item, harness=harness), wanted.items()))


def _expanded(cxx: str, source: KernelSource, harness: str, folder: str,
              epoch: int) -> tuple[tuple[int, str], ...] | None:
    """``(line, token)`` for the candidate's own tokens fully expanded, built in ``folder`` as a file modified at
    ``epoch`` with the build's clock at ``epoch`` (SOURCE_DATE_EPOCH); None where the preprocessor stops (the views
    say why)."""
    folder = os.path.join(folder, str(epoch))
    os.mkdir(folder)
    name = os.path.join(folder, STDIN)
    with open(name, "w") as f:
        f.write(_as_built(source, harness))
    os.utime(name, (epoch, epoch))
    cmd = [cxx, "-E", *_host_flags(source), "-x", "c++", "-I", str(HOST_INCLUDE), STDIN]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=folder,
                          env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch)})
    if done.returncode != 0:
        return None
    return own_tokens(done.stdout)


def expanded(cxx: str, source: KernelSource, harness: str = "") -> tuple[tuple[tuple[int, str], ...] | None, ...]:
    """The host build's text fully expanded on each of :data:`_BUILD_DAYS` (``(line, token)``; None where the
    preprocessor stops)."""
    with scratch.folder("rlq-view-") as folder:
        return tuple(_expanded(cxx, source, harness, folder, epoch) for epoch in _BUILD_DAYS)


def varying_lines(builds) -> tuple[int, ...]:
    """The candidate's lines whose expanded tokens differ between its builds on other days (:func:`expanded`):
    ``__DATE__``, ``__TIME__``, ``__TIMESTAMP__`` however spelled (pasted, spliced)."""
    a, b = ([f"{line}:{tok}" for line, tok in build] if build is not None else None for build in builds)
    if a is None or b is None or a == b:
        return ()
    blocks = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    return tuple(sorted({int(t.split(":", 1)[0]) for _, i1, i2, j1, j2 in blocks for t in a[i1:i2] + b[j1:j2]}))


@dataclass(frozen=True)
class Conditional:
    """One ``#if``/``#ifdef``/``#ifndef`` … ``#endif`` group of the candidate's text (1-based lines)."""

    first: int
    last: int
    directive: str  # the opening line as written, e.g. ``#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800``


@dataclass(frozen=True)
class DeviceViews:
    """The host view and each device view of the candidate (:func:`views`), its conditional groups, and the
    macros its conditions name that no view defines (``unmodelled``: ``(line, name)``, see :func:`unmodelled`)."""

    views: tuple[View, ...]
    conditionals: tuple[Conditional, ...]
    unmodelled: tuple[tuple[int, str], ...] = ()

    @property
    def host(self) -> View:
        return self.views[0]

    @property
    def devices(self) -> tuple[View, ...]:
        return self.views[1:]


_DIRECTIVE = re.compile(r"^\s*#\s*(if|ifdef|ifndef|endif)\b")


def conditionals(text: str) -> tuple[Conditional, ...]:
    """The conditional groups of ``text`` (comments ignored), outermost first where they nest."""
    lines = code_only(text).splitlines()
    opened, out = [], []
    for number, code in enumerate(lines, 1):
        found = _DIRECTIVE.match(code)
        if not found:
            continue
        if found.group(1) == "endif":
            if opened:
                first = opened.pop()
                out.append(Conditional(first, number, text.splitlines()[first - 1].strip()))
        else:
            opened.append(number)
    return tuple(sorted(out, key=lambda c: (c.first, -c.last)))


_CONDITION = re.compile(r"^\s*#\s*(?:if|ifdef|ifndef|elif|elifdef|elifndef)\b(.*)$")
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)")
#: Macros every view defines, but whose value differs between the gate's build and the GPU's (the file's path, the
#: date and time of the build): a kernel keyed on them can tell the gate from production.
_VARIES = re.compile(r"\b(__FILE__|__FILE_NAME__|__BASE_FILE__|__DATE__|__TIME__|__TIMESTAMP__|__COUNTER__)\b")
#: String and character literals (what they hold names nothing).
_LITERAL = re.compile(r"""(?:u8|[uUL])?"(?:[^"\\\n]|\\.)*"|(?:u8|[uUL])?'(?:[^'\\\n]|\\.)*'""")


def _strings_out(code: str) -> str:
    return _LITERAL.sub(" ", code)


#: The preprocessor's own operators, not macros.
_OPERATORS = frozenset({"defined", "__has_include", "__has_include_next", "__has_cpp_attribute", "__has_attribute",
                        "__has_builtin", "__has_feature", "__has_extension"})


def compiler_macros(cxx: str) -> frozenset[str]:
    """The reserved names the host compiler itself predefines with the build's flags (``__cpp_*``, ``__GNUC__``,
    ``__SIZEOF_LONG__`` …): NVRTC defines some of them otherwise, or not at all."""
    return frozenset(name for name, _ in _defined(cxx, _HOST_FLAGS) if _reserved(name))


def _reserved(name: str) -> bool:
    return name.startswith("__") or (name[0] == "_" and name[1:2].isupper())


@functools.lru_cache(maxsize=4)
def modelled(cxx: str) -> frozenset[str]:
    """Every macro some view defines: the host build's (its compiler's predefined ones, the shim's, the stand-in
    headers') and each device view's (:func:`device_macros`)."""
    host = {name for name, _ in _defined(cxx, (*_HOST_FLAGS, "-include", str(HOST_SHIM), "-I", str(HOST_INCLUDE)))}
    return frozenset(host | {m.split("=")[0] for ms in device_macros().values() for m in ms})


def unmodelled(text: str, known: frozenset[str], compiler: frozenset[str] = frozenset()) -> tuple[tuple[int, str], ...]:
    """``(line, name)`` of each reserved identifier (``__x``, ``_X``) a conditional of ``text`` names that no view
    defines (``known``) and the text does not define itself: a compiler's own macro the views do not model
    (``__CUDACC_VER_MAJOR__``, ``__CUDA_ARCH_LIST__``, ``cuda_runtime.h``'s guard …). A compiler that defines
    it may build other code; the views cannot show it. Also each use of a macro whose value differs between the
    gate's build and the GPU's (:data:`_VARIES`: ``__FILE__``, ``__DATE__`` …), anywhere in the code, and each use
    outside a conditional of a macro the host compiler predefines (``compiler``: :func:`compiler_macros`, such as
    ``__cpp_unicode_characters``) or of an operator such as ``__has_builtin``: the device views leave code as
    written, so a value that differs on the GPU shows in no token (e.g. a decay of 0.98 under NVRTC only)."""
    lines = code_only(text).splitlines()
    own = {m.group(1) for m in map(_DEFINE.match, lines) if m}
    found = []
    for number, code in enumerate(lines, 1):
        found += [(number, name) for name in dict.fromkeys(_VARIES.findall(code)) if name not in own]
        condition = _CONDITION.match(code)
        if not condition:  # code, or a #define's body: expanded where it is used
            found += [(number, name) for name in dict.fromkeys(re.findall(r"[A-Za-z_]\w*", _strings_out(code)))
                      if (name in compiler or name in _OPERATORS - {"defined"}) and name not in own
                      and (number, name) not in found]
            continue
        for name in re.findall(r"[A-Za-z_]\w*", condition.group(1)):
            if _reserved(name) and name not in known and name not in own and name not in _OPERATORS \
                    and (number, name) not in found:
                found.append((number, name))
    return tuple(found)


#: ``#pragma`` spellings that change how g++ compiles what follows (its floating point, its target; ``None``: any),
#: which NVRTC ignores: ``#pragma GCC optimize("finite-math-only")`` drops a NaN branch from the host build only, so a
#: kernel whose GPU build sets λ to 1 on a NaN KL would pass on the host.
_HOST_PRAGMAS = {"GCC": {"optimize", "target", "push_options", "pop_options", "reset_options"}, "STDC": None,
                 "clang": None, "float_control": None, "fp_contract": None, "fenv_access": None}
#: Attributes that do the same for one function (``__attribute__((optimize(…)))``, ``[[gnu::optimize(…)]]``), and
#: those that run code nobody calls, or put it where the loader runs it: a ``static __host__ __device__`` function
#: marked ``constructor`` compiles under NVRTC (never called there, never emitted) and runs in every host build at
#: load, with no conditional for the views to see.
_HOST_ATTRIBUTES = frozenset({
    "optimize", "target", "target_clones", "constructor", "destructor", "init_priority", "section", "ifunc", "alias",
    "weak", "weakref"} | {f"__{name}__" for name in (
        "optimize", "target", "target_clones", "constructor", "destructor", "init_priority", "section", "ifunc",
        "alias", "weak", "weakref")})


#: A floating literal of type ``long double`` (``1e4000L``, ``0x1p-16400L``).
_LONG_DOUBLE_LITERAL = re.compile(
    r"^(?:\d[\d']*\.[\d']*(?:[eE][+-]?\d+)?|\d[\d']*[eE][+-]?\d+|\.\d[\d']*(?:[eE][+-]?\d+)?"
    r"|0[xX][\w.']*[pP][+-]?\d+)[lL]$")


def host_options(tokens) -> tuple[tuple[int, str], ...]:
    """``(line, spelling)`` of each pragma or attribute in the expanded text (:func:`expanded`; a ``_Pragma`` in a
    macro comes out as a ``#pragma`` line) that changes how only the host compiler builds the code, and each
    ``long double``: x87's 80 bits on the host, a double under NVRTC (its warning 20208-D): a kernel may choose its
    decay by whether 1e600 overflows, and so decay λ differently on the two."""
    toks, found = list(tokens or ()), []
    for i, (line, tok) in enumerate(toks):
        after = [t for _, t in toks[i + 1 : i + 4]]
        if (tok == "long" and after[:1] == ["double"]) or _LONG_DOUBLE_LITERAL.match(tok):
            found.append((line, "long double"))
            continue
        if tok == "#" and after[:1] == ["pragma"] and len(after) > 1 and after[1] in _HOST_PRAGMAS:
            wanted = _HOST_PRAGMAS[after[1]]
            if wanted is None or (len(after) > 2 and after[2] in wanted):
                found.append((line, " ".join(["#pragma", *after[1 : 2 if wanted is None else 3]])))
        elif tok in ("__attribute__", "__attribute"):
            depth = 0
            for _, t in toks[i + 1 :]:
                depth += (t == "(") - (t == ")")
                if t in _HOST_ATTRIBUTES:
                    found.append((line, f"__attribute__(({t}))"))
                    break
                if depth <= 0 and t == ")":
                    break
        elif tok == "::" and i and toks[i - 1][1] in ("gnu", "__gnu__") and after[:1] and after[0] in _HOST_ATTRIBUTES:
            found.append((line, f"[[gnu::{after[0]}]]"))
        elif tok == "[" and after[:2] == ["[", "using"]:  # [[using gnu: constructor, …]] (C++17)
            for _, t in toks[i + 3 :]:
                if t == "]":
                    break
                if t in _HOST_ATTRIBUTES:
                    found.append((line, f"[[using …: {t}]]"))
                    break
    return tuple(dict.fromkeys(found))


#: How :func:`measure` names a line whose expansion depends on the build's date or path (:func:`varying_lines`).
BUILD_DEPENDENT = "the build's date or time (expanded)"


@functools.lru_cache(maxsize=128)  # a pure function of the source and the compiler: a test session asks again
def measure(cxx: str, source: KernelSource, harness: str = "") -> DeviceViews:
    """:func:`views`, :func:`conditionals` and :func:`unmodelled` of ``source``, the latter with each line
    :func:`varying_lines` finds that no name already explains. ``harness``: the gate's builds' own macros."""
    found = list(unmodelled(source.text, modelled(cxx), compiler_macros(cxx)))
    builds = expanded(cxx, source, harness)
    named = {line for line, _ in found}
    found += [(line, BUILD_DEPENDENT) for line in varying_lines(builds) if line not in named]
    found += [item for item in host_options(builds[0]) if item not in found]
    return DeviceViews(views(cxx, source, harness), conditionals(source.text), tuple(sorted(found)))
