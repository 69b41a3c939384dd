"""The engine: executes a lowered Plan against a CostTable and returns a Trace.

Model
- Every rank is a process (on SimPy's interface: SimPy itself, the lean clocked kernel or the
  clock-free one, see :func:`simulate`) that runs its actions strictly in plan order: it is the
  compute resource of its device (one action at a time). One handler per kind of action that is
  not inline; compute (F, B, I, W, OPT) and posted sends and receives are the fast paths: they run
  on the rank's own clock, so long runs of local work cost no event. A rank synchronises with the
  kernel's clock only when it must wait for another.
- Messages. A receive blocks its rank until the data has arrived. Around a transfer the sender
  spends the link's send overhead before the data moves and the receiver its receive overhead after
  it has arrived. What a send does is the communication semantics (``CommSemantics``):
    * ``async``: the send is posted and the rank goes on at once (unbounded buffering);
    * ``eager``: the send blocks its rank until the transfer has completed, but not for the peer;
    * ``rendezvous``: the send blocks until the peer has posted the matching receive, then both
      wait for the transfer (gloo and NCCL send/recv pairs behave like this).
- Links. Without a fabric, every directed link between two ranks is a FIFO: a transfer occupies it
  for bytes / bandwidth (the boundary's :class:`~ppsim.costs.Link`) and arrives ``latency`` after
  that. With a fabric (a cluster under the network model, ``CostTable.fabric``) every transfer is a
  flow over the directed links of its route, sharing each with the flows active at that instant,
  max-min fairly (:mod:`ppsim.sim.network`); the messages of one rank pair still go in order.
- End of step: ``REDUCE_GRAD`` (all-reduce across data-parallel replicas) occupies the collective
  lane and blocks the rank until it is done; with ``CostTable.overlap_grad_reduce`` its buckets
  start while the stage's last backward (or weight grad) produces them, so only the tail is
  exposed. With a fabric each bucket is a flow on the stage's rings, sharing the links with the
  messages. ``CLIP`` (gradient clipping) does the rank's own part (its local gradient norm), then
  waits on the collective lane until every rank of the pipeline has got there and the norm is
  all-reduced (``CostTable.clip_allreduce_ms``; with a fabric, a flow on the pipeline's ring): the
  slowest stage holds up the optimizer step of all the others; ``OPT`` (optimizer step) occupies
  the compute lane.

The engine knows no schedule: it only executes actions.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator, Hashable
from enum import Enum
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from ppsim.costs.table import CostTable, FabricCollective, Route
from ppsim.errors import PlanError
from ppsim.gc_pause import gc_paused
from ppsim.plan import Action, Kind, Overlap, Plan, render_grid
from ppsim.sim.allocation import memory_deltas, static_memory_bytes
from ppsim.sim.clocked import ClockedKernel
from ppsim.sim.durations import DURATION_FIELD, compute_ms
from ppsim.sim.immediate import ImmediateKernel
from ppsim.sim.network import Flow, Network
from ppsim.trace import Counter, Span, Trace, plan_meta

if TYPE_CHECKING:  # pragma: no cover - SimPy itself is loaded only as the kernel asked for
    import simpy

KERNELS = ("auto", "simpy", "clocked", "immediate")  #: what runs the ranks' processes (see :func:`simulate`)


class CommSemantics(str, Enum):
    ASYNC = "async"
    EAGER = "eager"
    RENDEZVOUS = "rendezvous"


class _Message:
    """One transfer, keyed by its send: (sending stage, 0 for activations / 1 for grads, micro-batch)."""

    __slots__ = ("done", "end", "send_posted", "recv_posted")

    def __init__(self, done: simpy.Event) -> None:
        self.done = done
        self.end: float | None = None
        self.send_posted: float | None = None
        self.recv_posted: float | None = None


class _Rank:
    """A rank's state as it runs its actions."""

    __slots__ = ("index", "t", "held", "points", "last_backward", "collective_free", "feeders", "position", "finished",
                 "process")

    def __init__(self, index: int) -> None:
        self.index = index
        self.t = 0.0  #: the rank's own clock, >= SimPy's
        self.held = 0.0  #: activation bytes held
        self.points: list[tuple[float, float]] = [(0.0, 0.0)]
        self.last_backward: dict[int, tuple[float, float]] = {}  #: per stage: its latest B or W
        self.collective_free = 0.0
        self.feeders: dict[int, _Feeder] = {}  #: per stage: its gradient reduction's flows, once started
        self.position = 0
        self.finished = False
        self.process: Generator[Any, Any, None] | None = None  #: its process in the kernel


class _Wait(NamedTuple):
    """A handler's request: wait for ``event``, then call ``then`` (which may ask to wait again)."""

    event: simpy.Event
    then: Callable[[], _Wait | None]


class _Fabric:
    """The network model on the kernel's clock: starts flows now, wakes at the next one to finish."""

    def __init__(self, env: Any, capacity: Any) -> None:
        self.env = env
        self.call_later: Callable[[float, Callable[[], object]], None] = env.call_later  #: call a function later
        self.net = Network(capacity)
        #: the earliest wake-up booked and not yet come; it is no later than any active flow's finish,
        #: so a start books one only for a flow it makes finish earlier
        self.booked = math.inf
        self.queues: dict[Hashable, deque[Flow]] = {}

    def start(self, flow: Flow) -> None:
        now = self.env.now
        at = self.net.start(now, flow)  # no other finish changed: the booked wake-up still comes in time
        if at < now:
            at = now
        if at < self.booked:
            self._book(at, now)

    def send(self, pair: Hashable, flow: Flow) -> None:
        """Start ``flow`` now, or after the flows of ``pair`` queued before it."""
        queue = self.queues.get(pair)
        if queue is None:
            queue = self.queues[pair] = deque()
        queue.append(flow)
        if len(queue) == 1:
            self.start(flow)

    def send_at(self, when: float, pair: Hashable, flow: Flow) -> None:
        """:meth:`send` once the kernel's clock reaches ``when`` (flows start in time order)."""
        if when <= self.env.now:
            self.send(pair, flow)
        else:
            self.call_later(when - self.env.now, partial(self.send, pair, flow))

    def sent(self, pair: Hashable) -> None:
        """The flow at the head of ``pair``'s queue has sent its last byte: the next one starts."""
        queue = self.queues[pair]
        queue.popleft()
        if queue:
            self.start(queue[0])

    def _on_wake(self, at: float) -> None:
        """Hand out the flows finished by now, then book a wake-up at the next finish. A wake-up
        booked before an earlier one (a start made some flow finish sooner) finds it stale and returns."""
        if at != self.booked:
            return  # an earlier wake-up was booked after this one, and has come
        self.booked = -math.inf  # the flows that start as these finish book nothing: the wake-up below
        now = self.env.now
        net = self.net
        for arrival, flow in net.finish_until(now):
            flow.on_done(arrival)  # type: ignore[misc]
        at = net.next_finish()
        if at < now:
            at = now
        self.booked = math.inf
        if at < math.inf:
            self._book(at, now)

    def _book(self, at: float, now: float) -> None:
        """Wake up at ``at`` (no later than any active flow's finish)."""
        self.booked = at
        self.call_later(at - now, partial(self._on_wake, at))


class _Feeder:
    """A stage's gradient reduction on the fabric: its buckets go out one after the other, each when
    it is ready (``ready``: when the backward has produced it), after ``after`` (the rank's previous
    reduction); ``done`` fires when the last has arrived."""

    def __init__(self, sim: _Simulation, collective: FabricCollective, ready: list[float], after: simpy.Event | None) -> None:
        self.sim = sim
        self.collective = collective
        self.done = sim.env.event()
        self.first: float | None = None
        self.end = 0.0
        sim.env.process(self._run(ready, after))

    def _run(self, ready: list[float], after: simpy.Event | None) -> Generator[simpy.Event, Any, None]:
        env, c = self.sim.env, self.collective
        if after is not None:
            yield after
        for at in ready:
            if at > env.now:
                yield env.timeout(at - env.now)
            if self.first is None:
                self.first = env.now
            arrived = self.sim.new_event()
            self.sim.fabric.start(Flow(c.route.load, c.volume_bytes, c.steps * c.route.latency_ms,  # type: ignore[union-attr]
                                       on_done=partial(self._arrived, arrived)))
            yield arrived
        self.end = env.now
        self.done.succeed()

    def _arrived(self, event: simpy.Event, arrival: float) -> None:
        self.sim.fire_at(event, arrival - self.sim.env.now)


class _Simulation:
    """One step of a lowered plan on a cost table."""

    def __init__(self, plan: Plan, costs: CostTable, semantics: CommSemantics, kernel: str = "auto") -> None:
        self.plan, self.costs = plan, costs
        self.rendezvous = semantics is CommSemantics.RENDEZVOUS
        self.blocking_send = semantics is not CommSemantics.ASYNC
        self.semantics = semantics
        stages = costs.stages
        # duration and activation-memory change of every (stage, kind) that computes
        # per stage, by kind (looked up in the rank's loop without building a key)
        self.compute: list[dict[Kind, tuple[float, int, int]]] = [{} for _ in stages]
        for (st, k), (alloc, free) in memory_deltas(plan, costs).items():
            self.compute[st][k] = (getattr(stages[st], DURATION_FIELD[k]), alloc, free)
        self.duration = compute_ms(costs)
        self.where = plan.stage_to_rank
        # a fabric's flows need a clock: SimPy's, or the lean clocked kernel (the same order of events,
        # faster); on static links the waits depend only on data, so the clock-free kernel runs the
        # same handlers to the same trace, faster still (tests compare the kernels)
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, not {kernel!r}")
        if kernel == "immediate" and costs.fabric is not None:
            raise ValueError("the immediate kernel has no clock: a fabric's flows need kernel='clocked' or 'simpy'")
        if kernel == "simpy":
            from ppsim.sim.simpy_kernel import SimPyKernel  # the reference: loaded only when asked for
            # (its module names the extra to install when SimPy is missing)

            self.env: Any = SimPyKernel()
            self.new_event: Callable[[], Any] = self.env.new_event
        else:
            self.env = ClockedKernel() if kernel == "clocked" or costs.fabric is not None else ImmediateKernel()
            self.new_event = self.env.event
        self.fire_at: Callable[[Any, float], None] = self.env.fire_at
        self.kernel = type(self.env).__name__
        self.nbytes = costs.message_bytes
        boundaries = range(max(1, plan.num_stages - 1))
        # per stage boundary: time on the wire, latency, what the sender spends before and the receiver after
        self.wire_ms = [costs.link(b).serialization_ms(self.nbytes) for b in boundaries]
        self.latency_ms = [costs.link(b).latency_ms for b in boundaries]
        self.send_overhead_ms = [costs.link(b).send_overhead_ms for b in boundaries]
        self.recv_overhead_ms = [costs.link(b).recv_overhead_ms for b in boundaries]
        self.link_free: dict[tuple[int, int], float] = {}
        self.fabric = _Fabric(self.env, costs.fabric.capacity) if costs.fabric is not None else None
        self.messages: dict[tuple[int, int, int | None], _Message] = {}
        self.spans: list[Span] = []
        self.make_span = partial(tuple.__new__, Span)
        self.ranks = [_Rank(r) for r in range(plan.num_ranks)]
        # the gradient-norm all-reduce of gradient clipping: one arrival per rank
        self.n_syncing = sum(Kind.CLIP in plan.kinds(r) for r in range(plan.num_ranks))
        self.sync_arrivals: list[float] = []
        self.sync_done = self.new_event()
        self.sync_end: list[float] = []
        # per rank and stage, the position of its last backward piece: where its reduction's buckets start
        self.last_backward_at = ([_last_backward(actions) for actions in plan.actions]
                                 if self.fabric is not None and costs.overlap_grad_reduce else [])
        # posted sends run inline in the rank's loop, their messages numbered
        # (2 x stage + 0 for activations, 1 for grads) x micro-batches + micro-batch: each one's
        # arrival, and the receives waiting for one; each directed pair of ranks a link, numbered
        m, n = plan.num_microbatches, plan.num_stages
        self.arrivals: list[float | None] = [None] * (2 * n * m)
        self.awaited: dict[int, Any] = {}
        pairs: dict[tuple[int, int], int] = {}
        pair_down = [pairs.setdefault((self.where[x], self.where[x + 1]), len(pairs)) for x in range(n - 1)]
        pair_up = [-1] + [pairs.setdefault((self.where[x], self.where[x - 1]), len(pairs)) for x in range(1, n)]
        self.pair_free = [0.0] * len(pairs)  #: when each pair's link is free again
        # per stage, what its posted sends and receives look up: (first message number, boundary,
        # peer rank, pair, send overhead, time on the wire, latency) for a send of activations (f) or
        # of grads (b); (first message number, peer rank, receive overhead) for a receive
        where, wire, latency = self.where, self.wire_ms, self.latency_ms
        send, recv = self.send_overhead_ms, self.recv_overhead_ms
        self.posted_sends = (
            [(x * 2 * m, x, where[x + 1], pair_down[x], send[x], wire[x], latency[x]) for x in range(n - 1)] + [None],
            [None] + [(x * 2 * m + m, x - 1, where[x - 1], pair_up[x], send[x - 1], wire[x - 1], latency[x - 1])
                      for x in range(1, n)],
            [None] + [((x - 1) * 2 * m, where[x - 1], recv[x - 1]) for x in range(1, n)],
            [((x + 1) * 2 * m + m, where[x + 1], recv[x]) for x in range(n - 1)] + [None],
        )
        # overlapped pairs and plain compute run in the rank's loop itself (local work, no waiting)
        self.handlers: dict[Kind, Callable[[_Rank, Any], _Wait | None]] = {
            Kind.REDUCE_GRAD: self._reduce_grad_on_fabric if self.fabric is not None else self._reduce_grad,
            Kind.CLIP: self._clip,
            Kind.SEND_F: self._rendezvous, Kind.SEND_B: self._rendezvous,
            Kind.RECV_F: self._rendezvous, Kind.RECV_B: self._rendezvous,
        }

    # --- the slow paths' spans (the rank's loop appends its fast paths' spans itself) -----------------

    def emit(self, rank: int, lane: str, action: Action, start: float, end: float, nbytes: int | None = None,
             peer: int | None = None) -> None:
        self.spans.append(self.make_span((rank, lane, action, start, end, nbytes, peer)))

    def _run_compute(self, st: _Rank, a: Action, k: Kind, s: int, dur: float, alloc: int, free: int, i: int) -> None:
        """Local work: occupy the compute lane, allocate at its start and free at its end."""
        t = st.t
        if k is Kind.B or k is Kind.W:
            if self.costs.overlap_grad_reduce:
                st.last_backward[s] = (t, t + dur)
                if self.fabric is not None and self.last_backward_at[st.index].get(s) == i:
                    self._start_feeder(st, s, t, t + dur)
        if alloc:
            st.held += alloc
            st.points.append((t, st.held))
        self.emit(st.index, "compute", a, t, t + dur)
        st.t = t + dur
        if free:
            st.held += free
            st.points.append((st.t, st.held))

    # --- the handlers, one per kind that is not plain compute -----------------------------------------

    def _overlapped(self, st: _Rank, a: Overlap, i: int) -> None:
        """A forward and a backward overlapped: the forward's activations allocated, the backward's freed."""
        f, b = a.parts
        self._run_compute(st, a, b.kind, b.stage, self.duration(a), self.compute[f.stage][f.kind][1],
                          self.compute[b.stage][b.kind][2], i)

    def _reduce_grad(self, st: _Rank, a: Action) -> None:
        c = self.costs.stages[a.stage]
        bwd = st.last_backward.get(a.stage)
        if self.costs.overlap_grad_reduce and bwd is not None:
            # bucket j is ready once the last backward has produced (j + 1) / n of the gradients;
            # buckets go out one after the other on the collective lane
            b0, b1 = bwd
            n = max(1, c.allreduce_buckets)
            each = c.allreduce_ms / n
            first = free = max(st.collective_free, b0 + (b1 - b0) / n)
            for j in range(n):
                free = max(free, b0 + (j + 1) / n * (b1 - b0)) + each
            self.emit(st.index, "collective", a, first, free, c.grad_bytes)
            st.collective_free = free
            st.t = max(st.t, free)
        else:
            self.emit(st.index, "collective", a, st.t, st.t + c.allreduce_ms, c.grad_bytes)
            st.t += c.allreduce_ms
            st.collective_free = st.t
        return None

    def _collective(self, stage: int) -> FabricCollective | None:
        """``stage``'s gradient reduction on the fabric (None: no fabric, or nothing to reduce)."""
        fabric = self.costs.fabric
        return fabric.reduce[stage] if fabric is not None and fabric.reduce else None

    def _start_feeder(self, st: _Rank, stage: int, b0: float, b1: float) -> None:
        """Start ``stage``'s gradient reduction on the fabric, bucket by bucket as [b0, b1) produces them."""
        collective = self._collective(stage)
        if collective is None:
            return
        n = collective.buckets
        after = self._last_feeder(st)
        st.feeders[stage] = _Feeder(self, collective, [b0 + (j + 1) / n * (b1 - b0) for j in range(n)], after)

    @staticmethod
    def _last_feeder(st: _Rank) -> simpy.Event | None:
        return next(reversed(st.feeders.values())).done if st.feeders else None

    def _reduce_grad_on_fabric(self, st: _Rank, a: Action) -> _Wait | None:
        collective = self._collective(a.stage)
        if collective is None:
            return self._reduce_grad(st, a)  # nothing to move: as without a fabric
        c = self.costs.stages[a.stage]
        feeder = st.feeders.get(a.stage)
        if feeder is None:  # not overlapped: all buckets from now, after the rank's earlier reductions
            start = max(st.t, st.collective_free)
            feeder = st.feeders[a.stage] = _Feeder(self, collective, [start] * collective.buckets, self._last_feeder(st))

        def finish() -> None:
            begin = feeder.first if feeder.first is not None else st.t
            self.emit(st.index, "collective", a, begin, feeder.end, c.grad_bytes)
            st.collective_free = feeder.end
            st.t = max(st.t, feeder.end)
            return None

        if feeder.done.triggered:
            return finish()
        return _Wait(feeder.done, finish)

    def _clip(self, st: _Rank, a: Action) -> _Wait | None:
        start = st.t
        st.t += self.costs.stages[a.stage].clip_ms
        self.sync_arrivals.append(st.t)

        def finish() -> None:
            st.t = self.sync_end[0]
            self.emit(st.index, "collective", a, start, st.t, 4)

        if len(self.sync_arrivals) == self.n_syncing:  # the last to arrive starts the all-reduce
            at = max(self.sync_arrivals)
            clip = self.costs.fabric.clip if self.fabric is not None else None  # type: ignore[union-attr]
            if clip is None:  # a fixed time
                self.sync_end.append(at + self.costs.clip_allreduce_ms)
                self.fire_at(self.sync_done, self.sync_end[0] - self.env.now)
                return finish()
            # a flow on the pipeline's ring, from when the last rank got there
            self.fabric.call_later(max(0.0, at - self.env.now), partial(self._clip_flow, clip))  # type: ignore[union-attr]
        return _Wait(self.sync_done, finish)

    def _clip_flow(self, clip: FabricCollective) -> None:
        """Start the gradient norm's all-reduce on the fabric; its arrival ends every rank's CLIP."""
        def arrived(arrival: float) -> None:
            self.sync_end.append(arrival)
            self.fire_at(self.sync_done, arrival - self.env.now)

        self.fabric.start(Flow(clip.route.load, clip.volume_bytes, clip.steps * clip.route.latency_ms,  # type: ignore[union-attr]
                               on_done=arrived))

    def _transfer(self, src: int, dst: int, key: tuple[int, int, Any], start: float) -> float:
        """Book the link src -> dst for message ``key`` from ``start``; return the arrival time."""
        boundary = key[0] - key[1]  # activations cross s -> s+1, grads s -> s-1
        on_wire = self.wire_ms[boundary]
        pair = (src, dst)
        begin = max(start, self.link_free.get(pair, 0.0))
        self.link_free[pair] = begin + on_wire
        return begin + on_wire + self.latency_ms[boundary]

    def _flow(self, src: int, dst: int, key: tuple[int, int, Any], msg: _Message) -> _Wait | None:
        """Start message ``key``'s flow on the fabric now; it fires ``msg.done`` when it arrives."""
        fabric = self.costs.fabric
        assert fabric is not None and self.fabric is not None
        boundary = key[0] - key[1]
        route: Route = (fabric.backward if key[1] else fabric.forward)[boundary]
        pair = (src, dst)

        def arrived(arrival: float) -> None:
            self.fabric.sent(pair)  # type: ignore[union-attr]
            msg.end = arrival
            self.fire_at(msg.done, arrival - self.env.now)

        self.fabric.send(pair, Flow(route.load, self.nbytes, self.latency_ms[boundary], on_done=arrived))
        return None

    def _peer(self, a: Action) -> tuple[tuple[int, int, Any], int, bool]:
        """(message key, peer rank, sending) of a send or receive."""
        s, k, mb = a
        where = self.where
        if k is Kind.SEND_F:
            return (s, 0, mb), where[s + 1], True
        if k is Kind.SEND_B:
            return (s, 1, mb), where[s - 1], True
        if k is Kind.RECV_F:
            return (s - 1, 0, mb), where[s - 1], False
        return (s + 1, 1, mb), where[s + 1], False

    def _rendezvous(self, st: _Rank, a: Action) -> _Wait | None:
        """A send or receive that blocks until the peer has posted its side (posted sends and their
        receives run inline in the rank's loop)."""
        key, peer, sending = self._peer(a)
        begin = st.t
        if sending:  # the sender spends its overhead before the data moves
            st.t += self.send_overhead_ms[key[0] - key[1]]
        return self._meet(st, a, key, self._message(key), st.index, peer, begin, sending=sending)

    def _received(self, st: _Rank, a: Action, key: tuple[int, int, Any], msg: _Message, begin: float, peer: int) -> None:
        end = max(st.t, msg.end) + self.recv_overhead_ms[key[0] - key[1]]  # type: ignore[type-var]
        self.emit(st.index, "recv", a, begin, end, self.nbytes, peer)
        st.t = end

    def _meet(self, st: _Rank, a: Action, key: tuple[int, int, Any], msg: _Message, r: int, peer: int, begin: float,
              *, sending: bool) -> _Wait | None:
        """Rendezvous: the transfer starts when the second side posts; the first side waits for it."""
        def done() -> None:
            if sending:
                self.emit(r, "send", a, begin, msg.end, self.nbytes, peer)  # type: ignore[arg-type]
                st.t = msg.end  # type: ignore[assignment]
            else:
                self._received(st, a, key, msg, begin, peer)

        other = msg.recv_posted if sending else msg.send_posted
        if other is None:
            if sending:
                msg.send_posted = st.t
            else:
                msg.recv_posted = st.t
            return _Wait(msg.done, done)
        src, dst = (r, peer) if sending else (peer, r)
        start = max(st.t, other)
        if self.fabric is not None:
            def started() -> _Wait:
                self._flow(src, dst, key, msg)
                return _Wait(msg.done, done)
            return self._at(start, started)
        msg.end = self._transfer(src, dst, key, start)
        self.fire_at(msg.done, msg.end - self.env.now)
        return done()  # the second side knows the end: its clock jumps there

    def _at(self, when: float, then: Callable[[], _Wait | None]) -> _Wait | None:
        """Bring the kernel's clock to the rank's ``when`` (flows start in time order), then ``then``."""
        if when <= self.env.now:
            return then()
        return _Wait(self.env.timeout(when - self.env.now), then)

    def _arrived(self, key: int, pair: int, span: tuple[int, Action, float, int] | None, arrival: float) -> None:
        """A posted send's flow has delivered message ``key`` (at ``arrival``): the pair's next flow
        starts, an async send's span is written, and whoever waits for the message goes on."""
        self.fabric.sent(pair)  # type: ignore[union-attr]
        self.arrivals[key] = arrival
        if span is not None:
            r, a, begin, peer = span
            self.spans.append(self.make_span((r, "send", a, begin, arrival, self.nbytes, peer)))
        waiting = self.awaited.pop(key, None)
        if waiting is not None:
            self.fire_at(waiting, arrival - self.env.now)

    def _message(self, key: tuple[int, int, Any]) -> _Message:
        msg = self.messages.get(key)
        if msg is None:
            msg = self.messages[key] = _Message(self.new_event())
        return msg

    # --- the ranks and the run --------------------------------------------------------------------------

    def _rank_process(self, st: _Rank) -> Generator[simpy.Event, Any, None]:
        compute, handlers, run_compute = self.compute, self.handlers, self._run_compute
        overlap = Kind.OVERLAP_F_B
        # the kinds of the posted sends and receives; none under rendezvous, which takes the handlers
        posted_kinds = (Kind.SEND_F, Kind.SEND_B, Kind.RECV_F, Kind.RECV_B)
        SEND_F, SEND_B, RECV_F, RECV_B = posted_kinds if not self.rendezvous else (None,) * 4
        # the fast paths inline: local work on the rank's own clock (what _run_compute does, less the
        # bookkeeping of overlapped gradient reductions, which takes the slow path), and the posted
        # (async, eager) sends and their receives: on static links a FIFO per rank pair, on a fabric a flow
        plain = not self.costs.overlap_grad_reduce
        fabric = self.fabric
        forward_routes, backward_routes = (self.costs.fabric.forward, self.costs.fabric.backward) if fabric else ((), ())
        eager = self.blocking_send
        arrivals, awaited, pair_free = self.arrivals, self.awaited, self.pair_free
        send_f, send_b, recv_f, recv_b = self.posted_sends
        nbytes, env, fire_at, new_event = self.nbytes, self.env, self.fire_at, self.new_event
        # the clock-free kernel parks a receive on its message (no event): the send resumes it
        parks = isinstance(env, ImmediateKernel)
        resume = env.resume if parks else None
        r, points, append, tnew = st.index, st.points, self.spans.append, tuple.__new__  # tnew(Span, (...)): a Span
        # the rank's clock and held bytes live in locals (st.t, st.held) and go back to ``st`` around
        # what reads or changes them there: the handlers, and the waits
        t, held = st.t, st.held
        # the position of the current action is asked only where a rank waits or a slow path needs
        # it: it is found from what is left of the iterator then, not counted action by action
        actions = self.plan.actions[st.index]
        last = len(actions) - 1
        it = iter(actions)
        for a in it:
            s, k, mb = a
            if k is SEND_F or k is SEND_B:
                first, b, peer, pair, overhead_ms, wire_ms, latency_ms = (send_f if k is SEND_F else send_b)[s]
                key = first + mb
                begin = t
                posted = t + overhead_ms
                if fabric is None:  # the pair's link is a FIFO: the arrival is known now
                    busy = pair_free[pair]
                    pair_free[pair] = on_wire = (busy if busy > posted else posted) + wire_ms
                    arrivals[key] = end = on_wire + latency_ms
                    if awaited and (waiting := awaited.pop(key, None)) is not None:
                        if parks:
                            resume(waiting)  # a receiver parked on it
                        else:
                            fire_at(waiting, end - env.now)
                    append(tnew(Span, (r, "send", a, begin, end, nbytes, peer)))
                    t = end if eager else posted
                    continue
                # on a fabric, a flow from the rank's time on; it records its arrival when done
                route = forward_routes[b] if k is SEND_F else backward_routes[b]
                flow = Flow(route.load, nbytes, latency_ms,
                            on_done=partial(self._arrived, key, pair, None if eager else (r, a, begin, peer)))
                fabric.send_at(posted, pair, flow)
                if not eager:
                    t = posted
                    continue
                end = arrivals[key]
                if end is None:  # wait for its arrival (one event per message, for an eager sender and the receiver)
                    st.position, st.t = last - it.__length_hint__(), t
                    if (waiting := awaited.get(key)) is None:
                        waiting = awaited[key] = new_event()
                    yield waiting
                    end = arrivals[key]
                append(tnew(Span, (r, "send", a, begin, end, nbytes, peer)))
                t = end
                continue
            if k is RECV_F or k is RECV_B:
                first, peer, overhead_ms = (recv_f if k is RECV_F else recv_b)[s]
                key = first + mb
                end = arrivals[key]  # type: ignore[assignment]
                if end is None and parks:  # parked until the send, which hands the rank back to the kernel
                    awaited[key] = st.process
                    st.position, st.t = last - it.__length_hint__(), t
                    yield None
                    end = arrivals[key]
                elif end is None:
                    st.position, st.t = last - it.__length_hint__(), t
                    if (waiting := awaited.get(key)) is None:
                        waiting = awaited[key] = new_event()
                    yield waiting
                    end = arrivals[key]
                end = (t if t > end else end) + overhead_ms
                append(tnew(Span, (r, "recv", a, t, end, nbytes, peer)))
                t = end
                continue
            if plain and k is not overlap:
                op = compute[s].get(k)
                if op is not None:  # plain compute
                    dur, alloc, free = op
                    if alloc:
                        held += alloc
                        points.append((t, held))
                    end = t + dur
                    append(tnew(Span, (r, "compute", a, t, end, None, None)))
                    t = end
                    if free:
                        held += free
                        points.append((t, held))
                    continue
            st.t, st.held = t, held  # the slow paths read and change the rank's state
            i = last - it.__length_hint__()
            if k is overlap:
                self._overlapped(st, a, i)  # type: ignore[arg-type]
            elif (op := compute[s].get(k)) is not None:
                run_compute(st, a, k, s, op[0], op[1], op[2], i)
            else:
                handler = handlers.get(k)
                if handler is None:  # pragma: no cover - every kind is handled
                    raise PlanError(f"the simulator cannot run action {a}")
                wait = handler(st, a)
                while wait is not None:
                    st.position = i
                    yield wait.event
                    wait = wait.then()
            t, held = st.t, st.held
        st.t, st.held = t, held
        st.finished = True

    def run(self) -> Trace:
        with gc_paused():
            for st in self.ranks:
                st.process = self._rank_process(st)
                self.env.process(st.process)
            self.env.run()
        stuck = {st.index: st.position for st in self.ranks if not st.finished}
        if stuck:
            where = ", ".join(f"rank {r} at {self.plan.actions[r][i]}" for r, i in stuck.items())
            raise PlanError(
                f"the plan deadlocks with {self.semantics.value} communication: {where}",
                detail=render_grid(self.plan.actions, stuck),
            )
        return self._trace()

    def _trace(self) -> Trace:
        plan, costs = self.plan, self.costs
        counters = []
        if any(c.activation_bytes for c in costs.stages):
            counters = [Counter(st.index, "activation_bytes", "bytes", tuple(st.points)) for st in self.ranks]
        static = static_memory_bytes(plan, costs)
        if static is not None:
            counters += [Counter(st.index, "memory_bytes", "bytes", _shifted(st.points, static[st.index]["total"]))
                         for st in self.ranks]
        meta = plan_meta(plan, source="simulated", clock="simulated", comm=self.semantics.value, message_bytes=self.nbytes)
        meta["p2p_ms"] = [costs.p2p_ms(b) for b in range(plan.num_stages - 1)]
        meta["network"] = "flows" if costs.fabric is not None else "static"
        if static is not None:
            meta["memory_static_bytes"] = static
        return Trace(spans=self.spans, meta=meta, counters=counters)


def _shifted(points: list[tuple[float, float]], by: float) -> tuple[tuple[float, float], ...]:
    """``points`` with every value raised by ``by`` (the activations on top of the static memory)."""
    return tuple([(t, v + by) for t, v in points])


def _last_backward(actions: list[Action]) -> dict[int, int]:
    """Per stage, the position of the rank's last backward piece (B or W, alone or overlapped)."""
    out = {}
    for i, a in enumerate(actions):
        piece = a.parts[1] if a.kind is Kind.OVERLAP_F_B else a  # type: ignore[attr-defined]
        if piece.kind is Kind.B or piece.kind is Kind.W:
            out[piece.stage] = i
    return out


def simulate(plan: Plan, costs: CostTable, comm: CommSemantics | str = CommSemantics.RENDEZVOUS,
             kernel: str = "auto") -> Trace:
    """Run one training step of ``plan`` (lowered) and return the predicted Trace.

    Deterministic: the same plan and costs give the same trace. Raises PlanError (with the grid and
    each rank's stuck action marked) if the plan deadlocks under the chosen semantics. ``kernel``:
    ``auto`` runs static links on the clock-free kernel (:mod:`ppsim.sim.immediate`) and a fabric on
    the lean clocked kernel (:mod:`ppsim.sim.clocked`); ``clocked`` forces that one, ``simpy``
    SimPy itself (the same trace, slower: for comparison).
    """
    if not plan.lowered:
        raise PlanError("simulate() needs a lowered plan: call ppsim.plan.lower(plan) first")
    if len(costs.stages) != plan.num_stages:
        raise PlanError(f"cost table has {len(costs.stages)} stages, the plan {plan.num_stages}")
    return _Simulation(plan, costs, CommSemantics(comm), kernel).run()
