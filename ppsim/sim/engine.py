"""The SimPy engine: executes a lowered Plan against a CostTable and returns a Trace.

Model
- Every rank is a SimPy process that runs its actions strictly in plan order: it is the compute
  resource of its device (one action at a time).
- Every directed link between two ranks is a FIFO resource: a transfer occupies it for
  bytes / bandwidth, and arrives ``latency`` after that (latency is pipelined).
- A receive blocks its rank until the data has arrived. What a send does is the communication
  semantics (``CommSemantics``):
    * ``async``: the send is posted and the rank goes on at once (unbounded buffering);
    * ``eager``: the send blocks its rank until the transfer has completed, but not for the peer;
    * ``rendezvous``: the send blocks until the peer has posted the matching receive, then both
      wait for the transfer (gloo and NCCL send/recv pairs behave like this).
- End of step: ``REDUCE_GRAD`` (all-reduce across data-parallel replicas) occupies the collective
  lane and blocks the rank; ``OPT`` (optimizer step) occupies the compute lane.

The engine knows no schedule: it only executes actions. Ranks keep a local clock and only
synchronise with SimPy's clock when they interact with another rank, so long runs of local work
cost one event, not one per action.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Generator

import simpy
from simpy.core import NORMAL

from ppsim.costs import CostTable
from ppsim.errors import PlanError
from ppsim.passes import render_grid
from ppsim.plan import Action, Kind, Plan
from ppsim.trace import Counter, Span, Trace
from ppsim.util import gc_paused


class CommSemantics(str, Enum):
    ASYNC = "async"
    EAGER = "eager"
    RENDEZVOUS = "rendezvous"


# op codes of the per-rank program the engine runs
_COMPUTE, _SEND, _RECV, _COLLECTIVE = 0, 1, 2, 3


def _fire_at(env: simpy.Environment, event: simpy.Event, delay: float) -> None:
    """Trigger ``event`` successfully ``delay`` from now (a Timeout on an event created earlier)."""
    event._ok = True  # noqa: SLF001 - SimPy's own Event.succeed does exactly this, without a delay
    event._value = None  # noqa: SLF001
    env.schedule(event, NORMAL, delay)


class _Message:
    __slots__ = ("done", "end", "send_posted", "recv_posted")

    def __init__(self, done: simpy.Event) -> None:
        self.done = done
        self.end: float | None = None
        self.send_posted: float | None = None
        self.recv_posted: float | None = None


def _program(plan: Plan, costs: CostTable) -> list[list[tuple[Any, ...]]]:
    """Translate each rank's actions into (op, duration, action, key, peer, alloc, free) tuples.

    A message is keyed by its send: (sending stage, 0 for activations / 1 for grads, micro-batch).
    """
    if len(costs.stages) != plan.num_stages:
        raise PlanError(f"cost table has {len(costs.stages)} stages, the plan {plan.num_stages}")
    F, B, I, W, OPT, RG = Kind.F, Kind.B, Kind.I, Kind.W, Kind.OPT, Kind.REDUCE_GRAD
    SF, SB, RF = Kind.SEND_F, Kind.SEND_B, Kind.RECV_F
    split = {(a.stage, a.microbatch) for r in plan.actions for a in r if a.kind is W}
    where = plan.stage_to_rank
    stage_costs = costs.stages
    progs: list[list[tuple[Any, ...]]] = []
    for actions in plan.actions:
        prog: list[tuple[Any, ...]] = []
        add = prog.append
        for a in actions:
            s, k, mb = a
            c = stage_costs[s]
            if k is F:
                add((_COMPUTE, c.forward_ms, a, None, None, c.activation_bytes, 0))
            elif k is B:
                add((_COMPUTE, c.backward_ms, a, None, None, 0, -c.activation_bytes))
            elif k is I:
                free = 0 if (s, mb) in split else -c.activation_bytes
                add((_COMPUTE, c.input_grad_ms, a, None, None, 0, free))
            elif k is W:
                add((_COMPUTE, c.weight_grad_ms, a, None, None, 0, -c.activation_bytes))
            elif k is OPT:
                add((_COMPUTE, c.optimizer_ms, a, None, None, 0, 0))
            elif k is RG:
                add((_COLLECTIVE, c.allreduce_ms, a, None, None, c.grad_bytes, 0))
            elif k is SF:
                add((_SEND, 0.0, a, (s, 0, mb), where[s + 1], 0, 0))
            elif k is SB:
                add((_SEND, 0.0, a, (s, 1, mb), where[s - 1], 0, 0))
            elif k is RF:
                add((_RECV, 0.0, a, (s - 1, 0, mb), where[s - 1], 0, 0))
            else:  # RECV_B
                add((_RECV, 0.0, a, (s + 1, 1, mb), where[s + 1], 0, 0))
        progs.append(prog)
    return progs


def simulate(plan: Plan, costs: CostTable, comm: CommSemantics | str = CommSemantics.RENDEZVOUS) -> Trace:
    """Run one training step of ``plan`` (lowered) and return the predicted Trace.

    Deterministic: the same plan and costs give the same trace. Raises PlanError (with the grid and
    each rank's stuck action marked) if the plan deadlocks under the chosen semantics.
    """
    if not plan.lowered:
        raise PlanError("simulate() needs a lowered plan: call ppsim.passes.lower(plan) first")
    semantics = CommSemantics(comm)
    rendezvous = semantics is CommSemantics.RENDEZVOUS
    blocking_send = semantics is not CommSemantics.ASYNC
    progs = _program(plan, costs)
    env = simpy.Environment()
    nbytes = costs.message_bytes
    n_boundaries = max(1, plan.num_stages - 1)
    ser = [costs.link(b).serialization_ms(nbytes) for b in range(n_boundaries)]
    lat = [costs.link(b).latency_ms for b in range(n_boundaries)]
    link_free: dict[tuple[int, int], float] = {}
    messages: dict[tuple[int, int, int | None], _Message] = {}
    rows: list[tuple[Any, ...]] = []
    mem_points: list[list[tuple[float, float]]] = [[(0.0, 0.0)] for _ in progs]
    position = [0] * len(progs)
    finished = [False] * len(progs)

    def transfer(src: int, dst: int, key: tuple[int, int, Any], start: float) -> float:
        """Book the link src -> dst for message ``key`` from ``start``; return the arrival time."""
        boundary = key[0] - key[1]  # activations cross s -> s+1, grads s -> s-1
        ser_ms = ser[boundary]
        pair = (src, dst)
        begin = max(start, link_free.get(pair, 0.0))
        link_free[pair] = begin + ser_ms
        return begin + ser_ms + lat[boundary]

    def rank_process(r: int) -> Generator[simpy.Event, Any, None]:
        # A rank runs ahead of SimPy's clock on local work (local time t >= env.now) and only
        # synchronises when it must wait for a peer that has not yet posted its side.
        t = 0.0
        held = 0.0
        points = mem_points[r]
        append = rows.append
        for i, (op, dur, a, key, peer, alloc, free) in enumerate(progs[r]):
            if op == _COMPUTE:
                if alloc:
                    held += alloc
                    points.append((t, held))
                append((r, "compute", a, t, t + dur, None, None))
                t += dur
                if free:
                    held += free
                    points.append((t, held))
                continue
            if op == _COLLECTIVE:
                append((r, "collective", a, t, t + dur, alloc, None))
                t += dur
                continue
            msg = messages.get(key)
            if msg is None:
                msg = messages[key] = _Message(env.event())
            if op == _SEND:
                lane = "send"
                if rendezvous:
                    if msg.recv_posted is None and t > env.now:
                        position[r] = i
                        yield env.timeout(t - env.now)
                    msg.send_posted = t
                    if msg.recv_posted is None:
                        position[r] = i
                        yield msg.done
                    else:
                        msg.end = transfer(r, peer, key, t)
                        _fire_at(env, msg.done, msg.end - env.now)
                    end = msg.end
                else:
                    msg.end = end = transfer(r, peer, key, t)
                    _fire_at(env, msg.done, end - env.now)
                    if not blocking_send:
                        append((r, lane, a, t, end, nbytes, peer))
                        continue
            else:
                lane = "recv"
                if msg.end is None and msg.send_posted is None and t > env.now:
                    position[r] = i
                    yield env.timeout(t - env.now)
                msg.recv_posted = t
                if rendezvous and msg.send_posted is not None and msg.end is None:
                    msg.end = transfer(peer, r, key, t)
                    _fire_at(env, msg.done, msg.end - env.now)
                if msg.end is None:
                    position[r] = i
                    yield msg.done
                end = max(t, msg.end)  # type: ignore[type-var]
            append((r, lane, a, t, end, nbytes, peer))
            t = end  # type: ignore[assignment]
        finished[r] = True

    for r in range(len(progs)):
        env.process(rank_process(r))
    with gc_paused():
        env.run()
    stuck = {r: position[r] for r in range(len(progs)) if not finished[r]}
    if stuck:
        where = ", ".join(f"rank {r} at {plan.actions[r][i]}" for r, i in stuck.items())
        raise PlanError(
            f"the plan deadlocks with {semantics.value} communication: {where}",
            detail=render_grid(plan.actions, stuck),
        )
    make = Span._make
    spans = [make(row) for row in rows]
    counters = []
    if any(c.activation_bytes for c in costs.stages):
        counters = [Counter(r, "activation_bytes", "bytes", tuple(points)) for r, points in enumerate(mem_points)]
    meta = {
        "source": "simulated",
        "clock": "simulated",
        "time_unit": "ms",
        "schedule": plan.schedule,
        "num_ranks": plan.num_ranks,
        "num_microbatches": plan.num_microbatches,
        "chunks": plan.chunks,
        "stage_to_rank": list(plan.stage_to_rank),
        "comm": semantics.value,
        "message_bytes": nbytes,
        "p2p_ms": [costs.p2p_ms(b) for b in range(plan.num_stages - 1)],
    }
    return Trace(spans=spans, meta=meta, counters=counters)
