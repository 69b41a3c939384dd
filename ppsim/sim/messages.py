"""The messages of one step, numbered once, and the route each send and receive looks up.

Message ``(2 x sending stage + 0 for activations, 1 for grads) x micro-batches + micro-batch``: so
the arrivals of a step are one flat list. Each directed pair of ranks that exchanges messages is a
link (a FIFO on static links; a queue of flows on a fabric), numbered too.
"""

from __future__ import annotations

from typing import NamedTuple

from ppsim.costs.table import CostTable
from ppsim.plan import Action, Kind, Plan


class MessageRoute(NamedTuple):
    """What a send or a receive of one stage needs to know of its messages (micro-batch ``mb``'s
    number is ``first + mb``)."""

    first: int  #: the message number of micro-batch 0
    boundary: int  #: the stage boundary it crosses (activations cross s -> s+1 at s, grads s -> s-1 at s-1)
    backward: bool  #: a grad (else an activation)
    peer: int  #: the rank at the other end
    pair: int  #: the directed rank pair's link, sender -> receiver
    overhead_ms: float  #: what this side spends: the sender before the data moves, the receiver after
    wire_ms: float  #: the message's time on the link
    latency_ms: float


class MessageTables:
    """The routes of every stage's sends and receives, the links' numbers and the step's arrivals."""

    def __init__(self, plan: Plan, costs: CostTable, message_bytes: int) -> None:
        m, n, where = plan.num_microbatches, plan.num_stages, plan.stage_to_rank
        boundaries = range(max(1, n - 1))
        wire = [costs.link(b).serialization_ms(message_bytes) for b in boundaries]
        latency = [costs.link(b).latency_ms for b in boundaries]
        send = [costs.link(b).send_overhead_ms for b in boundaries]
        recv = [costs.link(b).recv_overhead_ms for b in boundaries]
        pairs: dict[tuple[int, int], int] = {}
        down = [pairs.setdefault((where[x], where[x + 1]), len(pairs)) for x in range(n - 1)]  #: x -> x + 1
        up = [pairs.setdefault((where[x + 1], where[x]), len(pairs)) for x in range(n - 1)]  #: x + 1 -> x
        self.links = len(pairs)
        #: per stage: its sends of activations / grads, its receives of activations / grads
        self.send_f: list[MessageRoute | None] = [
            *(MessageRoute(x * 2 * m, x, False, where[x + 1], down[x], send[x], wire[x], latency[x]) for x in range(n - 1)),
            None]
        self.send_b: list[MessageRoute | None] = [None, *(
            MessageRoute(x * 2 * m + m, x - 1, True, where[x - 1], up[x - 1], send[x - 1], wire[x - 1], latency[x - 1])
            for x in range(1, n))]
        self.recv_f: list[MessageRoute | None] = [None, *(
            MessageRoute((x - 1) * 2 * m, x - 1, False, where[x - 1], down[x - 1], recv[x - 1], wire[x - 1], latency[x - 1])
            for x in range(1, n))]
        self.recv_b: list[MessageRoute | None] = [
            *(MessageRoute((x + 1) * 2 * m + m, x, True, where[x + 1], up[x], recv[x], wire[x], latency[x])
              for x in range(n - 1)),
            None]
        self.arrivals: list[float | None] = [None] * (2 * n * m)  #: each message's arrival, once known

    def number(self, a: Action) -> tuple[MessageRoute, int]:
        """The route of send or receive ``a`` and its message's number."""
        route = self.route(a.kind, a.stage)
        assert a.microbatch is not None, f"{a} names no micro-batch: the plan was validated"
        return route, route.first + a.microbatch

    def route(self, kind: Kind, stage: int) -> MessageRoute:
        """The route of ``stage``'s send or receive of kind ``kind``."""
        table = {Kind.SEND_F: self.send_f, Kind.SEND_B: self.send_b, Kind.RECV_F: self.recv_f, Kind.RECV_B: self.recv_b}
        route = table[kind][stage]
        assert route is not None, f"stage {stage} has no {kind.value}: the plan was validated"
        return route
