"""The λ controller as production runs it: a float32 ISV, one row per run, on the trainer's device.

The loop writes the KL EMA into the contract's KL slot (torch ops, on the device); the controller kernel — the
unmodified ``.cu`` file of a contract entry, or any ``--kernel`` — updates the λ slot in place; the loop reads λ
back from the ISV for the next step's loss. Nothing is copied between the ISV and the kernel:

- ``cupy``: the suite's cupy backend (NVRTC with the suite's IEEE options) launches the kernel on torch's current
  stream (``cupy.cuda.ExternalStream``), so that it is ordered with the torch ops and captured by a CUDA graph;
  the kernel's ISV argument is a CuPy view of the torch tensor's memory (``__cuda_array_interface__``).
- ``host``: the host backend's ctypes build of the same ``.cu`` is called on the tensor's ``data_ptr``.

``mode``: ``per_row`` launches the controller once per run on its row (a pointer offset), as production does;
``batched`` runs every row of an arm in one launch of the suite's looped harness (``rlq_batched_step``,
``kernels/looped_harness.cuh``). Both give the same bits (``tests/test_deep_controller.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from repro.core.contract import Slots
from repro.core.errors import SuiteError

MODES = ("per_row", "batched")


@dataclass(frozen=True)
class ArmRows:
    """One controller's compiled kernel and the contiguous ISV rows ``[start, stop)`` it drives."""

    name: str
    kernel: object  # a CompiledKernel of the backend
    start: int
    stop: int
    seed_lambda: float


class Controllers:
    """Every arm's kernel on its rows of one ISV tensor ``[R, isv_len]`` (float32, contiguous)."""

    def __init__(self, backend, isv: torch.Tensor, arms: list[ArmRows], slots: Slots, mode: str = "batched"):
        if mode not in MODES:
            raise SuiteError(f"controller mode {mode!r}: choose from {', '.join(MODES)}")
        if not (isv.is_contiguous() and isv.dtype == torch.float32 and isv.shape[-1] == slots.isv_len):
            raise SuiteError("the ISV must be a contiguous float32 [runs, isv_len] tensor")
        self.backend, self.isv, self.arms, self.slots, self.mode = backend, isv, arms, slots, mode
        if backend.name == "cupy":
            if not isv.is_cuda:
                raise SuiteError("--backend cupy needs the loop on a CUDA device")
            import cupy

            self._cp = cupy
            self._view = cupy.asarray(isv)  # zero-copy: the tensor's own memory
            if self._view.data.ptr != isv.data_ptr():
                raise SuiteError("cupy view of the ISV is a copy")
            self._rows = {a.name: [self._view[r] for r in range(a.start, a.stop)] for a in arms}
            self._slices = {a.name: self._view[a.start:a.stop] for a in arms}
        elif backend.name == "host":
            if isv.is_cuda:
                raise SuiteError("--backend host runs the kernel on the CPU: the loop must run on the CPU")
            self._array = isv.numpy()  # zero-copy view of the tensor
        else:
            raise SuiteError(f"backend {backend.name!r} has no deep-loop launcher")

    def step(self) -> None:
        """One controller step on every row (queued on torch's current stream on the GPU; no host sync)."""
        if self.backend.name == "cupy":
            stream = self._cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
            with stream:
                for arm in self.arms:
                    if self.mode == "batched":
                        arm.kernel.batched_step(self._slices[arm.name])
                    else:
                        for row in self._rows[arm.name]:
                            arm.kernel.launch(row)
            return
        base, stride = self.isv.data_ptr(), 4 * self.slots.isv_len
        for arm in self.arms:
            if self.mode == "batched":
                arm.kernel.batched_step(self._array[arm.start:arm.stop])
            else:
                for r in range(arm.start, arm.stop):
                    arm.kernel.step(base + r * stride)


def new_isv(n: int, slots: Slots, device) -> torch.Tensor:
    """``[n, isv_len]`` float32 with every slot holding the contract's sentinel bits (a stray write shows)."""
    bits = int(np.array([slots.sentinel], dtype=np.uint32).view(np.int32)[0])
    return torch.full((n, slots.isv_len), bits, dtype=torch.int32, device=device).view(torch.float32)
