"""The cluster as a graph: where every rank runs, and what a transfer between two runs over.

Graph (:meth:`Cluster.graph` gives it as a networkx graph, to draw or search; the cost model
reads the same edges from :func:`edges`, a plain table, so that predicting does not import
networkx): each NVLink domain has a switch (NVSwitch / NVLink fabric) that its devices reach over
their NVLink ("intra-node") link, and each node has NICs that reach the cluster's network switch
over the inter-node link; device j of a node uses NIC ``j * nics // devices_per_node``. An NVLink
domain is a node (an HGX board of 8) unless the cluster says it spans several (``nvlink_domain``
devices: a GB200 NVL72 rack is 18 trays of 4 GPUs in one domain of 72). A transfer takes the shortest route
between its two devices. Placement maps (stage, replica, tensor rank) to a device index, node by
node: ``megatron`` (Megatron-LM's and DeepSpeed's order: tensor rank fastest, then data-parallel
replica, then pipeline stage) or ``pipeline-inner`` (tensor, then stage, then replica: a replica's
pipeline packed into as few nodes as possible).

Replicas behave alike and are simulated once, so the same transfer of every replica happens at
the same time: flows that cross a link in the same direction (several devices behind one NIC)
divide its bandwidth in that direction, and a route's bandwidth is its most shared link's share.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Literal

from ppsim.errors import PpsimError, ScenarioError

if TYPE_CHECKING:  # pragma: no cover - networkx is imported when a cluster is first drawn as a graph
    import networkx as nx

    from ppsim.inputs.hardware import DispatchRate

Placement = Literal["megatron", "pipeline-inner"]
SPINE = "network"
Hop = tuple[str, str]  #: a directed link: (from, to) nodes of the cluster graph


@dataclass(frozen=True)
class LinkSpeed:
    """A link's bandwidth (GB/s, per direction: per device port inside a node, per NIC between
    nodes) and latency; also what a route between two devices offers a flow."""

    bandwidth_gb_s: float
    latency_us: float


FREE = LinkSpeed(float("inf"), 0.0)  #: a route within one device: no transfer at all


@dataclass(frozen=True)
class Cluster:
    nodes: int
    devices_per_node: int
    intra: LinkSpeed  #: a device's NVLink port to its domain's switch
    inter: LinkSpeed  #: a NIC to the network
    nics_per_node: int
    nvlink_domain: int | None = None  #: devices per NVLink domain (whole nodes); None: one node

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def domain_size(self) -> int:
        """Devices one NVLink switch connects: a node, or several nodes' worth."""
        return self.nvlink_domain or self.devices_per_node

    def fabric_name(self, device: int) -> str:
        """The NVLink switch of ``device``'s domain (named after the node where a domain is one)."""
        if self.nvlink_domain is None or self.nvlink_domain == self.devices_per_node:
            return f"node{device // self.devices_per_node}/fabric"
        return f"nvlink{device // self.nvlink_domain}/fabric"

    def graph(self) -> nx.Graph[str]:
        """Devices, node fabrics, NICs and the network as a networkx graph, with bandwidth (GB/s) and
        latency (us) per edge: the edges of :func:`edges`."""
        try:
            import networkx as nx  # an extra, only to draw or search the graph: predicting reads edges()
        except ImportError:
            raise PpsimError("Cluster.graph() needs networkx: pip install 'ppsim[reference]'") from None

        g: nx.Graph[str] = nx.Graph()  # nodes: the cluster's names (devices, NICs, the spine)
        g.add_node(SPINE)
        for (u, v), link in edges(self).items():
            g.add_edge(u, v, bandwidth=link.bandwidth_gb_s, latency=link.latency_us)
        return g

    def device_name(self, device: int) -> str:
        n, j = divmod(device, self.devices_per_node)
        return f"node{n}/gpu{j}"


@cache
def edges(cluster: Cluster) -> dict[tuple[str, str], LinkSpeed]:
    """Every (undirected) edge of the cluster's graph with its link, built once per cluster: each
    device to its node's fabric (half the intra-node latency each way) and to its NIC (PCIe, never
    the bottleneck), each NIC to the network."""
    out: dict[tuple[str, str], LinkSpeed] = {}
    to_fabric = LinkSpeed(cluster.intra.bandwidth_gb_s, cluster.intra.latency_us / 2)
    for n in range(cluster.nodes):
        for k in range(cluster.nics_per_node):
            out[(f"node{n}/nic{k}", SPINE)] = cluster.inter
        for j in range(cluster.devices_per_node):
            index = n * cluster.devices_per_node + j
            dev = cluster.device_name(index)
            out[(dev, cluster.fabric_name(index))] = to_fabric
            out[(dev, f"node{n}/nic{j * cluster.nics_per_node // cluster.devices_per_node}")] = FREE
    return out


@cache
def _directed(cluster: Cluster) -> dict[Hop, LinkSpeed]:
    """Every edge in both directions (each direction of a full-duplex link has the whole bandwidth)."""
    out = {}
    for (u, v), link in edges(cluster).items():
        out[(u, v)] = out[(v, u)] = link
    return out


def device_of(stage: int, replica: int, tp_rank: int, p: int, d: int, t: int, placement: Placement) -> int:
    """Global device index of a rank."""
    if placement == "pipeline-inner":
        return (replica * p + stage) * t + tp_rank
    return (stage * d + replica) * t + tp_rank


def check_fits(cluster: Cluster, p: int, d: int, t: int, cp: int = 1) -> None:
    """A ScenarioError when the plan needs more devices than the cluster has, or tensor parallelism
    spans more than an NVLink domain (``d``: the replicas of a stage, context-parallel ranks included)."""
    need = p * d * t
    if need > cluster.devices:
        sizes = (f"tensor x context x stages x data-parallel = {t} x {cp} x {p} x {d // cp}" if cp > 1
                 else f"tensor x stages x data-parallel = {t} x {p} x {d}")
        raise ScenarioError(
            f"the plan needs {sizes} = {need} devices and the cluster has "
            f"{cluster.nodes} x {cluster.devices_per_node} = {cluster.devices}; add nodes or shrink the plan",
            field="cluster.nodes",
        )
    if t > cluster.domain_size:
        where = "a node has" if cluster.nvlink_domain is None else "an NVLink domain holds (cluster.nvlink_domain)"
        raise ScenarioError(
            f"tensor_parallel ({t}) spans more devices than {where} ({cluster.domain_size}); tensor "
            "parallelism stays inside an NVLink domain", field="tensor_parallel")


class _Router:
    """The names of a cluster's devices, fabrics and NICs, made once: routing a large cluster's
    thousands of flows then builds no string."""

    def __init__(self, cluster: Cluster) -> None:
        per, nics = cluster.devices_per_node, cluster.nics_per_node
        self.per_domain = cluster.domain_size
        self.device = [cluster.device_name(d) for d in range(cluster.devices)]
        self.fabric = [cluster.fabric_name(d) for d in range(0, cluster.devices, self.per_domain)]
        self.nic = [f"node{d // per}/nic{(d % per) * nics // per}" for d in range(cluster.devices)]
        # a route's latency: the sum along its hops, the same for every route inside an NVLink domain
        # and for every route between two domains (summed here as flow_load would, hop by hop)
        links = _directed(cluster)
        self.intra_us = sum(links[hop].latency_us for hop in self.hops(0, 1)) if self.per_domain > 1 else 0.0
        self.inter_us = (sum(links[hop].latency_us for hop in self.hops(0, self.per_domain))
                         if cluster.devices > self.per_domain else 0.0)

    def path(self, a: int, b: int) -> list[str]:
        """The nodes of the cluster graph from a to b, both ends included."""
        return [self.device[a]] + [to for _, to in self.hops(a, b)]

    def latency_us(self, a: int, b: int) -> float:
        """The latency of the route from a to b (the sum of its hops')."""
        if a == b:
            return 0
        return self.intra_us if a // self.per_domain == b // self.per_domain else self.inter_us

    def hops(self, a: int, b: int) -> tuple[Hop, ...]:
        """The directed links of the path from a to b, in order."""
        if a == b:
            return ()
        na, nb = a // self.per_domain, b // self.per_domain
        da, db = self.device[a], self.device[b]
        if na == nb:
            f = self.fabric[na]
            return ((da, f), (f, db))
        ka, kb = self.nic[a], self.nic[b]
        return ((da, ka), (ka, SPINE), (SPINE, kb), (kb, db))


@cache
def _router(cluster: Cluster) -> _Router:
    return _Router(cluster)


def route(cluster: Cluster, a: int, b: int) -> list[str]:
    """The path from device a to device b: through the NVLink switch inside a domain, else out of
    a's NIC, over the network and into b's NIC (the graph's shortest path, without a search)."""
    return _router(cluster).path(a, b)


def route_links(cluster: Cluster, flows: list[tuple[int, int]]) -> list[LinkSpeed]:
    """The effective link of each flow (device pairs that transfer at the same time): latencies add
    up along its route; its bandwidth is the smallest share of a link on the route, a link's
    bandwidth in each direction being divided among the flows that cross it in that direction
    (links are full duplex: in a ring, a device's outgoing and incoming flows do not share)."""
    routes, load = _routes_and_load(cluster, flows)
    return [_shared_link(cluster, a, b, edges, load) for (a, b), edges in zip(flows, routes, strict=True)]


def route_link(cluster: Cluster, flows: list[tuple[int, int]]) -> LinkSpeed:
    """The effective link of the first of ``flows`` (device pairs that transfer at the same time):
    :func:`route_links`' first, without working out the others'."""
    routes, load = _routes_and_load(cluster, flows)
    return _shared_link(cluster, *flows[0], routes[0], load)


def _routes_and_load(cluster: Cluster, flows: list[tuple[int, int]]) -> tuple[list[tuple[Hop, ...]], Counter[Hop]]:
    """Each flow's directed hops, and how many flows cross each hop."""
    hops = _router(cluster).hops
    routes = [hops(a, b) for a, b in flows]
    return routes, Counter(edge for edges in routes for edge in set(edges))


def _shared_link(cluster: Cluster, a: int, b: int, edges: tuple[Hop, ...], load: Counter[Hop]) -> LinkSpeed:
    """The route a -> b's link: its latency, and the smallest share of a link on it (each loaded
    ``load`` times over)."""
    if not edges:
        return FREE
    links = _directed(cluster)
    return LinkSpeed(min(links[e].bandwidth_gb_s / load[e] for e in edges), _router(cluster).latency_us(a, b))


def stage_links(cluster: Cluster, stage_to_rank: tuple[int, ...], p: int, d: int, t: int, placement: Placement
                ) -> list[LinkSpeed]:
    """One link per boundary between virtual stages s and s + 1 (from rank ``stage_to_rank[s]`` to
    rank ``stage_to_rank[s + 1]``), with every replica and tensor rank sending across it at once;
    a boundary inside one rank (the turn of a V) is free."""
    by_ranks: dict[tuple[int, int], LinkSpeed] = {}  # chunks repeat the same rank pairs
    out = []
    for boundary in range(max(1, len(stage_to_rank) - 1)):
        a = stage_to_rank[boundary]
        b = stage_to_rank[boundary + 1] if boundary + 1 < len(stage_to_rank) else a
        if (a, b) not in by_ranks:
            flows = [(device_of(a, r, k, p, d, t, placement), device_of(b, r, k, p, d, t, placement))
                     for r in range(d) for k in range(t)]
            by_ranks[(a, b)] = route_link(cluster, flows)
        out.append(by_ranks[(a, b)])
    return out


def ring_flows(cluster: Cluster, group: list[int]) -> list[tuple[int, int, float]]:
    """The flows of a ring collective over ``group`` as NCCL lays it out: (sender, receiver, the
    share of a device's ring traffic the flow carries).

    Inside one NVLink domain, one ring through the devices. Across domains holding k members each,
    k rings (NCCL's channels), each carrying 1/k of the data: ring c enters a domain at its c-th
    member, passes through the others over NVLink and leaves from the member before it, so the k
    rings leave every domain through k different devices (and their NICs). A group spread
    unevenly over domains gets one ring."""
    members = sorted(group)
    by_node: dict[int, list[int]] = {}
    for dev in members:
        by_node.setdefault(dev // cluster.domain_size, []).append(dev)
    nodes = list(by_node.values())
    k = len(nodes[0])
    if len(nodes) == 1 or any(len(node) != k for node in nodes):
        return [(members[i], members[(i + 1) % len(members)], 1.0) for i in range(len(members))]
    flows = []
    for c in range(k):
        order = [dev for node in nodes for dev in node[c:] + node[:c]]
        flows += [(order[i], order[(i + 1) % len(order)], 1 / k) for i in range(len(order))]
    return flows


def group_link(cluster: Cluster, devices_by_group: list[list[int]]) -> LinkSpeed:
    """What a ring collective over each group's devices runs at, all groups at once: the ring
    traffic each device sends (a ring all-reduce's 2(n-1)/n x bytes) moves at this bandwidth.

    Every flow of every group's rings (:func:`ring_flows`) loads the directed links of its route
    by its share; a link of bandwidth B loaded L times over gives the rings B / L, and the most
    loaded link sets the pace. Latency: the slowest flow's route."""
    flows = [f for grp in devices_by_group if len(grp) > 1 for f in ring_flows(cluster, grp)]
    if not flows:
        return FREE
    links = _directed(cluster)
    load, latency_us = flow_load(cluster, flows)
    bandwidth = min(links[hop].bandwidth_gb_s / n for hop, n in load.items())
    return LinkSpeed(bandwidth, latency_us)


def flow_load(cluster: Cluster, flows: list[tuple[int, int, float]]) -> tuple[Counter[Hop], float]:
    """(load on each directed link: the sum of the shares of the flows crossing it, the slowest
    route's latency in us) of ``flows`` (sender, receiver, share) running at once."""
    router = _router(cluster)
    route_hops, route_us = router.hops, router.latency_us
    load: dict[Hop, float] = {}
    latency_us = 0.0
    for a, b, share in flows:
        for hop in route_hops(a, b):
            load[hop] = load.get(hop, 0) + share
        latency_us = max(latency_us, route_us(a, b))
    return Counter(load), latency_us


@dataclass(frozen=True)
class NodeDispatch:
    """A MoE dispatcher that sends a token across the network once per destination NVLink domain
    and forwards its copies inside that domain (DeepEP's, HybridEP's): each token's ``top_k``
    copies, on at most ``node_limit`` domains when routing is node-limited (DeepSeek-V3's 4).

    With ``experts`` known it also sends a token once per destination device, not once per expert
    there (the kernels' per-rank buffers; the experts' copies are made by the permute after it);
    ``rate``: the share of an NVLink's and of a NIC's rate its kernels reach (the device's measured
    dispatcher, :meth:`~ppsim.inputs.hardware.Device.dispatch_rate`; None: the links' own rates)."""

    top_k: int
    node_limit: int | None = None
    experts: int | None = None
    rate: DispatchRate | None = None

    def crossings(self, domains: int) -> float:
        """The network crossings a token makes on average, its group spanning ``domains`` equal
        domains, its copies uniform over them: one per distinct domain other than its own; with a
        node limit M, M domains (at most top_k), its own among them with probability M / D."""
        if domains <= 1:
            return 0.0
        if self.node_limit is not None and self.node_limit < domains:
            chosen = min(self.node_limit, self.top_k)
            return chosen * (domains - 1) / domains
        return (domains - 1) * (1 - (1 - 1 / domains) ** self.top_k)

    def device_copies(self, ranks: int) -> float:
        """A token's messages to the devices of a ``ranks``-wide group over its ``top_k`` copies: the
        distinct devices its experts sit on (E / ranks experts each, k of E drawn without
        replacement), ranks x (1 - C(E - E / ranks, k) / C(E, k)), over k; 1 without ``experts``."""
        if self.experts is None or ranks <= 1:
            return 1.0
        e, k = self.experts, self.top_k
        missed = math.comb(e - e // ranks, k) / math.comb(e, k)
        return ranks * (1 - missed) / k


def alltoall_load(cluster: Cluster, groups: list[list[int]], dispatch: NodeDispatch | None = None
                  ) -> tuple[Counter[Hop], float]:
    """:func:`flow_load` of an all-to-all over each group, all at once (every member sending each
    other member 1 / (n - 1) of its bytes), counted per NVLink domain instead of per pair: a member
    of a domain holding c of the group's n devices sends c - 1 flows over the domain's switch and
    n - c out of its NIC, and receives as many each way. With a per-domain ``dispatch`` the copies
    bound for another domain cross the network once per domain (:meth:`NodeDispatch.crossings`
    over the k (1 - c / n) copies a token has there) and are forwarded inside it over the domain's
    switch, all but those for the receiving device itself (1 / c); the bytes inside a domain go
    once per destination device (:meth:`NodeDispatch.device_copies`), and each link carries them
    as if at the share of its rate the dispatcher's kernels reach."""
    router = _router(cluster)
    per_domain = cluster.domain_size
    load: dict[Hop, float] = {}
    latency_us = 0.0
    names, fabrics, nics, get = router.device, router.fabric, router.nic, load.get
    for group in groups:
        n = len(group)
        if n < 2:
            continue
        share = 1 / (n - 1)
        in_domain = Counter(dev // per_domain for dev in group)
        # the group's own figures: a token's crossings, its messages per copy, the links' shares
        crossings = copies = nvlink = network = 1.0
        if dispatch is not None:
            crossings, copies = dispatch.crossings(len(in_domain)), dispatch.device_copies(n)
            if dispatch.rate is not None:  # a link driven at a share of its rate carries the bytes as more
                nvlink, network = 1 / dispatch.rate.nvlink, 1 / dispatch.rate.network_share(len(in_domain))
        # what a member sends and receives each way over its domain's switch and out of its NIC,
        # by the members its domain holds (the same for each of them)
        amounts: dict[int, tuple[float, float]] = {}
        for c in set(in_domain.values()):
            inside, outside = (c - 1) * share, (n - c) * share
            if dispatch is not None:
                if outside:
                    crossed = crossings / (dispatch.top_k * (1 - c / n))
                    inside += outside * (1 - 1 / c)  # forwarded in the receiving domain (the same load, by symmetry)
                    outside *= min(1.0, crossed)
                inside *= copies
            amounts[c] = inside * nvlink, outside * network
        for dev in group:
            domain = dev // per_domain
            inside, outside = amounts[in_domain[domain]]
            name = names[dev]
            if inside:
                fabric = fabrics[domain]
                for hop in ((name, fabric), (fabric, name)):
                    load[hop] = get(hop, 0) + inside
            if outside:
                nic = nics[dev]
                for hop in ((name, nic), (nic, SPINE), (SPINE, nic), (nic, name)):
                    load[hop] = get(hop, 0) + outside
        if len(in_domain) > 1:
            latency_us = max(latency_us, router.inter_us)
        if any(c > 1 for c in in_domain.values()):
            latency_us = max(latency_us, router.intra_us)
    return Counter(load), latency_us


@cache
def capacities(cluster: Cluster) -> dict[Hop, float]:
    """Every directed link of finite bandwidth, in bytes per ms (each direction its own)."""
    return {hop: link.bandwidth_gb_s * 1e6 for hop, link in _directed(cluster).items()
            if math.isfinite(link.bandwidth_gb_s)}


RouteLoad = tuple[tuple[tuple[Hop, float], ...], float]  #: ((link, load), ...), latency in us


@lru_cache(maxsize=64)
def plan_routes(cluster: Cluster, stage_to_rank: tuple[int, ...], p: int, d: int, t: int, placement: Placement
                ) -> tuple[tuple[RouteLoad, ...], tuple[RouteLoad, ...], tuple[RouteLoad, ...], RouteLoad]:
    """The routes of a plan's flows on the cluster (for the simulator's network model): per stage
    boundary the message forward and backward, with every replica's and tensor rank's copy counted
    on the links the simulated one (replica 0, tensor rank 0) crosses; per virtual stage its
    data-parallel rings' load on every link (per byte of a device's ring traffic); and the ring over
    the pipeline's ranks that all-reduces the gradient norm (gradient clipping), every replica's and
    tensor rank's at once, on the links the simulated one crosses (per byte of a device's traffic)."""
    def message(a: int, b: int) -> RouteLoad:
        if a == b:
            return (), 0.0
        flows = [(device_of(a, r, k, p, d, t, placement), device_of(b, r, k, p, d, t, placement), 1.0)
                 for r in range(d) for k in range(t)]
        # only flows from or to the simulated one's nodes can share its links
        nodes = {flows[0][0] // per_node, flows[0][1] // per_node}
        load, _ = flow_load(cluster, [f for f in flows if f[0] // per_node in nodes or f[1] // per_node in nodes])
        mine, latency_us = flow_load(cluster, flows[:1])
        return tuple((hop, load[hop]) for hop in mine), latency_us

    links = _directed(cluster)
    per_node = cluster.devices_per_node

    @cache
    def reduction(rank: int) -> RouteLoad:
        """The rings' load on the links of the simulated device's node (what the simulated messages
        can share with them; other nodes' are alike, as replicas are), its most loaded link setting
        their pace."""
        groups = [[device_of(rank, r, k, p, d, t, placement) for r in range(d)] for k in range(t)]
        home = device_of(rank, 0, 0, p, d, t, placement) // per_node
        flows = [f for grp in groups if len(grp) > 1 for f in ring_flows(cluster, grp)
                 if f[0] // per_node == home or f[1] // per_node == home]
        if not flows:
            return (), 0.0
        load, latency_us = flow_load(cluster, flows)
        node = f"node{home}/"
        pace = max(load, key=lambda hop: load[hop] / links[hop].bandwidth_gb_s)
        kept = {hop: n for hop, n in load.items() if hop == pace or hop[0].startswith(node) or hop[1].startswith(node)}
        return tuple(kept.items()), latency_us

    def pipeline_ring() -> RouteLoad:
        rings = [[device_of(rank, r, k, p, d, t, placement) for rank in range(p)] for r in range(d) for k in range(t)]
        if p < 2:
            return (), 0.0
        load, _ = flow_load(cluster, [f for ring in rings for f in ring_flows(cluster, ring)])
        mine, latency_us = flow_load(cluster, ring_flows(cluster, rings[0]))
        return tuple((hop, load[hop]) for hop in mine), latency_us

    pairs = [(stage_to_rank[s], stage_to_rank[s + 1]) for s in range(len(stage_to_rank) - 1)]
    return (tuple(message(a, b) for a, b in pairs), tuple(message(b, a) for a, b in pairs),
            tuple(reduction(rank) for rank in stage_to_rank), pipeline_ring())


@lru_cache(maxsize=1024)  # a search asks again for each plan of a layout
def data_parallel_link(cluster: Cluster, p: int, d: int, t: int, placement: Placement) -> LinkSpeed:
    """The link of the gradient all-reduce: a ring over each stage's replicas (per tensor rank)."""
    groups = [[device_of(s, r, k, p, d, t, placement) for r in range(d)] for s in range(p) for k in range(t)]
    return group_link(cluster, groups)


@lru_cache(maxsize=1024)  # a search asks again for each plan of a layout
def context_parallel_link(cluster: Cluster, p: int, d: int, t: int, cp: int, placement: Placement) -> LinkSpeed:
    """The link of a ring over each context-parallel group, all groups at once: ``d`` counts the
    replicas with the context-parallel ranks (d x cp), a group being cp consecutive ones."""
    if cp <= 1:
        return FREE
    groups = [[device_of(s, r * cp + c, k, p, d, t, placement) for c in range(cp)]
              for s in range(p) for r in range(d // cp) for k in range(t)]
    return group_link(cluster, groups)


@lru_cache(maxsize=1024)  # a search asks again for each plan of a layout
def expert_parallel_link(cluster: Cluster, p: int, d: int, t: int, ep: int, etp: int, placement: Placement,
                         dispatch: NodeDispatch | None = None) -> LinkSpeed:
    """The link of an all-to-all over each expert-parallel group, all groups at once: a stage's
    t x d devices (tensor rank fastest, as Megatron orders them) tiled ETP x EP x EDP, expert tensor
    rank fastest; every member sends each other member an equal share of its bytes (or through a
    per-domain ``dispatch``, :func:`alltoall_load`)."""
    if ep <= 1:
        return FREE
    stage_devices = t * d
    groups = []
    for s in range(p):
        for outer in range(stage_devices // (ep * etp)):
            for k in range(etp):
                positions = [k + etp * (j + ep * outer) for j in range(ep)]
                groups.append([device_of(s, pos // t, pos % t, p, d, t, placement) for pos in positions])
    links = _directed(cluster)
    load, latency_us = alltoall_load(cluster, groups, dispatch)
    bandwidth = min(links[hop].bandwidth_gb_s / n for hop, n in load.items()) if load else math.inf
    return LinkSpeed(bandwidth, latency_us)


@lru_cache(maxsize=1024)  # a search asks again for each plan of a layout
def pairs_link(cluster: Cluster, pairs: tuple[tuple[int, int], ...], p: int, d: int, t: int, placement: Placement
               ) -> LinkSpeed:
    """The slowest link among transfers between each pair of pipeline ranks, both ways, every
    replica's and tensor rank's at once (DualPipe's copies of a stage summing their gradients)."""
    flows = [(device_of(x, r, k, p, d, t, placement), device_of(y, r, k, p, d, t, placement))
             for a, b in pairs for x, y in ((a, b), (b, a)) for r in range(d) for k in range(t)]
    routes, load = _routes_and_load(cluster, flows)
    return min((_shared_link(cluster, *flow, edges, load) for flow, edges in zip(flows, routes, strict=True)),
               key=lambda x: (x.bandwidth_gb_s, -x.latency_us))


@lru_cache(maxsize=1024)  # a search asks again for each plan of a layout
def expert_tensor_link(cluster: Cluster, p: int, d: int, t: int, etp: int, placement: Placement) -> LinkSpeed:
    """The link of a ring over each expert-tensor-parallel group, all groups at once: ``etp``
    consecutive devices of a stage's t x d (tensor rank fastest, as :func:`expert_parallel_link`
    tiles them)."""
    if etp <= 1:
        return FREE
    groups = [[device_of(s, pos // t, pos % t, p, d, t, placement) for pos in range(first, first + etp)]
              for s in range(p) for first in range(0, t * d, etp)]
    return group_link(cluster, groups)


@lru_cache(maxsize=1024)  # a search asks again for each plan of a layout
def tensor_parallel_link(cluster: Cluster, p: int, d: int, t: int, placement: Placement) -> LinkSpeed:
    groups = [[device_of(s, r, k, p, d, t, placement) for k in range(t)] for s in range(p) for r in range(d)]
    return group_link(cluster, groups)


@lru_cache(maxsize=64)
def plan_links(cluster: Cluster, stage_to_rank: tuple[int, ...], p: int, d: int, t: int, placement: Placement
               ) -> tuple[tuple[LinkSpeed, ...], LinkSpeed, LinkSpeed]:
    """(one link per stage boundary, the data-parallel link, the tensor-parallel link) of a plan,
    remembered: changing the schedule or the micro-batches does not route the cluster again."""
    return (tuple(stage_links(cluster, stage_to_rank, p, d, t, placement)), data_parallel_link(cluster, p, d, t, placement),
            tensor_parallel_link(cluster, p, d, t, placement))
