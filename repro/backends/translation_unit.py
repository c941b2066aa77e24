"""Source text the backends compile: the controller plus the looped harness.

Both backends build the same unit so that the host C loop and the GPU
one-thread-per-run kernel run identical code around the controller.
"""

from __future__ import annotations

import functools
import hashlib
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from repro.backends.base import cache_dir
from repro.backends.kernel_entry import Entry, declarations, launchable
from repro.backends.preprocessed import DEVICE_ARCHS, NVRTC_VIEW_FLAGS, TOKEN, device_macros, find_cxx, own_tokens
from repro.core.contract import Slots
from repro.core.errors import SuiteError
from repro.core.kernel_source import KernelSource, code_only
from repro.core.paths import ROOT

KERNELS = ROOT / "kernels"
HOST_SHIM = KERNELS / "host_shim.h"
HARNESS = KERNELS / "looped_harness.cuh"
LEARNING_LOOP = KERNELS / "learning_loop.cuh"
HOST_GRID = KERNELS / "host_grid.cuh"
#: Stand-ins for the CUDA headers a controller may include (cuda_runtime.h, cuda.h, math_constants.h),
#: on the include path of both the host compiler and NVRTC.
HOST_INCLUDE = KERNELS / "host_include"
#: NVRTC's options wherever a kernel is compiled for the GPU (the cupy backend, the static PTX rules): IEEE
#: float32 (no FMA contraction, no flush to zero, correctly rounded division and square root), the stand-ins.
NVRTC_OPTIONS = ("--std=c++17", "--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true",
                 f"-I{HOST_INCLUDE}")


@functools.cache
def _nvrtc_headers() -> str:
    """The text of every header NVRTC's include path (``HOST_INCLUDE``) offers."""
    return "\0".join(p.read_text() for p in sorted(HOST_INCLUDE.glob("*.h")))


#: A program for :func:`compiler_identity`: NVRTC writes its own build above the PTX of any code.
IDENTITY_PROGRAM = 'extern "C" __global__ void rlq_identity() {}\n'


def compiler_identity(ptx_header: str) -> str:
    """The lines of a PTX text that name the compiler that wrote it (``// Compiler Build ID: CL-…``, ``// Cuda
    compilation tools, release 13.0, V13.0.88``): the patch release, which ``nvrtcVersion`` (major.minor) does not
    say. Each NVRTC client (cuda.bindings for the static checks, CuPy for the GPU's builds) reads it from the
    library it calls, so that parent and worker agree whatever else the process has mapped."""
    return "\n".join(line.strip() for line in ptx_header.splitlines()[:12]
                     if line.startswith(("// Compiler Build ID", "// Cuda compilation tools", "// Based on")))


def nvrtc_cache_file(name: str, version: tuple, compiler: str, arch, options: tuple[str, ...], origin: str,
                     code: str) -> Path:
    """The build cache's file ``name`` (``ptx/{}.json``, ``nvrtc/{}.cubin``, the hash in its braces) for NVRTC's
    output from ``code``: the hash of everything that output depends on — NVRTC's version and build
    (``compiler``: :func:`compiler_identity`), the architecture, the options, the origin (line information names
    it), the include path's headers' text and the code."""
    inputs = "\0".join([repr((version, arch, options, origin)), compiler, _nvrtc_headers(), code])
    return cache_dir() / name.format(hashlib.sha256(inputs.encode()).hexdigest()[:40])


_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^()]*(?:\([^()]*\)[^()]*)*\)")

# Inside the controller a harness thread must look like thread 0 of a (1,),(1,)
# launch, exactly as in a per-step launch; the harness itself uses the real grid.
_DEVICE_LAUNCH_AS_ONE_THREAD = """\
struct rlq_dim3 { unsigned int x, y, z; };
#define threadIdx (rlq_dim3{0u, 0u, 0u})
#define blockIdx (rlq_dim3{0u, 0u, 0u})
#define blockDim (rlq_dim3{1u, 1u, 1u})
#define gridDim (rlq_dim3{1u, 1u, 1u})
// __ldg reads through the non-coherent read-only cache, valid only for data no thread writes during the
// kernel. A launch per step keeps that promise; the harness, which writes KL and λ between the steps of
// one kernel, does not (measured on the H200: stale KL, λ one step behind). A plain load keeps the value.
#define __ldg(p) (*(p))
"""
_UNDEF_DIMS = "#undef threadIdx\n#undef blockIdx\n#undef blockDim\n#undef gridDim\n"
_DEVICE_RESTORE = _UNDEF_DIMS + "#undef __ldg\n"

# The device twin of host_grid.cuh: inside the controller, thread i of the real
# launch plays the coordinates of row i of a table (set by rlq_set_coords).
_DEVICE_AS_THREADS = """\
struct rlq_dim3 { unsigned int x, y, z; };
__device__ const unsigned int* rlq_coords;
__device__ const unsigned int* rlq_dims;
__device__ __forceinline__ long long rlq_real_thread() { return (long long)blockIdx.x * blockDim.x + threadIdx.x; }
extern "C" __global__ void rlq_set_coords(const unsigned int* coords, const unsigned int* dims) {
    rlq_coords = coords;
    rlq_dims = dims;
}
#define threadIdx (rlq_dim3{rlq_coords[6 * rlq_real_thread()], rlq_coords[6 * rlq_real_thread() + 1], \\
                            rlq_coords[6 * rlq_real_thread() + 2]})
#define blockIdx (rlq_dim3{rlq_coords[6 * rlq_real_thread() + 3], rlq_coords[6 * rlq_real_thread() + 4], \\
                           rlq_coords[6 * rlq_real_thread() + 5]})
#define blockDim (rlq_dim3{rlq_dims[0], rlq_dims[1], rlq_dims[2]})
#define gridDim (rlq_dim3{rlq_dims[3], rlq_dims[4], rlq_dims[5]})
"""
_DEVICE_AS_THREADS_KERNEL = "\n" + _UNDEF_DIMS + """\
extern "C" __global__ void rlq_as_threads(float* isv, long long n) {
    const long long i = rlq_real_thread();
    if (i < n) RLQ_CONTROLLER(isv + i * RLQ_ISV_LEN);
}
"""


def device_body(text: str) -> str:
    """The controller as a ``__device__`` function the harness can call (same line numbers).

    A ``__global__`` cannot be called from a kernel, and ``__launch_bounds__`` applies to kernels only.
    """
    text = _LAUNCH_BOUNDS.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return re.sub(r"\b__global__\b", "__device__", text)


def compile_error(origin: str, compiler: str, log: str, most: int = 3) -> SuiteError:
    """One line for a user: what failed to compile, and the compiler's own first error lines."""
    lines = [ln.strip() for ln in log.splitlines() if "error" in ln]
    message = " | ".join(lines[:most]) or (log.strip().splitlines() or ["no message"])[-1]
    return SuiteError(f"{origin} does not compile ({compiler}): {message}")


#: The NVRTC view whose tokens say which kernel production launches (the newest architecture the team builds for;
#: a kernel defined for one architecture only differs between the device views, which the device_view row reads).
_ENTRY_VIEW = device_macros()[f"NVRTC sm_{max(DEVICE_ARCHS) // 10}"]
_ENTRIES: dict[KernelSource, Entry] = {}
_DIRECTIVE_LINE = re.compile(r"^[ \t]*#.*$", re.M)
_PRAGMA_LINE = re.compile(r"^[ \t]*#[ \t]*pragma\b.*$", re.M)


def _entry_tokens(source: KernelSource) -> list[str]:
    """The candidate's own tokens as NVRTC's preprocessor gives them (macros expanded, comments and directives gone);
    where the host has no C++ compiler or the view stops (a header NVRTC lacks: NVRTC rejects it later, with its own
    message), the text's tokens with its directive lines left out."""
    cxx = find_cxx()
    if cxx:
        cmd = [cxx, "-E", *NVRTC_VIEW_FLAGS, "-x", "c++", "-I", str(HOST_INCLUDE), *(f"-D{m}" for m in _ENTRY_VIEW), "-"]
        done = subprocess.run(cmd, input=source.text, capture_output=True, text=True)
        if done.returncode == 0:  # a #pragma (from _Pragma too) is a line of its own in the output: not code
            return [tok for _, tok in own_tokens(_PRAGMA_LINE.sub("", done.stdout))]
    code = _DIRECTIVE_LINE.sub("", code_only(source.text).replace("\\\n", ""))
    return [m.group(0) for m in TOKEN.finditer(code) if not m.group(0).startswith(("//", "/*"))]


def entry(source: KernelSource, ask: Callable[[KernelSource], Entry] | None = None) -> Entry:
    """The kernel production launches by ``source.symbol`` (:mod:`repro.backends.kernel_entry`), or a one-line
    :class:`SuiteError` saying why none can be; remembered for the source (a forked worker inherits it).
    ``ask``: who finds it instead where this process may start no preprocessor (a confined child's parent)."""
    if source not in _ENTRIES:
        _ENTRIES[source] = (ask(source) if ask is not None
                            else launchable(declarations(_entry_tokens(source)), source.symbol, source.origin))
    return _ENTRIES[source]


def harness_defines(source: KernelSource | None, slots: Slots) -> str:
    """The macros every harness unit defines before the controller's text (a production build has none of them:
    the device view's host side reads them, so that a controller keyed on them fails there). The controller is
    called by its qualified name (:func:`entry`)."""
    return (
        f"#define RLQ_CONTROLLER {entry(source).call if source else _HOST_CONTROLLER}\n"
        f"#define RLQ_LAMBDA_SLOT {slots.lambda_}\n"
        f"#define RLQ_KL_SLOT {slots.kl}\n"
        f"#define RLQ_TARGET_SLOT {slots.target}\n"
        f"#define RLQ_ISV_LEN {slots.isv_len}\n"
    )


def line_origin(source: KernelSource) -> str:
    """The file name the ``#line`` directives give the controller's lines (gcov reports their counts under it)."""
    return source.origin.replace("\\", "/").replace('"', "'")


def harness_unit(source: KernelSource, slots: Slots, for_device: bool, harness: Path = HARNESS) -> str:
    """The controller source followed by ``harness`` (``looped_harness.cuh``, and on the host ``host_grid.cuh``;
    or, for NVRTC, ``learning_loop.cuh``, the learning study's loop, a unit of its own so that the gate never
    compiles it; the host builds that loop alone: :func:`host_learning_unit`)."""
    prelude, body, after, grid = harness_defines(source, slots), source.text, "", ""
    if for_device:
        body = device_body(body)
        prelude += _DEVICE_LAUNCH_AS_ONE_THREAD
        after = _DEVICE_RESTORE
    elif harness == HARNESS:
        grid = f'#line 1 "{HOST_GRID.name}"\n{HOST_GRID.read_text()}'
    return (
        f'{prelude}#line 1 "{line_origin(source)}"\n{body}\n{after}'
        f'#line 1 "{harness.name}"\n{harness.read_text()}{grid}'
    )


# The host's learning loop is built once per slot layout and calls the controller of its caller's thread through
# this pointer (the controller's own library, the one every host run uses): building the loop with each controller
# cost about 1.2 s a learner. The bits are the same (-ffp-contract=off: inlined or called, the same float32 steps).
_HOST_CONTROLLER = "rlq_host_controller"
_HOST_CONTROLLER_SLOT = f"""\
static thread_local void (*{_HOST_CONTROLLER})(float*) = nullptr;
extern "C" void rlq_learn_with(void (*controller)(float*)) {{ {_HOST_CONTROLLER} = controller; }}
"""


def host_learning_unit(slots: Slots) -> str:
    """The learning loop for the host, without a controller: ``rlq_learn_with(f)`` names this thread's."""
    return f'{harness_defines(None, slots)}{_HOST_CONTROLLER_SLOT}#line 1 "{LEARNING_LOOP.name}"\n{LEARNING_LOOP.read_text()}'


def device_grid_unit(source: KernelSource, slots: Slots) -> str:
    """NVRTC: the controller with launch coordinates read from a table (``rlq_set_coords``, ``rlq_as_threads``)."""
    return (f'{harness_defines(source, slots)}{_DEVICE_AS_THREADS}#line 1 "{line_origin(source)}"\n'
            f"{device_body(source.text)}\n{_DEVICE_AS_THREADS_KERNEL}")
