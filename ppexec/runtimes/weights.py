"""How every layer ppexec builds draws its weights: from a seed of its own, so a layer (or an
expert) has the same weights wherever it is built — on a pipeline stage, on an expert-parallel rank,
or in the one-process reference the parity checks compare with."""

from __future__ import annotations

import torch
from torch import nn


def init_weights(module: nn.Module, seed: int) -> None:
    """Re-initialise every parameter of ``module`` from ``seed`` (GPT-2 style: normal(0, 0.02),
    biases zero, norms one)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif "norm" in name:
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32) * 0.02)
