"""What a layer holds for its backward, measured exactly: the bytes of the tensors autograd saves
while the layer's forward runs (``torch.autograd.graph.saved_tensors_hooks``), each storage counted
once, the layer's own parameters left out. No allocator, no process size: the same bytes on any
machine, which is what ppsim's activation memory per block and micro-batch predicts."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


def saved_activation_bytes(forward: Callable[..., Any], *inputs: torch.Tensor,
                           parameters: Iterable[torch.Tensor] = ()) -> tuple[int, Any]:
    """(bytes, output) of running ``forward(*inputs)`` with grad: the storages of every tensor it
    saves for its backward, each once, ``parameters`` left out (its input counts when it saves it:
    in a pipeline nothing else keeps a block's input)."""
    skip = {p.untyped_storage().data_ptr() for p in parameters}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward(*inputs)
    return sum(kept.values()), out
