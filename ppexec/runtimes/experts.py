"""A mixture of experts in place of a block's MLP (``model.moe``), as ppsim describes it, with
expert parallelism over the data-parallel replicas of a stage.

The layer: a router (h x E, no bias) scores each token; the top k experts by softmax probability
take it, weighted by their probabilities renormalised over the k (Mixtral's rule); each expert is a
GELU MLP of width ``moe.ffn_hidden`` without biases; shared experts, when the model has them, see
every token (one GELU MLP of width n_s x f_s: n_s MLPs summed). No auxiliary loss, no capacity:
every token reaches its k experts (dropless), as ppsim assumes.

Expert parallelism (EP): the replicas of a stage form groups of EP consecutive replicas (Megatron's
order with t = 1), each holding E / EP of the experts; a token's copies travel to their experts'
ranks by an all-to-all (dispatch) and back by another (combine), both differentiable (their backward
is the reverse all-to-all). Replicas i, i + EP, ... hold the same experts: the expert data-parallel
group, over which those experts' gradients are reduced. Every expert draws its weights from a seed of
its own, so a rank holding some experts has the weights one process holding all of them has.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ppexec.runtimes.weights import init_weights
from ppsim.api import ModelSpec

#: (start, end) of each of this process's all-to-alls, on perf_counter_ns (the worker records them per step)
EXCHANGES: list[tuple[int, int]] = []
#: the token copies this rank's experts received in each MoE layer forward of an expert-parallel
#: group, in order (the worker records them per step: the routing's imbalance over the group)
RECEIVED: list[int] = []
#: this rank's token copies per expert (every expert of the model) in each MoE layer forward of an
#: expert-parallel group, in order (the worker records them per step: the routing, expert by expert)
ROUTED: list[list[int]] = []


@dataclass(frozen=True)
class ExpertGroups:
    """This rank's expert-parallel group (its rank in it, its size) and expert data-parallel group."""

    group: Any
    rank: int
    size: int
    replicas: Any  #: the ranks holding the same experts (None: none other)


def make_expert_groups(pipeline_ranks: int, replicas: int, ep: int, rank: int,
                       timeout: timedelta | None = None) -> ExpertGroups | None:
    """The groups of global ``rank`` when global rank = pipeline rank x ``replicas`` + replica:
    each pipeline rank's replicas in groups of ``ep`` consecutive ones, and across those groups the
    replicas at the same place. Every rank must call it (torch makes each group on every rank)."""
    if ep <= 1:
        return None
    import torch.distributed as dist

    mine: dict[str, Any] = {}
    pipe, replica = divmod(rank, replicas)
    for q in range(pipeline_ranks):
        for first in range(0, replicas, ep):
            group = dist.new_group([q * replicas + r for r in range(first, first + ep)], timeout=timeout)
            if q == pipe and first <= replica < first + ep:
                mine["group"] = group
        for place in range(ep):
            members = [q * replicas + r for r in range(place, replicas, ep)]
            group = dist.new_group(members, timeout=timeout) if len(members) > 1 else None
            if q == pipe and replica % ep == place:
                mine["replicas"] = group
    return ExpertGroups(mine["group"], replica % ep, ep, mine.get("replicas"))


class _AllToAll(torch.autograd.Function):
    """Rows of ``x`` sent in ``send`` counts to each rank of the group, ``receive`` counts received
    from each; the backward sends the gradients back the same way."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, receive: list[int], send: list[int], group: Any) -> torch.Tensor:
        ctx.receive, ctx.send, ctx.group = receive, send, group
        return _exchange(x, receive, send, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        return _exchange(grad, ctx.send, ctx.receive, ctx.group), None, None, None


def _exchange(x: torch.Tensor, receive: list[int], send: list[int], group: Any) -> torch.Tensor:
    import torch.distributed as dist

    out = x.new_empty((sum(receive), *x.shape[1:]))
    start = time.perf_counter_ns()
    dist.all_to_all_single(out, x.contiguous(), receive, send, group=group)
    EXCHANGES.append((start, time.perf_counter_ns()))
    return out


def expert_seed(layer_seed: int, expert: int) -> int:
    """The seed of one expert's weights: a pure function of its layer's seed and its index."""
    return hash((layer_seed, expert, 0xE7)) & 0x7FFF_FFFF


class Expert(nn.Module):
    """A GELU MLP without biases."""

    def __init__(self, hidden: int, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, width, bias=False)
        self.fc2 = nn.Linear(width, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class MoEMLP(nn.Module):
    """The router, this rank's experts (named by their index in the layer, as one process names
    them) and the shared experts; see the module docstring."""

    def __init__(self, spec: ModelSpec, seed: int, groups: ExpertGroups | None = None) -> None:
        super().__init__()
        moe = spec.moe
        assert moe is not None
        h, ep = spec.hidden, groups.size if groups else 1
        if moe.experts % ep:
            raise ValueError(f"expert_parallel {ep} must divide the experts ({moe.experts})")
        self.top_k, self.experts_total, self.groups = moe.top_k, moe.experts, groups
        self.local = moe.experts // ep
        self.first = (groups.rank if groups else 0) * self.local
        self.router = nn.Linear(h, moe.experts, bias=False)
        init_weights(self.router, seed)
        self.experts = nn.ModuleDict()
        for e in range(self.first, self.first + self.local):
            self.experts[str(e)] = Expert(h, moe.ffn_hidden)
            init_weights(self.experts[str(e)], expert_seed(seed, e))
        self.shared = Expert(h, moe.shared_experts * moe.shared_ffn) if moe.shared_experts else None
        if self.shared is not None:
            init_weights(self.shared, expert_seed(seed, -1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        probs = torch.softmax(self.router(tokens).float(), dim=-1)
        top, chosen = probs.topk(self.top_k, dim=-1)
        weights = (top / top.sum(dim=-1, keepdim=True)).to(x.dtype)
        flat = chosen.reshape(-1)
        order = torch.argsort(flat, stable=True)  # the token copies grouped by expert
        owner = order // self.top_k  # each copy's token
        counts = torch.bincount(flat, minlength=self.experts_total)
        sent = tokens[owner]
        received, per_expert, splits = self._dispatch(sent, counts)
        # a clone, overwritten row by row: on a rank whose experts got no token the combine still
        # joins the graph, so that its backward all-to-all runs on every rank of the group
        done = received.clone()
        for j, rows in enumerate(per_expert):
            if len(rows):
                done[rows] = self.experts[str(self.first + j)](received[rows])
        back = done if self.groups is None else _AllToAll.apply(done, splits[1], splits[0], self.groups.group)
        out = torch.zeros_like(tokens).index_add(0, owner, back * weights.reshape(-1)[order, None])
        if self.shared is not None:
            out = out + self.shared(tokens)
        return out.reshape(shape)

    def _dispatch(self, sent: torch.Tensor, counts: torch.Tensor
                  ) -> tuple[torch.Tensor, list[torch.Tensor], tuple[list[int], list[int]]]:
        """The copies this rank's experts take (from every rank of the group, by source rank, then
        by expert), per local expert the rows of them it takes, and the all-to-all's (received,
        sent) counts per rank, which the combine reverses."""
        g = self.groups
        if g is None:
            starts = torch.cumsum(counts, 0) - counts
            rows = [torch.arange(int(s), int(s + c)) for s, c in zip(starts, counts, strict=True)]
            return sent, rows, ([len(sent)], [len(sent)])
        import torch.distributed as dist

        send = counts.reshape(g.size, self.local)  # row r: what goes to rank r, per its expert
        receive = torch.empty_like(send)  # row r: what comes from rank r, per local expert
        dist.all_to_all_single(receive, send, group=g.group)
        splits = (receive.sum(1).tolist(), send.sum(1).tolist())
        RECEIVED.append(sum(splits[0]))
        ROUTED.append(counts.tolist())
        received = _AllToAll.apply(sent, *splits, g.group)
        starts = (torch.cumsum(receive.reshape(-1), 0) - receive.reshape(-1)).reshape(receive.shape)
        rows = [torch.cat([torch.arange(int(starts[r, j]), int(starts[r, j] + receive[r, j])) for r in range(g.size)])
                for j in range(self.local)]
        return received, rows, splits


def is_expert(name: str) -> bool:
    """Whether the parameter ``name`` (as a module names it) is a routed expert's: held by one
    expert-parallel rank of a group, reduced over the expert replicas only."""
    return ".experts." in f".{name}"
