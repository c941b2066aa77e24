"""Start here: the fixed kernel, step by step, against float32 bits worked out by hand.

The rule (kernel comment, commit 96abc364b5): with target 0.02 the dead zone is
[fl(0.02/3), fl(0.02·3)] = [0.0066666664, 0.06]; KL above it multiplies λ by
1.2f (clamped to 1.0), KL below it by 0.998f (clamped to 0.05); inside it, or
with KL, target or λ ≤ 0, λ keeps its bits. Each expected value below was
derived on paper from IEEE-754 single precision (round to nearest even):

    0.1f   = 0x3DCCCCCD = 0.100000001490116
    1.2f   = 0x3F99999A = 1.200000047683716
    0.998f = 0x3F7F7CEE = 0.998000025749207
    0.1f · 1.2f = 0.120000006556511 → nearest float (ulp 2^-27) 16106128·2^-27 = 0.120000004768372 = 0x3DF5C290
    that · 0.998f = 0.119760007850… → nearest float 16073916·2^-27 = 0.119760006666183 = 0x3DF544BC
    0.9f · 1.2f = 1.08 → clamped to 1.0f = 0x3F800000
    0.0501f · 0.998f = 0.0499998 → below the floor, clamped to 0.05f = 0x3D4CCCCD

If this test fails, the kernel no longer does what its comment says, on the
plainest inputs there are.
"""

from __future__ import annotations

import numpy as np
import pytest

TARGET = 0.02
UPPER_EDGE = 0x3D75C28F  # fl(0.02f · 3.0f) = 0.06: still inside the band (the test is strict)

#: (λ before as bits, KL fed as bits or a float, λ after as bits, why)
STEPS = [
    (0x3DCCCCCD, 1.0, 0x3DF5C290, "KL 1.0 > 0.06: ramp ×1.2"),
    (0x3DF5C290, 0.02, 0x3DF5C290, "KL at the target: dead zone, λ keeps its bits"),
    (0x3DF5C290, UPPER_EDGE, 0x3DF5C290, "KL exactly fl(3·target): not above it, hold"),
    (0x3DF5C290, 0.001, 0x3DF544BC, "KL 0.001 < 0.00667: decay ×0.998"),
    (0x3DF544BC, -1.0, 0x3DF544BC, "KL ≤ 0: the guard returns, λ untouched"),
    (0x3F666666, 1.0, 0x3F800000, "λ 0.9 ramps to 1.08: clamped to the ceiling 1.0"),
    (0x3D4D35A8, 0.001, 0x3D4CCCCD, "λ 0.0501 decays to 0.0499998: clamped to the floor 0.05"),
]


def as_f32(value) -> np.float32:
    return np.uint32(value).view(np.float32) if isinstance(value, int) else np.float32(value)


@pytest.mark.parametrize("before, kl, after, why", STEPS, ids=[s[3] for s in STEPS])
def test_one_launch_of_the_fixed_kernel(contract, backend, before, kl, after, why):
    from repro.core.isv import new_isv

    kernel = backend.compile(contract.source("fixed"), contract.slots)
    lam, _ = kernel.run_per_step(new_isv(contract.slots, as_f32(before))[0], np.array([as_f32(kl)]),
                                 np.array([np.float32(TARGET)]))
    got = int(lam.view(np.uint32)[0])
    assert got == after, f"{why}: λ bits {got:#010x}, worked out {after:#010x}"
