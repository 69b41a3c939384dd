"""Costs the simulator consumes: per virtual stage compute times and memory, and the link model.

The simulator only sees a :class:`CostTable`; how it was made (analytic GPT FLOPs, explicit
per-stage milliseconds, or a measured profile) is the business of :mod:`ppsim.costs.workload`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from ppsim.costs.memory import StaticMemory

if TYPE_CHECKING:
    from ppsim.inputs.scenario import PipelineSpec


@dataclass(frozen=True)
class MoEPhases:
    """One MoE block's parts per micro-batch, as an overlapped forward and backward interleave them
    (Megatron-Core's combined 1F1B, DeepSeek's DualPipe): the compute before the dispatch (the
    attention, the norms and the router: ``attention``) and the experts' (``mlp``), each pass's, and
    the dispatch and combine all-to-alls of each pass (the backward's: their gradients)."""

    attention_forward: float
    mlp_forward: float
    attention_input_grad: float
    attention_weight_grad: float
    mlp_input_grad: float
    mlp_weight_grad: float
    dispatch_forward: float
    combine_forward: float
    dispatch_backward: float
    combine_backward: float

    @property
    def forward_ms(self) -> float:
        return self.attention_forward + self.mlp_forward + self.dispatch_forward + self.combine_forward

    def backward_ms(self, weight_grads: bool = True) -> float:
        """The backward's parts, its weight grads with ``weight_grads``."""
        grads = self.attention_weight_grad + self.mlp_weight_grad if weight_grads else 0.0
        return self.attention_input_grad + self.mlp_input_grad + self.dispatch_backward + self.combine_backward + grads


@dataclass(frozen=True)
class StageCost:
    """What one virtual stage costs per micro-batch (compute) or per step (optimizer, all-reduce)."""

    forward_ms: float
    backward_ms: float  #: the whole backward: input grad + weight grad
    weight_grad_ms: float = 0.0  #: the part of backward_ms that is weight grad
    optimizer_ms: float = 0.0
    clip_ms: float = 0.0  #: gradient clipping's own work (the local gradient norm), before its all-reduce
    allreduce_ms: float = 0.0  #: gradient all-reduce across data-parallel replicas, once per step
    allreduce_buckets: int = 1  #: the all-reduce runs in this many equal buckets
    grad_bytes: int = 0  #: bytes all-reduced per step
    activation_bytes: int = 0  #: activations held per micro-batch between forward and backward
    #: what a split backward keeps from its input grad to its weight grad beyond the activations
    #: (:func:`ppsim.costs.layout.split_backward_bytes`)
    weight_grad_pending_bytes: int = 0
    params: int = 0
    layers: int = 0  #: transformer blocks in this stage (0 when costs are explicit)
    moe_layers: int = 0  #: the blocks of them with experts (each dispatches and combines its tokens)
    memory: StaticMemory | None = None  #: what the stage holds all step: model states and buffers
    #: the communication inside a forward / a backward (tensor- and context-parallel collectives, the
    #: experts' all-to-alls, FSDP's gathers): time in the pass that is not compute
    forward_comm_ms: float = 0.0
    backward_comm_ms: float = 0.0
    #: the part of it the compute of another micro-batch's pass hides when the two run as one
    #: overlapped action (DualPipe, Megatron's combined 1F1B): a MoE layer's dispatch and combine
    forward_overlap_ms: float = 0.0
    backward_overlap_ms: float = 0.0
    #: the part of the backward's all-to-alls its own delayed weight grads hide (Megatron's
    #: --delay-wgrad-compute), already taken off backward_ms, backward_comm_ms and backward_overlap_ms
    self_hidden_ms: float = 0.0
    #: of forward_ms and backward_ms, what the GPU waits for the host to launch the kernels (ppsim.costs.launches)
    launch_wait_ms: float = 0.0
    #: an average MoE block's parts, which an overlapped forward and backward pair phase by phase
    #: (ppsim.sim.durations); None: the passes' totals are paired
    moe_phases: MoEPhases | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.weight_grad_ms <= self.backward_ms * (1 + 1e-12):
            raise ValueError(f"a stage's weight grad ({self.weight_grad_ms} ms) must lie between 0 and its whole "
                             f"backward ({self.backward_ms} ms)")

    @property
    def input_grad_ms(self) -> float:
        return self.backward_ms - self.weight_grad_ms


@dataclass(frozen=True)
class Link:
    """Latency + bytes / bandwidth between consecutive stages. Transfers on one directed link queue
    behind each other (bandwidth is shared in FIFO order); latency is pipelined. Around a transfer
    the sender spends ``send_overhead_ms`` before the data moves and the receiver
    ``recv_overhead_ms`` after it has arrived (packing, copying out of the receive buffer)."""

    latency_ms: float
    bandwidth_bytes_per_ms: float = math.inf
    send_overhead_ms: float = 0.0
    recv_overhead_ms: float = 0.0

    def serialization_ms(self, nbytes: float) -> float:
        if math.isinf(self.bandwidth_bytes_per_ms):
            return 0.0
        return nbytes / self.bandwidth_bytes_per_ms

    def transfer_ms(self, nbytes: float) -> float:
        return self.latency_ms + self.serialization_ms(nbytes)

    @classmethod
    def from_gb_s(cls, bandwidth_gb_s: float, latency_us: float) -> Link:
        """From bandwidth in GB/s (1e9 bytes per second) and latency in microseconds."""
        per_ms = math.inf if bandwidth_gb_s <= 0 or math.isinf(bandwidth_gb_s) else bandwidth_gb_s * 1e9 / 1e3
        return cls(latency_ms=latency_us / 1e3, bandwidth_bytes_per_ms=per_ms)


@dataclass(frozen=True)
class Route:
    """What one simulated flow puts on the fabric: its load on each directed link it crosses (the
    copies of it that cross there at once, every replica's and tensor rank's, or a collective's
    share of its traffic) and the latency from its last byte leaving to its arrival."""

    load: Mapping[Hashable, float]
    latency_ms: float


@dataclass(frozen=True)
class FabricCollective:
    """A virtual stage's data-parallel gradient reduction as flows: each bucket moves
    ``volume_bytes`` from every device over ``route`` (the load per byte of its rings' traffic),
    then pays ``steps`` x the route's latency."""

    route: Route
    volume_bytes: float
    steps: int
    buckets: int


@dataclass(frozen=True)
class Fabric:
    """The cluster's directed links and the routes of a plan's transfers over them, for the
    simulator's network model (links shared max-min fairly among the flows active at each instant).
    Without a fabric, each stage boundary's :class:`Link` is the transfer's own."""

    #: bytes per ms per directed link, keyed by any hashable link (a cluster's Hop; Mapping[Hashable, float]
    #: would refuse a dict[Hop, float]: a Mapping's key type is invariant)
    capacity: Mapping[Any, float]
    forward: tuple[Route, ...]  #: per stage boundary s, the message s -> s + 1
    backward: tuple[Route, ...]  #: s + 1 -> s
    reduce: tuple[FabricCollective | None, ...] = ()  #: per virtual stage (None: no reduction)
    #: gradient clipping's all-reduce of the gradient norm over the pipeline's ranks (None: the
    #: CostTable's ``clip_allreduce_ms``, a fixed time)
    clip: FabricCollective | None = None


@dataclass(frozen=True)
class CostTable:
    """Per virtual stage costs plus the stage-to-stage message size and links.

    ``links[s]`` carries the messages between virtual stages s and s + 1 (both directions); a
    single link may be given for all boundaries.
    """

    stages: tuple[StageCost, ...]
    message_bytes: int
    links: tuple[Link, ...]
    #: gradient clipping (CLIP) all-reduces the gradient norm over every stage of the pipeline, so
    #: each rank waits for the last one to get there; this is what the all-reduce itself costs
    clip_allreduce_ms: float = 0.0
    #: start a stage's gradient all-reduce bucket by bucket while its last backward produces them
    #: (Megatron's --overlap-grad-reduce, DeepSpeed's overlap_comm), instead of after it
    overlap_grad_reduce: bool = False
    #: the cluster's links and routes: transfers and gradient reductions run as flows sharing them
    fabric: Fabric | None = None
    #: a split backward's input grad frees the forward's activations (a weight-gradient store keeps
    #: only what the weight grads read, each stage's ``weight_grad_pending_bytes``); else they stay to W
    input_grad_frees: bool = False
    #: an overlapped forward and backward interleave layer by layer: the memory moves from the one
    #: pass's to the other's through the action (else the forward's is taken at its start, the
    #: backward's freed at its end)
    overlap_layerwise: bool = False
    #: the share of the compute's SMs the all-to-alls' kernels take while they run beside it (an
    #: overlapped action's hidden dispatch and combine, a backward's under its delayed weight grads)
    overlap_sm_share: float = 0.0

    def link(self, boundary: int) -> Link:
        return self.links[boundary] if len(self.links) > 1 else self.links[0]

    def p2p_ms(self, boundary: int = 0) -> float:
        """Time of one unloaded stage-to-stage transfer across ``boundary``, overheads included."""
        link = self.link(boundary)
        return link.send_overhead_ms + link.transfer_ms(self.message_bytes) + link.recv_overhead_ms


class MemoryRules(TypedDict):
    """How the runtime a scenario names holds a split backward's and an overlapped action's memory."""

    input_grad_frees: bool
    overlap_layerwise: bool


def memory_rules(pipeline: PipelineSpec) -> MemoryRules:
    """The CostTable's memory rules of ``pipeline`` (its ``split_backward`` and schedule)."""
    return MemoryRules(input_grad_frees=pipeline.input_grad_frees, overlap_layerwise=pipeline.overlap_layerwise)
