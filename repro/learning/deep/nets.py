"""MLPs batched over runs: one weight tensor ``[R, in, out]`` per layer, applied with ``torch.baddbmm``.

Run r's parameters are row r of every tensor; a loss summed over runs gives each run the gradient of its own
loss, and Adam (elementwise) updates each run as if it trained alone.
"""

from __future__ import annotations

import math

import torch


def init_mlp(n: int, sizes: list[int], generator: torch.Generator | None, device) -> list[torch.Tensor]:
    """``[W1, b1, W2, b2, …]`` for ``n`` runs, uniform in ±1/√fan_in (PyTorch's ``nn.Linear`` default)."""
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        bound = 1.0 / math.sqrt(fan_in)
        for shape in ((n, fan_in, fan_out), (n, 1, fan_out)):
            params.append((torch.rand(shape, generator=generator, device=device) * 2 - 1) * bound)
    return params


def forward(params: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``x`` ``[R, B, in]`` → ``[R, B, out]``: ReLU between layers, linear output."""
    n_layers = len(params) // 2
    for i in range(n_layers):
        x = torch.baddbmm(params[2 * i + 1], x, params[2 * i])
        if i < n_layers - 1:
            x = torch.relu(x)
    return x
