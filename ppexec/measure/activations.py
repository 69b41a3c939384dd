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


def pending_weight_grad_bytes(module: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor) -> tuple[int, int]:
    """(bytes kept between the input grad and the weight grad, bytes saved by the forward) of
    ``module`` on ``x`` when its backward is split as torch's pipelining runtime splits it
    (``stage_backward_input``, then ``stage_backward_weight``), the output's gradient ``grad``
    given: what the forward saved that the weight grads still hold, and the gradients of the
    intermediate values they start from, each storage once, the parameters left out."""
    import gc
    import weakref

    from torch.distributed.pipelining._backward import stage_backward_input

    params = list(module.parameters())
    skip = {p.untyped_storage().data_ptr() for p in params}
    saved: list[weakref.ref[torch.Tensor]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in skip:
            saved.append(weakref.ref(t))
        return t

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = module(x)
    forward = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for r in saved if (t := r()) is not None}
    _, groups = stage_backward_input([out], [grad], [x], iter(params))
    del out
    gc.collect()
    kept: dict[int, int] = {}
    for r in saved:
        t = r()
        if t is not None:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    for group in groups:
        for grads in group.get("grads") or ():
            for g in grads or ():
                if isinstance(g, torch.Tensor):
                    kept[g.untyped_storage().data_ptr()] = g.untyped_storage().nbytes()
    return sum(kept.values()), sum(forward.values())
