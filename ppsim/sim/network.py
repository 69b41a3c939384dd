"""Links shared as networks share them: flows over directed links, max-min fair, rates recomputed
whenever a flow starts or ends.

A flow moves ``nbytes`` over a route, given as the load it puts on each directed link it crosses
(``{link: weight}``): a weight of k means k identical copies of the flow cross that link (every
data-parallel replica's copy of a transfer, simulated once), or a ring collective's share of its
traffic that crosses it. Active flows get max-min fair rates by progressive filling: every flow's
rate rises at the same pace until a link is full (sum of weight x rate = its capacity); the flows
on it freeze, and the others go on. A flow's data arrives ``latency`` after its last byte left.

The kernel-free :class:`Network` is driven by whoever owns the clock (the simulator's event loop,
or :func:`run_flows` for a fixed list of flows): it is told when flows start, answers when the next
one finishes, and hands back the flows finished by a given time.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

LinkId = Hashable
EPSILON_BYTES = 1e-6  #: a flow with less left than this has finished (float rounding)


class Flow:
    """One transfer in the network (compared by identity)."""

    __slots__ = ("route", "nbytes", "latency_ms", "on_done", "left", "rate", "started_ms", "since", "finish", "order",
                 "users")

    def __init__(self, route: Mapping[LinkId, float], nbytes: float, latency_ms: float = 0.0,
                 on_done: Callable[[float], None] | None = None) -> None:
        self.route = route  #: load per directed link it crosses (only links of finite capacity)
        self.nbytes = nbytes
        self.latency_ms = latency_ms
        self.on_done = on_done  #: called with the arrival time
        self.left = float(nbytes)  #: bytes still to send, as of ``since``
        self.rate = 0.0  #: bytes per ms, as last shared out
        self.started_ms = 0.0
        self.since = 0.0  #: when ``left`` was last brought up to date
        self.finish = math.inf  #: when its last byte leaves at today's rate
        self.order = 0  #: start order: ties are settled by it
        self.users: tuple[tuple[LinkId, dict[Flow, None]], ...] = ()  #: once started: (link, the network's flows on it)

    def __repr__(self) -> str:
        return f"Flow({self.nbytes} bytes over {list(self.route)}, {self.left} left at {self.rate}/ms)"

    def settle(self, now: float) -> None:
        """Bring ``left`` up to ``now`` at the current rate."""
        if now > self.since:
            self.left -= self.rate * (now - self.since)
            self.since = now


def _finished(f: Flow) -> bool:
    """Whether ``f`` has sent everything, up to float rounding (of its bytes, or of a nanosecond at its rate)."""
    return math.isinf(f.rate) or f.left <= max(EPSILON_BYTES, f.nbytes * 1e-12, f.rate * 1e-9)


def max_min_rates(flows: Sequence[Flow], capacity: Mapping[LinkId, float]) -> None:
    """Set every flow's max-min fair rate (progressive filling over weighted link loads). A flow
    that crosses no finite link is unconstrained (infinite rate)."""
    headroom = {}
    users: dict[LinkId, list[Flow]] = {}
    for f in flows:
        f.rate = 0.0
        for link in f.route:
            users.setdefault(link, []).append(f)
            headroom[link] = capacity[link]
    unfrozen = {f for f in flows if f.route}
    for f in flows:
        if not f.route:
            f.rate = math.inf
    load = {link: sum(f.route[link] for f in fs) for link, fs in users.items()}
    while unfrozen:
        # the smallest equal increase that fills some link
        step, full = math.inf, []
        for link, weight in load.items():
            if weight <= 0:
                continue
            room = headroom[link] / weight
            if room < step - 1e-12 * max(1.0, step if step < math.inf else 1.0):
                step, full = room, [link]
            elif abs(room - step) <= 1e-12 * max(1.0, step):
                full.append(link)
        if step is math.inf:  # pragma: no cover - every unfrozen flow crosses a loaded link
            break
        for f in unfrozen:
            f.rate += step
        for link, weight in load.items():
            headroom[link] -= step * weight
        frozen = {f for link in full for f in users[link] if f in unfrozen}
        unfrozen -= frozen
        for f in frozen:
            for link, w in f.route.items():
                load[link] -= w


class Network:
    """The active flows on links of given capacity (bytes per ms per direction).

    Flows that share no link do not affect each other's rates, so a start or an end shares out
    again only the flows connected to it through shared links (its component), not every active
    one; each flow keeps its bytes left as of its last change of rate, and the next to finish comes
    from a heap of projected finish times. The cost of an event grows with its component, not with
    the size of the network."""

    def __init__(self, capacity: Mapping[LinkId, float]) -> None:
        self.capacity = dict(capacity)
        self.users: dict[LinkId, dict[Flow, None]] = {}  #: active flows per link, in start order
        self.active: dict[Flow, None] = {}
        self.now = 0.0
        self._heap: list[tuple[float, int, Flow]] = []
        self._started = 0
        #: a route as given (by identity) -> (it, its links that constrain, its pace alone, (link, its flows)
        #: per link): routes repeat, flow after flow
        self._routes: dict[int, tuple[Mapping[LinkId, float], dict[LinkId, float], float, tuple[Any, ...]]] = {}

    def _advance(self, now: float) -> None:
        if now < self.now - 1e-9:
            raise ValueError(f"the network's clock cannot go back from {self.now} to {now}")
        self.now = max(self.now, now)

    def _component(self, links: Iterable[LinkId]) -> list[Flow]:
        """The active flows connected to ``links`` through links they share, in start order."""
        seen_links = set(links)
        todo = list(seen_links)
        flows: dict[Flow, None] = {}
        while todo:
            for f in self.users.get(todo.pop(), ()):
                if f not in flows:
                    flows[f] = None
                    for link in f.route:
                        if link not in seen_links:
                            seen_links.add(link)
                            todo.append(link)
        return sorted(flows, key=lambda f: f.order)

    def _share(self, flows: list[Flow]) -> float:
        """Share out again the rates of ``flows`` (a whole component) from now on; return the
        earliest of their new finishes."""
        if not flows:
            return math.inf
        now = self.now
        for f in flows:
            f.settle(now)
        if len(flows) == 1 and flows[0].route:  # alone on its links: its slowest link's pace
            flows[0].rate = min(self.capacity[link] / w for link, w in flows[0].route.items())
        else:
            max_min_rates(flows, self.capacity)
        return min(self._project(f, now) for f in flows)

    def _project(self, f: Flow, now: float) -> float:
        """Project ``f``'s finish at its rate from ``now``, enter it in the heap and return it."""
        f.finish = finish = now if _finished(f) else now + f.left / f.rate if f.rate > 0 else math.inf
        heapq.heappush(self._heap, (finish, f.order, f))
        return finish

    def start(self, now: float, flow: Flow) -> float:
        """Add ``flow`` at ``now``; the rates of the flows it shares links with are shared out again.
        Returns the earliest finish among the flows whose rates it set (no other finish changed)."""
        if now > self.now:
            self.now = now
        elif now < self.now:
            self._advance(now)  # raises if it goes back by more than rounding
        given = flow.route
        known = self._routes.get(id(given))
        if known is None or known[0] is not given:  # (holding the given route keeps its id from being reused)
            # links of no capacity limit (or unknown to the network: a PCIe hop) constrain nothing
            links = {link: w for link, w in given.items() if w > 0 and math.isfinite(self.capacity.get(link, math.inf))}
            # alone on its links, a flow goes at its slowest link's pace (unconstrained: infinitely fast)
            pace = min((self.capacity[link] / w for link, w in links.items()), default=math.inf)
            users = tuple((link, self.users.setdefault(link, {})) for link in links)  # each link's flows, found once
            known = self._routes[id(given)] = (given, links, pace, users)
        flow.route = route = known[1]  # shared by the flows of one route: read, never changed
        flow.users = known[3]
        flow.started_ms = flow.since = now = self.now
        flow.order = self._started
        self._started += 1
        self.active[flow] = None
        alone = True
        for _, sharing in known[3]:
            if sharing:
                alone = False
            sharing[flow] = None
        if alone:  # most messages: nobody else's rate changes (what _project does, inline)
            flow.rate = rate = known[2]
            left = flow.left
            if rate == math.inf or left <= EPSILON_BYTES or left <= flow.nbytes * 1e-12 or left <= rate * 1e-9:
                finish = now  # nothing to send, or no link to limit it
            else:
                finish = now + left / rate if rate > 0 else math.inf
            flow.finish = finish
            heapq.heappush(self._heap, (finish, flow.order, flow))
            return finish
        return self._share(self._component(route))

    def _head(self) -> tuple[float, int, Flow] | None:
        """The heap's earliest entry that is still current (its finish unchanged since it was
        pushed; a finished flow's finish is -inf)."""
        heap = self._heap
        while heap:
            head = heap[0]
            if head[2].finish == head[0]:
                return head
            heapq.heappop(heap)
        return None

    def next_finish(self) -> float:
        """When the next active flow sends its last byte at today's rates (inf: none active)."""
        head = self._head()
        if head is None:
            return math.inf
        return head[0] if head[0] > self.now else self.now

    def finish_until(self, now: float) -> list[tuple[float, Flow]]:
        """Advance to ``now`` (no later than :meth:`next_finish`) and remove the flows that have sent
        everything: (arrival time, flow) each, in start order; the rates of the flows they shared
        links with are shared out again."""
        if now > self.now:
            self.now = now
        elif now < self.now:
            self._advance(now)  # raises if it goes back by more than rounding
        now = self.now
        done: list[Flow] = []
        heap, inf = self._heap, math.inf
        while heap:  # what _head, Flow.settle and _finished do, inline: once per flow that ends
            finish, _, f = heap[0]
            if f.finish != finish:  # stale
                heapq.heappop(heap)
                continue
            if now > f.since:
                f.left -= f.rate * (now - f.since)
                f.since = now
            if finish > now:
                left, rate = f.left, f.rate
                if not (rate == inf or left <= EPSILON_BYTES or left <= f.nbytes * 1e-12 or left <= rate * 1e-9):
                    break
            heapq.heappop(heap)
            f.finish = -inf  # its other entries in the heap (pushed by earlier sharings) are stale now
            done.append(f)
        if not done:
            return []
        links: set[LinkId] = set()
        for f in done:
            del self.active[f]
            for link, users in f.users:
                del users[f]
                if users:  # a link nobody else uses frees nobody
                    links.add(link)
        if links:
            self._share(self._component(links))
        if len(done) > 1:
            done.sort(key=lambda f: f.order)
        return [(now + f.latency_ms, f) for f in done]


def run_flows(capacity: Mapping[LinkId, float], flows: Sequence[tuple[float, Flow]]) -> list[float]:
    """Arrival time of each (start time, flow), run alone on a network of ``capacity``."""
    net = Network(capacity)
    order = sorted(range(len(flows)), key=lambda i: flows[i][0])
    arrival: dict[int, float] = {}
    index = {id(f): i for i, (_, f) in enumerate(flows)}
    k = 0
    while k < len(order) or net.active:
        next_start = flows[order[k]][0] if k < len(order) else math.inf
        finish = net.next_finish()
        if finish <= next_start:
            for at, f in net.finish_until(finish):
                arrival[index[id(f)]] = at
        else:
            net.start(next_start, flows[order[k]][1])
            k += 1
    return [arrival[i] for i in range(len(flows))]
