"""``auto``'s orders of one stage per rank: the candidates whose activations fit each rank's cap.

The zero-bubble authors' scheduler tries eight flag settings of one greedy rule under one memory
cap with every stage's costs set to their median. Here the search is wider and uses the stage's
own costs and message latencies:

- the hand-written schedules of one stage per rank (1F1B, GPipe, ZB-H1, ZB-H2), where they fit;
- the list scheduler (:mod:`~ppsim.plan.schedules.list_scheduler`) under every rule of
  :func:`rules` (backward first, oldest micro-batch first, forward first, longest remaining path
  first), with weight grads deferred to the gaps or not, at caps from p micro-batches up to the
  largest all ranks can hold, and at each rank's own budget (a rank with memory to spare holds
  more than the tightest).

Each candidate comes with the makespan of its own timeline (durations and latencies, messages
free of bandwidth); the caller (:func:`ppsim.prediction.auto.auto_build`) simulates the best of them,
the hand-written ones, and the schedules of several chunks per rank on their own costs, and keeps
the fastest that fits. :func:`lower_bound` is a step no plan of one stage per rank can beat.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ppsim.errors import ScheduleError
from ppsim.plan.action import Action, Kind
from ppsim.plan.deps import ideal_times
from ppsim.plan.held import peak_held
from ppsim.plan.plan import Plan, loop_placement
from ppsim.plan.schedules.base import make_plan
from ppsim.plan.schedules.fill_drain import gpipe
from ppsim.plan.schedules.list_scheduler import Priority, Timing, list_schedule
from ppsim.plan.schedules.one_f_one_b import one_f_one_b
from ppsim.plan.schedules.zero_bubble import zb_h1, zb_h2

NAME = "auto"
HAND_WRITTEN: dict[str, Callable[[int, int, int], Plan]] = {"zb-h1": zb_h1, "zb-h2": zb_h2, "1f1b": one_f_one_b,
                                                            "gpipe": gpipe}


@dataclass(frozen=True)
class Candidate:
    """One plan ``auto`` considered: how it was made, its order and its own timeline's makespan."""

    how: str
    plan: Plan
    makespan: float
    hand_written: bool = False
    meta: dict[str, object] = field(default_factory=dict, compare=False)


def remaining_path(p: int, timing: Timing, split: bool) -> dict[tuple[int, Kind], float]:
    """For each (stage, kind): the longest chain of work from its start to the end of the step."""
    out: dict[tuple[int, Kind], float] = {}
    back = Kind.I if split else Kind.B
    for s in range(p):
        if split:
            out[(s, Kind.W)] = timing.weight_grad[s]
    for s in range(p):  # backwards run from the last stage to the first
        lag = timing.latency[s - 1] if s > 0 else 0.0
        downstream = out[(s - 1, back)] + lag if s > 0 else 0.0
        mine = timing.input_grad[s] if split else timing.backward[s]
        out[(s, back)] = mine + max(downstream, out.get((s, Kind.W), 0.0))
    for s in reversed(range(p)):
        lag = timing.latency[s] if s < p - 1 else 0.0
        onward = out[(s + 1, Kind.F)] + lag if s < p - 1 else 0.0
        out[(s, Kind.F)] = timing.forward[s] + max(onward, out[(s, back)])
    return out


def rules(p: int, timing: Timing, split: bool) -> dict[str, Priority]:
    """The priority rules the search tries (smaller first)."""
    tail = remaining_path(p, timing, split)
    order = {Kind.B: 0, Kind.I: 0, Kind.F: 1, Kind.W: 2}
    return {
        "backward first": lambda a: (order[a.kind], a.microbatch or 0),
        "oldest first": lambda a: (a.microbatch or 0, order[a.kind]),
        "forward first": lambda a: (1 - order[a.kind] if a.kind is not Kind.W else 2, a.microbatch or 0),
        "longest path first": lambda a: (-tail[(a.stage, a.kind)], a.microbatch or 0),
    }


def caps_to_try(p: int, m: int, largest: float) -> list[float]:
    """Caps in micro-batches: p (1F1B's), 2p - 1 (ZB-H2's), 2p, m and the largest allowed, those within it."""
    options = {float(p), float(2 * p - 1), float(2 * p), float(m), float(largest)}
    return sorted(c for c in options if 1 <= c <= largest)


def candidates(p: int, m: int, timing: Timing, budget: Sequence[float]) -> list[Candidate]:
    """Every plan the search considers whose activations fit ``budget`` (per rank, in the units of
    ``timing.activation``), best estimated first; the hand-written ones are marked."""
    if any(b < timing.activation[r] for r, b in enumerate(budget)):
        raise ScheduleError("no plan fits: a rank cannot hold even one micro-batch of activations; lower "
                            "training.micro_batch, recompute, or raise pipeline.memory_budget", field="pipeline.schedule")
    placement = loop_placement(p, 1)
    out: list[Candidate] = []
    for name, build in HAND_WRITTEN.items():
        plan = build(p, m, 1)
        if all(h <= b + 1e-9 for h, b in zip(peak_held(plan, timing.activation), budget, strict=True)):
            out.append(Candidate(name, plan, _makespan(plan, timing), hand_written=True))
    largest = min(b / timing.activation[r] for r, b in enumerate(budget))
    caps: list[tuple[str, list[float]]] = [(f"cap {c:.3g} micro-batches", [c * timing.activation[r] for r in range(p)])
                                           for c in caps_to_try(p, m, min(largest, float(m)))]
    own = [min(b, m * timing.activation[r]) for r, b in enumerate(budget)]
    if own != caps[-1][1]:  # ranks with room to spare hold more than the tightest one
        caps.append(("each rank's own budget", own))
    for cap_name, per_rank in caps:
        for rule_name, priority in rules(p, timing, True).items():
            for defer in (True, False):
                made = list_schedule(m, placement, True, timing, per_rank, priority, defer_weight_grads=defer)
                if made is None:  # pragma: no cover - one stage per rank cannot stall (see list_scheduler)
                    continue
                orders, makespan = made
                how = f"{rule_name}, {cap_name}" + (", weight grads in the gaps" if defer else "")
                out.append(Candidate(how, make_plan(NAME, p, m, 1, orders), makespan))
    out.sort(key=lambda c: (c.makespan, not c.hand_written))
    seen: set[tuple[tuple[Action, ...], ...]] = set()
    unique = []
    for c in out:  # the first of plans with the same order (a hand-written one before its equals)
        if c.plan.actions not in seen:
            seen.add(c.plan.actions)
            unique.append(c)
    return unique


def _makespan(plan: Plan, timing: Timing) -> float:
    """The plan's makespan on the timing's durations and latencies (each action as soon as its
    rank is free and its inputs have arrived)."""
    # activations cross the boundary after their stage, grads the one before it
    _, ends = ideal_times(plan, timing.duration, lambda d: timing.latency[d[0] if d[1] is Kind.F else d[0] - 1])
    return max((r[-1][0] for r in ends if r), default=0.0)


def lower_bound(p: int, m: int, timing: Timing, budget: Sequence[float]) -> float:
    """A step time no plan of one stage per rank can beat on these costs and budgets
    (communication as its latency alone). For each stage s, with k the micro-batches its budget
    holds:

    - its first input grad cannot start before micro-batch 0 has gone forward through every stage
      and its input grads back to s; before that the stage can only run forwards, at most k of
      them: so it ends no earlier than that start (or its k forwards, if later) plus all its
      work left;
    - its last input grad ends no earlier than that start plus all its work but the weight grads
      it can still owe then (at most k: each holds its activations), and after it come the input
      grads of that micro-batch on every stage below and stage 0's last weight grad.

    The bound is the most of these over the stages."""
    forward, grad, weight, lag = timing.forward, timing.input_grad, timing.weight_grad, timing.latency
    down = [0.0] * p  # when micro-batch 0's activations can reach stage s
    for s in range(1, p):
        down[s] = down[s - 1] + forward[s - 1] + lag[s - 1]
    up = [0.0] * p  # when stage s's first input grad can start
    up[-1] = down[-1] + forward[-1]
    for s in reversed(range(p - 1)):
        up[s] = up[s + 1] + grad[s + 1] + lag[s]
    below = [0.0] * p  # after stage s's last input grad: the stages below's, and stage 0's last weight grad
    for s in range(1, p):
        below[s] = below[s - 1] + lag[s - 1] + grad[s - 1] + (weight[0] if s == 1 else 0.0)
    best = 0.0
    for s in range(p):
        held = min(float(m), budget[s] / timing.activation[s])
        early = int(held + 1e-9) * forward[s]  # the forwards it may run before its first input grad
        begin = max(up[s], down[s] + early)
        work = m * (forward[s] + timing.backward[s]) - early
        owed = min(int(held + 1e-9), m) * weight[s]  # weight grads it may still owe at its last input grad
        best = max(best, begin + work, begin + work - owed + below[s])
    return best


def no_costs(num_ranks: int, num_microbatches: int, chunks: int = 1) -> Plan:
    """``auto`` built without costs: the search needs them (:func:`ppsim.prediction.auto.auto_build`)."""
    raise ScheduleError("auto builds its plan from the stage costs: use ppsim run / plan on a scenario "
                        "(or ppsim.prediction.auto.auto_build), not a bare schedule build", field="pipeline.schedule")
