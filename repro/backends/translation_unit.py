"""Source text the backends compile: the controller plus the looped harness.

Both backends build the same unit so that the host C loop and the GPU
one-thread-per-run kernel run identical code around the controller.
"""

from __future__ import annotations

import re
from pathlib import Path

from repro.contract import Slots
from repro.errors import SuiteError
from repro.kernel_source import KernelSource

KERNELS = Path(__file__).resolve().parent.parent.parent / "kernels"
HOST_SHIM = KERNELS / "host_shim.h"
HARNESS = KERNELS / "looped_harness.cuh"

# Inside the controller a harness thread must look like thread 0 of a (1,),(1,)
# launch, exactly as in a per-step launch; the harness itself uses the real grid.
_DEVICE_LAUNCH_AS_ONE_THREAD = """\
struct rlq_dim3 { unsigned int x, y, z; };
#define threadIdx (rlq_dim3{0u, 0u, 0u})
#define blockIdx (rlq_dim3{0u, 0u, 0u})
#define blockDim (rlq_dim3{1u, 1u, 1u})
#define gridDim (rlq_dim3{1u, 1u, 1u})
"""
_DEVICE_RESTORE = "#undef threadIdx\n#undef blockIdx\n#undef blockDim\n#undef gridDim\n"


def compile_error(origin: str, compiler: str, log: str, most: int = 3) -> SuiteError:
    """One line for a user: what failed to compile, and the compiler's own first error lines."""
    lines = [ln.strip() for ln in log.splitlines() if "error" in ln]
    message = " | ".join(lines[:most]) or (log.strip().splitlines() or ["no message"])[-1]
    return SuiteError(f"{origin} does not compile ({compiler}): {message}")


def harness_unit(source: KernelSource, slots: Slots, for_device: bool) -> str:
    """The controller source followed by ``looped_harness.cuh``, slots from the contract."""
    prelude = (
        f"#define RLQ_CONTROLLER {source.symbol}\n"
        f"#define RLQ_LAMBDA_SLOT {slots.lambda_}\n"
        f"#define RLQ_KL_SLOT {slots.kl}\n"
        f"#define RLQ_TARGET_SLOT {slots.target}\n"
        f"#define RLQ_ISV_LEN {slots.isv_len}\n"
    )
    body, after = source.text, ""
    if for_device:
        # A __global__ cannot be called from a kernel: the harness calls a
        # __device__ copy (same text, same line numbers).
        body = re.sub(r"\b__global__\b", "__device__", body)
        prelude += _DEVICE_LAUNCH_AS_ONE_THREAD
        after = _DEVICE_RESTORE
    origin = source.origin.replace("\\", "/").replace('"', "'")
    return (
        f'{prelude}#line 1 "{origin}"\n{body}\n{after}'
        f'#line 1 "{HARNESS.name}"\n{HARNESS.read_text()}'
    )
