"""Megatron-style tensor parallelism for ppexec's blocks: the group, the two communication
operators, and which slice of each full weight a tensor-parallel rank holds.

A block splits its attention heads and its MLP's hidden units over the ``size`` ranks of its group:
the QKV projection and the first MLP matrix by output rows (column-parallel), the attention output
projection and the second MLP matrix by input columns (row-parallel). Each half of the block then
needs one all-reduce in the forward (after the row-parallel matrix) and one in the backward
(the gradient of the column-parallel matrix's input), as in Shoeybi et al. (2019). Layer norms and
the biases added after an all-reduce are replicated: every rank holds the whole tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch


@dataclass(frozen=True)
class TPGroup:
    """This rank's tensor-parallel group: a torch.distributed group, its rank in it, its size."""

    group: Any
    rank: int
    size: int


def make_groups(world: int, size: int, rank: int, timeout: timedelta | None = None) -> TPGroup | None:
    """The tensor-parallel group of ``rank`` when every ``size`` consecutive ranks form one (the
    model axis is the fastest in DeepSpeed's pipe x data x model topology). Every rank must call it
    (torch creates each group on all ranks). Give the run's ``timeout``: a new group's own default
    is 30 minutes, whatever the default group was given."""
    if size <= 1:
        return None
    import torch.distributed as dist

    mine = None
    for first in range(0, world, size):
        group = dist.new_group(ranks=list(range(first, first + size)), timeout=timeout)
        if first <= rank < first + size:
            mine = TPGroup(group, rank - first, size)
    assert mine is not None
    return mine


class _CopyToGroup(torch.autograd.Function):
    """Identity forward; the backward all-reduces the gradient (the input feeds every rank's slice)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
        ctx.tp = tp
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        import torch.distributed as dist

        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.tp.group)
        return grad, None


class _ReduceFromGroup(torch.autograd.Function):
    """All-reduce forward (sum of the ranks' partial products); identity backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
        import torch.distributed as dist

        x = x.contiguous()
        dist.all_reduce(x, group=tp.group)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def copy_to_group(x: torch.Tensor, tp: TPGroup | None) -> torch.Tensor:
    return x if tp is None else _CopyToGroup.apply(x, tp)


def reduce_from_group(x: torch.Tensor, tp: TPGroup | None) -> torch.Tensor:
    return x if tp is None else _ReduceFromGroup.apply(x, tp)


#: how each parameter of a block is split: by output rows (0), input columns (1), or not at all
SPLIT_DIM: dict[str, int | None] = {
    "norm1.weight": None, "norm1.bias": None,
    "qkv.weight": 0, "qkv.bias": 0,
    "proj.weight": 1, "proj.bias": None,
    "norm2.weight": None, "norm2.bias": None,
    "fc1.weight": 0, "fc1.bias": 0,
    "fc2.weight": 1, "fc2.bias": None,
}


def shard(name: str, full: torch.Tensor, rank: int, size: int) -> torch.Tensor:
    """The part of a block's full parameter ``name`` that tensor-parallel rank ``rank`` holds.
    QKV rows are three stacked blocks (Q, K, V); a rank takes the same heads from each."""
    dim = SPLIT_DIM[name]
    if dim is None or size == 1:
        return full
    if name.startswith("qkv."):
        return torch.cat([part.chunk(size, dim=0)[rank] for part in full.chunk(3, dim=0)], dim=0)
    return full.chunk(size, dim=dim)[rank]


def is_sharded(name: str) -> bool:
    """Whether the block parameter ``name`` (``qkv.weight``, ...) is split over the ranks."""
    return SPLIT_DIM.get(name) is not None

