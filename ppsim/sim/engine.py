"""The SimPy engine: executes a lowered Plan against a CostTable and returns a Trace.

Model
- Every rank is a SimPy process that runs its actions strictly in plan order: it is the compute
  resource of its device (one action at a time).
- Every directed link between two ranks is a FIFO resource: a transfer occupies it for
  bytes / bandwidth, and arrives ``latency`` after that (latency is pipelined).
- A receive blocks its rank until the data has arrived. Around a transfer the sender spends the
  link's send overhead before the data moves and the receiver its receive overhead after the data
  has arrived. What a send does is the communication semantics (``CommSemantics``):
    * ``async``: the send is posted and the rank goes on at once (unbounded buffering);
    * ``eager``: the send blocks its rank until the transfer has completed, but not for the peer;
    * ``rendezvous``: the send blocks until the peer has posted the matching receive, then both
      wait for the transfer (gloo and NCCL send/recv pairs behave like this).
- End of step: ``REDUCE_GRAD`` (all-reduce across data-parallel replicas) occupies the collective
  lane and blocks the rank until it is done; with ``CostTable.overlap_grad_reduce`` its buckets
  start while the stage's last backward (or weight grad) produces them, so only the tail is
  exposed; ``CLIP`` (gradient clipping) does the rank's own part (its local gradient norm), then
  waits on the collective lane until every rank of the pipeline has got
  there and the norm is all-reduced (``CostTable.clip_allreduce_ms``): the slowest stage holds
  up the optimizer step of all the others; ``OPT`` (optimizer step) occupies the compute lane.

The engine knows no schedule: it only executes actions. Ranks keep a local clock and only
synchronise with SimPy's clock when they interact with another rank, so long runs of local work
cost one event, not one per action.
"""

from __future__ import annotations

from collections.abc import Generator
from enum import Enum
from functools import partial
from typing import Any

import simpy
from simpy.core import NORMAL

from ppsim.costs.table import CostTable
from ppsim.errors import PlanError
from ppsim.gc_pause import gc_paused
from ppsim.plan import Kind, Overlap, Plan, render_grid
from ppsim.sim.allocation import memory_deltas, static_memory_bytes
from ppsim.sim.durations import DURATION_FIELD, compute_ms
from ppsim.trace import Counter, Span, Trace, plan_meta


class CommSemantics(str, Enum):
    ASYNC = "async"
    EAGER = "eager"
    RENDEZVOUS = "rendezvous"


def _fire_at(env: simpy.Environment, event: simpy.Event, delay: float) -> None:
    """Trigger ``event`` successfully ``delay`` from now (a Timeout on an event created earlier)."""
    event._ok = True  # SimPy's own Event.succeed does exactly this, without a delay
    event._value = None
    env.schedule(event, NORMAL, delay)


class _Message:
    """One transfer, keyed by its send: (sending stage, 0 for activations / 1 for grads, micro-batch)."""

    __slots__ = ("done", "end", "send_posted", "recv_posted")

    def __init__(self, done: simpy.Event) -> None:
        self.done = done
        self.end: float | None = None
        self.send_posted: float | None = None
        self.recv_posted: float | None = None


def simulate(plan: Plan, costs: CostTable, comm: CommSemantics | str = CommSemantics.RENDEZVOUS) -> Trace:
    """Run one training step of ``plan`` (lowered) and return the predicted Trace.

    Deterministic: the same plan and costs give the same trace. Raises PlanError (with the grid and
    each rank's stuck action marked) if the plan deadlocks under the chosen semantics.
    """
    if not plan.lowered:
        raise PlanError("simulate() needs a lowered plan: call ppsim.plan.lower(plan) first")
    if len(costs.stages) != plan.num_stages:
        raise PlanError(f"cost table has {len(costs.stages)} stages, the plan {plan.num_stages}")
    semantics = CommSemantics(comm)
    rendezvous = semantics is CommSemantics.RENDEZVOUS
    blocking_send = semantics is not CommSemantics.ASYNC
    B, W, CLIP, OVERLAP = Kind.B, Kind.W, Kind.CLIP, Kind.OVERLAP_F_B
    SEND_F, SEND_B, RECV_F, RECV_B = Kind.SEND_F, Kind.SEND_B, Kind.RECV_F, Kind.RECV_B
    stage_costs = costs.stages
    # duration and activation-memory change of every (stage, kind) that computes
    compute: dict[tuple[int, Kind], tuple[float, int, int]] = {
        (st, k): (getattr(stage_costs[st], DURATION_FIELD[k]), alloc, free)
        for (st, k), (alloc, free) in memory_deltas(plan, costs).items()
    }
    duration = compute_ms(costs)

    def overlapped_op(a: Overlap) -> tuple[float, int, int]:
        """(duration, allocated, freed) of an overlapped forward and backward."""
        f, b = a.parts
        return duration(a), compute[(f.stage, f.kind)][1], compute[(b.stage, b.kind)][2]

    where = plan.stage_to_rank
    env = simpy.Environment()
    nbytes = costs.message_bytes
    n_boundaries = max(1, plan.num_stages - 1)
    # per stage boundary: time on the wire, latency, what the sender spends before and the receiver after
    wire_ms = [costs.link(b).serialization_ms(nbytes) for b in range(n_boundaries)]
    latency_ms = [costs.link(b).latency_ms for b in range(n_boundaries)]
    send_overhead_ms = [costs.link(b).send_overhead_ms for b in range(n_boundaries)]
    recv_overhead_ms = [costs.link(b).recv_overhead_ms for b in range(n_boundaries)]
    link_free: dict[tuple[int, int], float] = {}
    messages: dict[tuple[int, int, int | None], _Message] = {}
    spans: list[Span] = []
    make_span = partial(tuple.__new__, Span)
    mem_points: list[list[tuple[float, float]]] = [[(0.0, 0.0)] for _ in plan.actions]
    position = [0] * plan.num_ranks
    finished = [False] * plan.num_ranks
    sync_ms = costs.clip_allreduce_ms
    overlap = costs.overlap_grad_reduce
    # the gradient-norm all-reduce of gradient clipping: one arrival per rank
    sync_arrivals: list[float] = []
    sync_done = env.event()
    sync_end: list[float] = []

    def transfer(src: int, dst: int, key: tuple[int, int, Any], start: float) -> float:
        """Book the link src -> dst for message ``key`` from ``start``; return the arrival time."""
        boundary = key[0] - key[1]  # activations cross s -> s+1, grads s -> s-1
        on_wire = wire_ms[boundary]
        pair = (src, dst)
        begin = max(start, link_free.get(pair, 0.0))
        link_free[pair] = begin + on_wire
        return begin + on_wire + latency_ms[boundary]

    def rank_process(r: int) -> Generator[simpy.Event, Any, None]:
        # A rank keeps its own clock t >= env.now and only yields to SimPy when it must wait for a
        # peer that has not yet posted its side of a message. Whoever posts second knows both post
        # times, so it computes the transfer and wakes the first at its end. Every link is booked
        # in the order its messages appear on both ranks, so bookings are in time order.
        t = 0.0
        held = 0.0
        last_backward: dict[int, tuple[float, float]] = {}  # per stage: its latest B or W
        collective_free = 0.0
        points = mem_points[r]
        append = spans.append
        for i, a in enumerate(plan.actions[r]):
            s, k, mb = a
            if k is OVERLAP:  # (forward, kind, backward): the forward's activations, the backward's freed
                op = overlapped_op(a)
                s, k = mb.stage, mb.kind  # the backward's: what a gradient all-reduce may overlap with
            else:
                op = compute.get((s, k))
            if op is not None:
                dur, alloc, free = op
                if overlap and (k is B or k is W):
                    last_backward[s] = (t, t + dur)
                if alloc:
                    held += alloc
                    points.append((t, held))
                append(make_span((r, "compute", a, t, t + dur, None, None)))
                t += dur
                if free:
                    held += free
                    points.append((t, held))
                continue
            if k is Kind.REDUCE_GRAD:
                c = stage_costs[s]
                bwd = last_backward.get(s)
                if overlap and bwd is not None:
                    # bucket j is ready once the last backward has produced (j + 1) / n of the
                    # gradients; buckets go out one after the other on the collective lane
                    b0, b1 = bwd
                    n = max(1, c.allreduce_buckets)
                    each = c.allreduce_ms / n
                    first = free = max(collective_free, b0 + (b1 - b0) / n)
                    for j in range(n):
                        free = max(free, b0 + (j + 1) / n * (b1 - b0)) + each
                    append(make_span((r, "collective", a, first, free, c.grad_bytes, None)))
                    collective_free = free
                    t = max(t, free)
                else:
                    append(make_span((r, "collective", a, t, t + c.allreduce_ms, c.grad_bytes, None)))
                    t += c.allreduce_ms
                    collective_free = t
                continue
            if k is CLIP:
                start = t
                t += stage_costs[s].clip_ms
                sync_arrivals.append(t)
                if len(sync_arrivals) == n_syncing:  # the last to arrive completes the all-reduce
                    sync_end.append(max(sync_arrivals) + sync_ms)
                    _fire_at(env, sync_done, sync_end[0] - env.now)
                else:
                    position[r] = i
                    yield sync_done
                t = sync_end[0]
                append(make_span((r, "collective", a, start, t, 4, None)))
                continue
            if k is SEND_F:
                key, peer, sending = (s, 0, mb), where[s + 1], True
            elif k is SEND_B:
                key, peer, sending = (s, 1, mb), where[s - 1], True
            elif k is RECV_F:
                key, peer, sending = (s - 1, 0, mb), where[s - 1], False
            elif k is RECV_B:
                key, peer, sending = (s + 1, 1, mb), where[s + 1], False
            else:  # pragma: no cover - every kind is handled above
                raise PlanError(f"the simulator cannot run action {a}")
            msg = messages.get(key)
            if msg is None:
                msg = messages[key] = _Message(env.event())
            begin = t
            boundary = key[0] - key[1]
            if sending:
                t += send_overhead_ms[boundary]
            if rendezvous:
                # the transfer starts when the second side posts; the first side waits for it
                other = msg.recv_posted if sending else msg.send_posted
                if other is None:
                    if sending:
                        msg.send_posted = t
                    else:
                        msg.recv_posted = t
                    position[r] = i
                    yield msg.done
                    end = msg.end
                else:
                    src, dst = (r, peer) if sending else (peer, r)
                    end = msg.end = transfer(src, dst, key, max(t, other))
                    _fire_at(env, msg.done, end - env.now)
            elif sending:
                end = msg.end = transfer(r, peer, key, t)
                if msg.recv_posted is not None:  # the receiver is already waiting
                    _fire_at(env, msg.done, end - env.now)
                if not blocking_send:
                    append(make_span((r, "send", a, begin, end, nbytes, peer)))
                    continue  # the rank goes on after its send overhead
            else:
                if msg.end is None:
                    msg.recv_posted = t
                    position[r] = i
                    yield msg.done
                end = max(t, msg.end)  # type: ignore[type-var]
            if not sending:
                end += recv_overhead_ms[boundary]  # type: ignore[operator]
            append(make_span((r, "send" if sending else "recv", a, begin, end, nbytes, peer)))
            t = end  # type: ignore[assignment]
        finished[r] = True

    n_syncing = sum(1 for actions in plan.actions if any(a.kind is CLIP for a in actions))
    with gc_paused():
        for r in range(plan.num_ranks):
            env.process(rank_process(r))
        env.run()
    stuck = {r: position[r] for r in range(plan.num_ranks) if not finished[r]}
    if stuck:
        where = ", ".join(f"rank {r} at {plan.actions[r][i]}" for r, i in stuck.items())
        raise PlanError(
            f"the plan deadlocks with {semantics.value} communication: {where}",
            detail=render_grid(plan.actions, stuck),
        )
    counters = []
    if any(c.activation_bytes for c in costs.stages):
        counters = [Counter(r, "activation_bytes", "bytes", tuple(points)) for r, points in enumerate(mem_points)]
    static = static_memory_bytes(plan, costs)
    if static is not None:
        counters += [
            Counter(r, "memory_bytes", "bytes", tuple((t, v + static[r]["total"]) for t, v in points))
            for r, points in enumerate(mem_points)
        ]
    meta = plan_meta(plan, source="simulated", clock="simulated", comm=semantics.value, message_bytes=nbytes)
    meta["p2p_ms"] = [costs.p2p_ms(b) for b in range(plan.num_stages - 1)]
    if static is not None:
        meta["memory_static_bytes"] = static
    return Trace(spans=spans, meta=meta, counters=counters)
