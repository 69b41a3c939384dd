"""The engine: executes a lowered Plan against a CostTable and returns a Trace.

Model
- Every rank is a process (on a :class:`~ppsim.sim.kernel.Kernel`: SimPy itself, the lean clocked
  kernel or the clock-free one, see :func:`simulate`) that runs its actions strictly in plan order:
  it is the compute resource of its device (one action at a time). Each kind of action has its
  handler (the table in ``_Simulation.handlers``); the rank's loop also runs plain compute and
  posted sends and receives inline, on the rank's own clock, so long runs of local work cost no
  call and no event (``inline=False`` sends every action through its handler: the tests hold the
  two to the same traces). A rank synchronises with the kernel's clock only when it must wait.
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

from collections.abc import Callable, Generator
from enum import Enum
from functools import partial
from typing import Any, NamedTuple, cast

from ppsim.costs.table import CostTable, FabricCollective
from ppsim.errors import PlanError
from ppsim.gc_pause import gc_paused
from ppsim.inputs.choices import KernelChoice
from ppsim.plan import Action, Kind, Overlap, Plan, render_grid
from ppsim.sim.allocation import memory_deltas, static_memory_bytes
from ppsim.sim.durations import DURATION_FIELD, compute_ms
from ppsim.sim.fabric import Fabric, Feeder
from ppsim.sim.immediate import ImmediateKernel
from ppsim.sim.kernel import ClockKernel, make_kernel
from ppsim.sim.messages import MessageRoute, MessageTables
from ppsim.sim.network import Flow
from ppsim.trace import Counter, Span, Trace, plan_meta

_SENDS = (Kind.SEND_F, Kind.SEND_B)
_RECEIVES = (Kind.RECV_F, Kind.RECV_B)


class CommSemantics(str, Enum):
    ASYNC = "async"
    EAGER = "eager"
    RENDEZVOUS = "rendezvous"


class _Message:
    """A rendezvous transfer: when each side posted, and when it arrived."""

    __slots__ = ("done", "end", "send_posted", "recv_posted")

    def __init__(self, done: Any) -> None:
        self.done = done
        self.end: float | None = None
        self.send_posted: float | None = None
        self.recv_posted: float | None = None


class _Rank:
    """A rank's state as it runs its actions."""

    __slots__ = ("index", "t", "held", "points", "last_backward", "collective_free", "feeders", "current", "finished",
                 "process")

    def __init__(self, index: int) -> None:
        self.index = index
        self.t = 0.0  #: the rank's own clock, >= the kernel's
        self.held = 0.0  #: activation bytes held
        self.points: list[tuple[float, float]] = [(0.0, 0.0)]
        self.last_backward: dict[int, tuple[float, float]] = {}  #: per stage: its latest B or W
        self.collective_free = 0.0
        self.feeders: dict[int, Feeder] = {}  #: per stage: its gradient reduction's flows, once started
        self.current: Action | None = None  #: the action it waits in (the deadlock report's)
        self.finished = False
        self.process: Generator[Any, Any, None] | None = None  #: its process in the kernel


class _Wait(NamedTuple):
    """A handler's request: wait for ``event``, then call ``then`` (which may ask to wait again)."""

    event: Any
    then: Callable[[], _Wait | None]


Handler = Callable[[_Rank, Any], "_Wait | None"]  #: (the rank, its action)


class _Simulation:
    """One step of a lowered plan on a cost table."""

    def __init__(self, plan: Plan, costs: CostTable, semantics: CommSemantics, kernel: KernelChoice = "auto",
                 inline: bool = True) -> None:
        self.plan, self.costs = plan, costs
        self.rendezvous = semantics is CommSemantics.RENDEZVOUS
        self.blocking_send = semantics is not CommSemantics.ASYNC
        self.semantics = semantics
        self.inline = inline
        stages = costs.stages
        # duration and activation-memory change of every (stage, kind) that computes
        # per stage, by kind (looked up in the rank's loop without building a key)
        self.compute: list[dict[Kind, tuple[float, int, int]]] = [{} for _ in stages]
        for (st, k), (alloc, free) in memory_deltas(plan, costs).items():
            self.compute[st][k] = (getattr(stages[st], DURATION_FIELD[k]), alloc, free)
        self.duration = compute_ms(costs)
        # a fabric's flows need a clock: SimPy's, or the lean clocked kernel (the same order of events,
        # faster); on static links the waits depend only on data, so the clock-free kernel runs the
        # same handlers to the same trace, faster still (tests compare the kernels)
        self.env: Any = make_kernel(kernel, costs.fabric is not None)
        self.fire_at: Callable[[Any, float], None] = self.env.fire_at
        self.kernel = type(self.env).__name__
        self.nbytes = costs.message_bytes
        # a fabric's run has a kernel with a clock (make_kernel)
        self.fabric = Fabric(cast(ClockKernel, self.env), costs.fabric.capacity) if costs.fabric is not None else None
        self.messages = MessageTables(plan, costs, self.nbytes)
        self.arrivals = self.messages.arrivals  #: posted sends: each message's arrival, once known
        self.pair_free = [0.0] * self.messages.links  #: when each rank pair's link is free again (static links)
        self.awaited: dict[int, Any] = {}  #: posted sends: what waits for a message not yet arrived
        self.meetings: dict[int, _Message] = {}  #: rendezvous: each message's two sides
        self.spans: list[Span] = []
        self.make_span = partial(tuple.__new__, Span)
        self.ranks = [_Rank(r) for r in range(plan.num_ranks)]
        # the gradient-norm all-reduce of gradient clipping: one arrival per rank
        self.n_syncing = sum(Kind.CLIP in plan.kinds(r) for r in range(plan.num_ranks))
        self.sync_arrivals: list[float] = []
        self.sync_done = self.env.event()
        self.sync_end: list[float] = []
        # per rank and stage, its last backward piece: where its reduction's buckets start
        self.last_backward_of = ([_last_backward(actions) for actions in plan.actions]
                                 if self.fabric is not None and costs.overlap_grad_reduce else [])
        sends, receives = (self._rendezvous, self._rendezvous) if self.rendezvous else (self._send, self._receive)
        self.handlers: dict[Kind, Handler] = {
            **dict.fromkeys(DURATION_FIELD, self._compute),
            Kind.OVERLAP_F_B: self._overlapped,
            **dict.fromkeys(_SENDS, sends), **dict.fromkeys(_RECEIVES, receives),
            Kind.REDUCE_GRAD: self._reduce_grad_on_fabric if self.fabric is not None else self._reduce_grad,
            Kind.CLIP: self._clip,
        }

    # --- the handlers' spans (the rank's loop appends its inline paths' spans itself) ----------------

    def emit(self, rank: int, lane: str, action: Action | Overlap, start: float, end: float, nbytes: int | None = None,
             peer: int | None = None) -> None:
        self.spans.append(self.make_span((rank, lane, action, start, end, nbytes, peer)))

    # --- the handlers, one per kind ----------------------------------------------------------------------

    def _compute(self, st: _Rank, a: Action) -> None:
        """Local work (F, B, I, W, OPT): occupy the compute lane, allocate at its start and free at its end."""
        op = self.compute[a.stage].get(a.kind)
        if op is None:
            raise PlanError(f"the simulator cannot run action {a}: its stage has no such work")
        self._run_compute(st, a, a.kind, a.stage, *op)

    def _overlapped(self, st: _Rank, a: Overlap) -> None:
        """A forward and a backward overlapped: the forward's activations allocated (and what a
        split backward's input grad takes), the backward's freed; layer by layer (``overlap_layerwise``)
        the one turns into the other through the action, so both count at its end."""
        f, b = a.parts
        _, f_alloc, _ = self.compute[f.stage][f.kind]
        _, b_alloc, b_free = self.compute[b.stage][b.kind]
        if self.costs.overlap_layerwise:
            self._run_compute(st, a, b.kind, b.stage, self.duration(a), 0, f_alloc + b_alloc + b_free)
        else:
            self._run_compute(st, a, b.kind, b.stage, self.duration(a), f_alloc + b_alloc, b_free)

    def _run_compute(self, st: _Rank, a: Action | Overlap, k: Kind, s: int, dur: float, alloc: int, free: int) -> None:
        t = st.t
        if k is Kind.B or k is Kind.W:
            if self.costs.overlap_grad_reduce:
                st.last_backward[s] = (t, t + dur)
                if self.fabric is not None and self.last_backward_of[st.index].get(s) == a:
                    self._start_feeder(st, s, t, t + dur)
        if alloc:
            st.held += alloc
            st.points.append((t, st.held))
        self.emit(st.index, "compute", a, t, t + dur)
        st.t = t + dur
        if free:  # (a layerwise overlap's net change, which may be a gain)
            st.held += free
            st.points.append((st.t, st.held))

    def _send(self, st: _Rank, a: Action) -> _Wait | None:
        """A posted send (``async``: the rank goes on at once; ``eager``: once the data has arrived).
        On static links the pair's link is a FIFO, so the arrival is known now; on a fabric it is a flow."""
        route, key = self.messages.number(a)
        begin = st.t
        posted = begin + route.overhead_ms
        if self.fabric is None:
            busy = self.pair_free[route.pair]
            self.pair_free[route.pair] = on_wire = (busy if busy > posted else posted) + route.wire_ms
            self.arrivals[key] = end = on_wire + route.latency_ms
            waiting = self.awaited.pop(key, None)
            if waiting is not None:
                self.fire_at(waiting, end - self.env.now)
            self.emit(st.index, "send", a, begin, end, self.nbytes, route.peer)
            st.t = end if self.blocking_send else posted
            return None
        costs_fabric = self.costs.fabric
        assert costs_fabric is not None
        routes = costs_fabric.backward if route.backward else costs_fabric.forward
        span = None if self.blocking_send else (st.index, a, begin, route.peer)
        flow = Flow(routes[route.boundary].load, self.nbytes, route.latency_ms,
                    on_done=partial(self._arrived, key, route.pair, span))
        self.fabric.send_at(posted, route.pair, flow)
        if not self.blocking_send:
            st.t = posted
            return None

        def sent() -> None:
            end = self.arrivals[key]
            assert end is not None
            self.emit(st.index, "send", a, begin, end, self.nbytes, route.peer)
            st.t = end

        if self.arrivals[key] is None:  # wait for its arrival (one event per message, for the sender and the receiver)
            return _Wait(self._awaiting(key), sent)
        sent()
        return None

    def _receive(self, st: _Rank, a: Action) -> _Wait | None:
        """A receive of a posted send: wait until the message has arrived, then spend the receive overhead."""
        route, key = self.messages.number(a)

        def received() -> None:
            end = self.arrivals[key]
            assert end is not None
            t = st.t
            end = (t if t > end else end) + route.overhead_ms
            self.emit(st.index, "recv", a, t, end, self.nbytes, route.peer)
            st.t = end

        if self.arrivals[key] is None:
            return _Wait(self._awaiting(key), received)
        received()
        return None

    def _awaiting(self, key: int) -> Any:
        """The event that fires when posted message ``key`` arrives (one per message)."""
        waiting = self.awaited.get(key)
        if waiting is None:
            waiting = self.awaited[key] = self.env.event()
        return waiting

    def _arrived(self, key: int, pair: int, span: tuple[int, Action, float, int] | None, arrival: float) -> None:
        """A posted send's flow has delivered message ``key`` (at ``arrival``): the pair's next flow
        starts, an async send's span is written, and whoever waits for the message goes on."""
        self.fabric.sent(pair)  # type: ignore[union-attr]  # flows exist on a fabric only
        self.arrivals[key] = arrival
        if span is not None:
            r, a, begin, peer = span
            self.spans.append(self.make_span((r, "send", a, begin, arrival, self.nbytes, peer)))
        waiting = self.awaited.pop(key, None)
        if waiting is not None:
            self.fire_at(waiting, arrival - self.env.now)

    def _rendezvous(self, st: _Rank, a: Action) -> _Wait | None:
        """A send or receive that blocks until the peer has posted its side, then both wait for the
        transfer: the first side to post waits for the second, which starts it."""
        route, key = self.messages.number(a)
        begin = st.t
        sending = a.kind in _SENDS
        if sending:  # the sender spends its overhead before the data moves
            st.t += route.overhead_ms
        msg = self.meetings.get(key)
        if msg is None:
            msg = self.meetings[key] = _Message(self.env.event())

        def done() -> None:
            arrival = msg.end
            assert arrival is not None, "done() runs once the message has arrived"
            if sending:
                self.emit(st.index, "send", a, begin, arrival, self.nbytes, route.peer)
                st.t = arrival
            else:
                end = max(st.t, arrival) + route.overhead_ms
                self.emit(st.index, "recv", a, begin, end, self.nbytes, route.peer)
                st.t = end

        other = msg.recv_posted if sending else msg.send_posted
        if other is None:
            if sending:
                msg.send_posted = st.t
            else:
                msg.recv_posted = st.t
            return _Wait(msg.done, done)
        start = max(st.t, other)
        if self.fabric is not None:
            def started() -> _Wait:
                self._flow(route, msg)
                return _Wait(msg.done, done)
            return self._at(start, started)
        msg.end = self._transfer(route, start)
        self.fire_at(msg.done, msg.end - self.env.now)
        done()  # the second side knows the end: its clock jumps there
        return None

    def _transfer(self, route: MessageRoute, start: float) -> float:
        """Book the route's link (a FIFO) from ``start``; return the arrival time."""
        begin = max(start, self.pair_free[route.pair])
        self.pair_free[route.pair] = begin + route.wire_ms
        return begin + route.wire_ms + route.latency_ms

    def _flow(self, route: MessageRoute, msg: _Message) -> None:
        """Start a rendezvous message's flow on the fabric now; it fires ``msg.done`` when it arrives."""
        fabric, costs_fabric = self.fabric, self.costs.fabric
        assert fabric is not None and costs_fabric is not None

        def arrived(arrival: float) -> None:
            fabric.sent(route.pair)
            msg.end = arrival
            self.fire_at(msg.done, arrival - self.env.now)

        routes = costs_fabric.backward if route.backward else costs_fabric.forward
        fabric.send(route.pair, Flow(routes[route.boundary].load, self.nbytes, route.latency_ms, on_done=arrived))

    def _at(self, when: float, then: Callable[[], _Wait | None]) -> _Wait | None:
        """Bring the kernel's clock to the rank's ``when`` (flows start in time order), then ``then``."""
        if when <= self.env.now:
            return then()
        return _Wait(self.env.timeout(when - self.env.now), then)

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
        st.feeders[stage] = Feeder(self.fabric, collective, [b0 + (j + 1) / n * (b1 - b0) for j in range(n)], after)  # type: ignore[arg-type]  # a collective exists on a fabric only

    @staticmethod
    def _last_feeder(st: _Rank) -> Any | None:
        return next(reversed(st.feeders.values())).done if st.feeders else None

    def _reduce_grad_on_fabric(self, st: _Rank, a: Action) -> _Wait | None:
        collective = self._collective(a.stage)
        if collective is None:
            self._reduce_grad(st, a)  # nothing to move: as without a fabric
            return None
        c = self.costs.stages[a.stage]
        feeder = st.feeders.get(a.stage)
        if feeder is None:  # not overlapped: all buckets from now, after the rank's earlier reductions
            start = max(st.t, st.collective_free)
            feeder = st.feeders[a.stage] = Feeder(self.fabric, collective, [start] * collective.buckets,  # type: ignore[arg-type]  # on a fabric
                                                  self._last_feeder(st))

        def finish() -> None:
            begin = feeder.first if feeder.first is not None else st.t
            self.emit(st.index, "collective", a, begin, feeder.end, c.grad_bytes)
            st.collective_free = feeder.end
            st.t = max(st.t, feeder.end)

        if feeder.done.triggered:
            finish()
            return None
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
            clip = self.costs.fabric.clip if self.fabric is not None else None  # type: ignore[union-attr]  # fabric implies costs.fabric
            if clip is None:  # a fixed time
                self.sync_end.append(at + self.costs.clip_allreduce_ms)
                self.fire_at(self.sync_done, self.sync_end[0] - self.env.now)
                finish()
                return None
            # a flow on the pipeline's ring, from when the last rank got there
            self.fabric.call_later(max(0.0, at - self.env.now), partial(self._clip_flow, clip))  # type: ignore[union-attr]  # on a fabric
        return _Wait(self.sync_done, finish)

    def _clip_flow(self, clip: FabricCollective) -> None:
        """Start the gradient norm's all-reduce on the fabric; its arrival ends every rank's CLIP."""
        def arrived(arrival: float) -> None:
            self.sync_end.append(arrival)
            self.fire_at(self.sync_done, arrival - self.env.now)

        self.fabric.start(Flow(clip.route.load, clip.volume_bytes, clip.steps * clip.route.latency_ms,  # type: ignore[union-attr]  # on a fabric
                               on_done=arrived))

    # --- the ranks and the run --------------------------------------------------------------------------

    def _rank_process(self, st: _Rank) -> Generator[Any, Any, None]:
        """Run the rank's actions in plan order: inline where they are plain compute or posted sends and
        receives (unless ``inline`` is off), through their handler otherwise."""
        compute, handlers = self.compute, self.handlers
        overlap = Kind.OVERLAP_F_B
        SEND_F, SEND_B, RECV_F, RECV_B = Kind.SEND_F, Kind.SEND_B, Kind.RECV_F, Kind.RECV_B
        # posted sends and their receives inline: on static links a FIFO per rank pair, on a fabric a flow
        posted = self.inline and not self.rendezvous
        # plain compute inline: what _run_compute does, less the bookkeeping of overlapped gradient
        # reductions (which take the handler)
        plain = self.inline and not self.costs.overlap_grad_reduce
        fabric = self.fabric
        forward_routes, backward_routes = (self.costs.fabric.forward, self.costs.fabric.backward) if fabric else ((), ())  # type: ignore[union-attr]  # fabric implies costs.fabric
        eager = self.blocking_send
        arrivals, awaited, pair_free = self.arrivals, self.awaited, self.pair_free
        messages = self.messages
        send_f, send_b = messages.send_f, messages.send_b
        # a receive reads three fields of its route: unpacked from a 3-tuple in the loop
        recv_f, recv_b = ([None if x is None else (x.first, x.peer, x.overhead_ms) for x in table]
                          for table in (messages.recv_f, messages.recv_b))
        nbytes, env, fire_at, new_event = self.nbytes, self.env, self.fire_at, self.env.event
        # the clock-free kernel parks a receive on its message (no event): the send resumes it
        parks = isinstance(env, ImmediateKernel)
        resume = env.resume if parks else None
        r, points, append, tnew = st.index, st.points, self.spans.append, tuple.__new__  # tnew(Span, (...)): a Span
        # the rank's clock and held bytes live in locals (st.t, st.held) and go back to ``st`` around
        # what reads or changes them there: the handlers, and the waits
        t, held = st.t, st.held
        for a in self.plan.actions[st.index]:
            s, k, mb = a
            if posted and (k is SEND_F or k is SEND_B):
                first, b, backward, peer, pair, overhead_ms, wire_ms, latency_ms = (send_f if k is SEND_F else send_b)[s]  # type: ignore[misc]  # the plan was validated
                key = first + mb  # type: ignore[operator]  # a message's action names its micro-batch
                begin = t
                posted_at = t + overhead_ms
                if fabric is None:  # the pair's link is a FIFO: the arrival is known now
                    busy = pair_free[pair]
                    pair_free[pair] = on_wire = (busy if busy > posted_at else posted_at) + wire_ms
                    arrivals[key] = end = on_wire + latency_ms
                    if awaited and (waiting := awaited.pop(key, None)) is not None:
                        if parks:
                            resume(waiting)  # type: ignore[misc]  # a receiver parked on it
                        else:
                            fire_at(waiting, end - env.now)
                    append(tnew(Span, (r, "send", a, begin, end, nbytes, peer)))
                    t = end if eager else posted_at
                    continue
                # on a fabric, a flow from the rank's time on; it records its arrival when done
                route = backward_routes[b] if backward else forward_routes[b]
                flow = Flow(route.load, nbytes, latency_ms,
                            on_done=partial(self._arrived, key, pair, None if eager else (r, a, begin, peer)))
                fabric.send_at(posted_at, pair, flow)
                if not eager:
                    t = posted_at
                    continue
                arrival = arrivals[key]
                if arrival is None:  # wait for it (one event per message, for an eager sender and the receiver)
                    st.current, st.t = a, t
                    if (waiting := awaited.get(key)) is None:
                        waiting = awaited[key] = new_event()
                    yield waiting
                    arrival = arrivals[key]
                append(tnew(Span, (r, "send", a, begin, arrival, nbytes, peer)))
                t = arrival  # type: ignore[assignment]  # it has arrived
                continue
            if posted and (k is RECV_F or k is RECV_B):
                first, peer, overhead_ms = (recv_f if k is RECV_F else recv_b)[s]  # type: ignore[misc]  # the plan was validated
                key = first + mb  # type: ignore[operator]  # a message's action names its micro-batch
                arrival = arrivals[key]
                if arrival is None and parks:  # parked until the send, which hands the rank back to the kernel
                    awaited[key] = st.process
                    st.current, st.t = a, t
                    yield None
                    arrival = arrivals[key]
                elif arrival is None:
                    st.current, st.t = a, t
                    if (waiting := awaited.get(key)) is None:
                        waiting = awaited[key] = new_event()
                    yield waiting
                    arrival = arrivals[key]
                end = (t if t > arrival else arrival) + overhead_ms  # type: ignore[operator]  # it has arrived
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
            st.t, st.held = t, held  # the handlers read and change the rank's state
            handler = handlers.get(k)
            if handler is None:  # pragma: no cover - every kind has a handler
                raise PlanError(f"the simulator cannot run action {a}")
            wait = handler(st, a)
            while wait is not None:
                st.current = a
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
        stuck = {st.index: self.plan.actions[st.index].index(st.current) if st.current is not None else 0
                 for st in self.ranks if not st.finished}
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
        if any(c.activation_bytes or c.weight_grad_pending_bytes for c in costs.stages):
            counters = [Counter(st.index, "activation_bytes", "bytes", tuple(st.points)) for st in self.ranks]
        static = static_memory_bytes(plan, costs)
        if static is not None:
            counters += [Counter(st.index, "memory_bytes", "bytes", _shifted(st.points, static[st.index]["total"]))
                         for st in self.ranks]
        meta = plan_meta(plan, source="simulated", clock="simulated", comm=self.semantics.value, message_bytes=self.nbytes)
        meta["p2p_ms"] = [costs.p2p_ms(b) for b in range(plan.num_stages - 1)]
        meta["network"] = "flows" if costs.fabric is not None else "static"
        if costs.overlap_layerwise and Kind.OVERLAP_F_B in plan.kinds():
            meta["overlap_layerwise"] = True
        if costs.input_grad_frees and Kind.W in plan.kinds():
            meta["input_grad_frees"] = True
        if static is not None:
            meta["memory_static_bytes"] = static
            if Kind.W in plan.kinds() and any(c.weight_grad_pending_bytes for c in costs.stages):
                meta["weight_grad_pending_bytes"] = [c.weight_grad_pending_bytes for c in costs.stages]
        return Trace(spans=self.spans, meta=meta, counters=counters)


def _shifted(points: list[tuple[float, float]], by: float) -> tuple[tuple[float, float], ...]:
    """``points`` with every value raised by ``by`` (the activations on top of the static memory)."""
    return tuple([(t, v + by) for t, v in points])


def _last_backward(actions: tuple[Action, ...]) -> dict[int, Action]:
    """Per stage, the rank's last backward piece (B or W, alone or in an overlapped action: that action)."""
    out = {}
    for a in actions:
        piece = a.parts[1] if a.kind is Kind.OVERLAP_F_B else a
        if piece.kind is Kind.B or piece.kind is Kind.W:
            out[piece.stage] = a
    return out


def simulate(plan: Plan, costs: CostTable, comm: CommSemantics | str = CommSemantics.RENDEZVOUS,
             kernel: KernelChoice = "auto", inline: bool = True) -> Trace:
    """Run one training step of ``plan`` (lowered) and return the predicted Trace.

    Deterministic: the same plan and costs give the same trace. Raises PlanError (with the grid and
    each rank's stuck action marked) if the plan deadlocks under the chosen semantics. ``kernel``:
    ``auto`` runs static links on the clock-free kernel (:mod:`ppsim.sim.immediate`) and a fabric on
    the lean clocked kernel (:mod:`ppsim.sim.clocked`); ``clocked`` forces that one, ``simpy``
    SimPy itself (the same trace, slower: for comparison). ``inline=False`` runs every action
    through its handler instead of the rank's inline paths (the same trace, slower: for the tests).
    """
    if not plan.lowered:
        raise PlanError("simulate() needs a lowered plan: call ppsim.plan.lower(plan) first")
    if len(costs.stages) != plan.num_stages:
        raise PlanError(f"cost table has {len(costs.stages)} stages, the plan {plan.num_stages}")
    return _Simulation(plan, costs, CommSemantics(comm), kernel, inline).run()
