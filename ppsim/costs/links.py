"""The links a plan's transfers run over: one per stage boundary, the data-parallel gradient
all-reduce's, the tensor-parallel collectives' and the tied embedding's (first to last stage), from
the scenario's ``hardware`` section (or the device's defaults) or from the routes of its ``cluster``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ppsim.costs.table import Fabric, FabricCollective, Link, Route
from ppsim.inputs import cluster as cl
from ppsim.inputs.hardware import Device
from ppsim.inputs.scenario import ClusterSpec, LinkSpec, Scenario


@dataclass(frozen=True)
class Links:
    boundaries: tuple[Link, ...]  #: between virtual stages s and s + 1; one link for all when it has one
    data_parallel: Link
    tensor_parallel: Link
    context_parallel: Link  #: a ring over a context-parallel group (its K/V exchange)
    #: an all-to-all over an expert-parallel group (a MoE layer's dispatch and combine)
    expert_parallel: Link = Link(latency_ms=0.0)
    #: a ring over an expert-tensor-parallel group (the all-gather of a MoE layer's dispatched tokens)
    expert_tensor: Link = Link(latency_ms=0.0)
    #: between the ranks of the first and the last virtual stage (the tied embedding's gradient
    #: all-reduce); None when they are one rank or, on a cluster, when the model ties no embedding
    embedding: Link | None = None
    #: between the ranks that hold the copies of each stage (DualPipe's two pipes), over which the
    #: copies' gradients are summed; None with one copy
    copies: Link | None = None
    #: with a cluster under the network model: its links, the routes of each boundary's messages and
    #: each virtual stage's data-parallel rings (per byte of ring traffic), for the costs' Fabric
    fabric: FabricRoutes | None = None


@dataclass(frozen=True)
class FabricRoutes:
    capacity: dict[cl.Hop, float]  #: bytes per ms per directed link
    forward: tuple[Route, ...]
    backward: tuple[Route, ...]
    reduce: tuple[Route, ...]  #: per virtual stage
    pipeline: Route  #: the ring over the pipeline's ranks (the gradient norm's all-reduce)

    def fabric(self, reductions: tuple[tuple[float, int, int] | None, ...],
               clip: tuple[float, int] | None = None) -> Fabric:
        """The costs' fabric, each virtual stage's reduction (bytes per bucket each device sends,
        latency steps per bucket, buckets) on its route (None: no reduction), and the gradient
        norm's all-reduce (bytes each device sends, latency steps) on the pipeline's ring."""
        return Fabric(self.capacity, self.forward, self.backward, tuple(
            None if x is None else FabricCollective(self.reduce[k], *x) for k, x in enumerate(reductions)),
            None if clip is None else FabricCollective(self.pipeline, *clip, buckets=1))


@lru_cache(maxsize=64)
def _fabric_routes(cluster: cl.Cluster, stage_to_rank: tuple[int, ...], p: int, d: int, t: int,
                   placement: cl.Placement) -> FabricRoutes:
    """The routes of a plan's transfers on the cluster, once per plan shape (a search prices many
    plans of one shape; the routes are read, never changed)."""
    forward, backward, reduce, pipeline = cl.plan_routes(cluster, stage_to_rank, p, d, t, placement)
    return FabricRoutes(cl.capacities(cluster), tuple(map(_route, forward)), tuple(map(_route, backward)),
                        tuple(map(_route, reduce)), _route(pipeline))


def _route(load: cl.RouteLoad) -> Route:
    hops, latency_us = load
    return Route(dict(hops), latency_us / 1e3)


def scenario_links(s: Scenario, device: Device, stage_to_rank: tuple[int, ...], pipes: int = 1) -> Links:
    """The scenario's links: routed over its cluster when it has one, else as ``hardware`` gives them
    (``pipes``: the copies of the model the virtual stages form)."""
    intra_gb_s = device.collective_rate()
    hw = s.hardware
    dispatch = _dispatch(s, device, None if exchange_link_given(s) else intra_gb_s)
    if s.cluster is not None:
        return _cluster_links(s.cluster, s, device, stage_to_rank, pipes, intra_gb_s, dispatch)
    boundary = _link(hw.link, device.inter_node_gb_s, device.inter_node_latency_us)
    intra = _link(hw.tp_link, intra_gb_s, device.intra_node_latency_us)
    exchange = intra
    if dispatch is not None:  # one message per device a token has experts on, at the kernels' share of the link
        share = (dispatch.rate.nvlink if dispatch.rate else 1.0) / dispatch.device_copies(s.expert_parallel)
        exchange = Link(intra.latency_ms, intra.bandwidth_bytes_per_ms * share)
    return Links(
        boundaries=(boundary,),
        data_parallel=_link(hw.dp_link, intra_gb_s, device.intra_node_latency_us),
        tensor_parallel=intra,
        context_parallel=intra,
        expert_parallel=exchange,
        expert_tensor=intra,
        embedding=boundary if stage_to_rank[0] != stage_to_rank[-1] else None,
        copies=boundary if pipes > 1 else None,
    )


def exchange_link_given(s: Scenario) -> bool:
    """The link a node's expert-parallel exchanges run over is the scenario's own (its cluster's
    ``intra_node``, or off a cluster ``hardware.tp_link``), not the device's."""
    return s.cluster.intra_node is not None if s.cluster is not None else s.hardware.tp_link is not None


def twin_ranks(stage_to_rank: tuple[int, ...], pipes: int) -> list[tuple[int, int]]:
    """The pairs of ranks holding a stage of the first copy of the model and the same stage of
    another copy, lower rank first (DualPipe: rank r and rank p - 1 - r); none with one copy."""
    n = len(stage_to_rank) // pipes
    pairs = {(stage_to_rank[j], stage_to_rank[k * n + j]) for j in range(n) for k in range(1, pipes)}
    return sorted({(min(a, b), max(a, b)) for a, b in pairs if a != b})


def as_link(speed: cl.LinkSpeed) -> Link:
    return Link.from_gb_s(speed.bandwidth_gb_s, speed.latency_us)


def _link(spec: LinkSpec | None, default_gb_s: float, default_latency_us: float) -> Link:
    """The scenario's link if it gives one, else the device's default."""
    if spec is None:
        return Link.from_gb_s(default_gb_s, default_latency_us)
    return Link.from_gb_s(spec.bandwidth_gb_s, spec.latency_us)


def _dispatch(s: Scenario, device: Device, nvlink_gb_s: float | None) -> cl.NodeDispatch | None:
    """The scenario's MoE dispatcher when it is DeepEP's or HybridEP's (None: NCCL's all-to-all, or no
    experts), with the share of each link's rate its kernels reach on ``device`` where measured, of
    a node's link priced at ``nvlink_gb_s`` (None: one the scenario gives, :meth:`Device.dispatch_on`)."""
    moe, which = s.model.moe if s.model is not None else None, s.training.moe_dispatcher
    if moe is None or which == "alltoall":
        return None
    return cl.NodeDispatch(moe.top_k, moe.node_limit, moe.experts, device.dispatch_on(which, nvlink_gb_s))


def _cluster_links(spec: ClusterSpec, s: Scenario, device: Device, stage_to_rank: tuple[int, ...],
                   pipes: int, intra_gb_s: float, dispatch: cl.NodeDispatch | None) -> Links:
    """The links of a plan on the scenario's cluster (``intra_gb_s``: the device's NVLink rate where
    the cluster gives none; ``dispatch``: DeepEP's or HybridEP's)."""
    intra, inter = spec.intra_node, spec.inter_node
    cluster = cl.Cluster(
        nodes=spec.nodes,
        devices_per_node=spec.devices_per_node,
        intra=cl.LinkSpeed(intra.bandwidth_gb_s, intra.latency_us) if intra
        else cl.LinkSpeed(intra_gb_s, device.intra_node_latency_us),
        inter=cl.LinkSpeed(inter.bandwidth_gb_s, inter.latency_us) if inter
        else cl.LinkSpeed(device.inter_node_gb_s, device.inter_node_latency_us),
        nics_per_node=spec.nics_per_node or spec.devices_per_node,
        nvlink_domain=spec.nvlink_domain,
    )
    # context-parallel ranks sit between the tensor ranks and the replicas (Megatron's order): to the
    # cluster they are d x cp replicas of each stage, each sending its own messages
    tied = s.model is not None and s.model.tie_embeddings
    return _routed_links(cluster, spec.placement, spec.network, s.pipeline.stages, s.weight_replicas,
                         s.tensor_parallel, s.context_parallel, s.expert_parallel, s.expert_tensor, tied,
                         stage_to_rank, pipes, dispatch)


@lru_cache(maxsize=256)
def _routed_links(cluster: cl.Cluster, placement: cl.Placement, network: str, p: int, d: int, t: int, cp: int,
                  ep: int, etp: int, tied: bool, stage_to_rank: tuple[int, ...], pipes: int,
                  dispatch: cl.NodeDispatch | None = None) -> Links:
    """The links of a plan's groups routed over ``cluster``: what a search's plans of one layout share
    (worked out once for them, not once each)."""
    cl.check_fits(cluster, p, d, t, cp)
    boundaries, dp, tp = cl.plan_links(cluster, stage_to_rank, p, d, t, placement)
    first, last = stage_to_rank[0], stage_to_rank[-1]
    embedding = None
    if first != last and tied:  # every replica's and tensor rank's pair at once
        flows = [(cl.device_of(first, r, k, p, d, t, placement), cl.device_of(last, r, k, p, d, t, placement))
                 for r in range(d) for k in range(t)]
        embedding = as_link(cl.route_link(cluster, flows))
    copies = None
    if pipes > 1:  # every pair's devices at once (the copies sum at the same moment): the slowest
        copies = as_link(cl.pairs_link(cluster, tuple(twin_ranks(stage_to_rank, pipes)), p, d, t, placement))
    fabric = None
    if network == "flows":
        fabric = _fabric_routes(cluster, stage_to_rank, p, d, t, placement)
    context = as_link(cl.context_parallel_link(cluster, p, d, t, cp, placement))
    experts = as_link(cl.expert_parallel_link(cluster, p, d, t, ep, etp, placement, dispatch))
    expert_tensor = as_link(cl.expert_tensor_link(cluster, p, d, t, etp, placement))
    return Links(tuple(as_link(b) for b in boundaries), as_link(dp), as_link(tp), context, experts, expert_tensor,
                 embedding, copies, fabric)
