"""``auto``'s orders of one stage per rank: the candidates whose activations fit each rank's cap.

The zero-bubble authors' scheduler tries the eight variants of one greedy rule under one memory
cap, with every stage's costs set to their median. Here the search is wider and uses each stage's
own costs and message latencies:

- the hand-written schedules of one stage per rank (1F1B, GPipe, ZB-H1, ZB-H2), where they fit;
- at caps from p micro-batches up to the largest all ranks can hold, and at each rank's own
  budget (a rank with memory to spare holds more than the tightest):
  - the list scheduler (:mod:`~ppsim.plan.order_search.list_scheduler`) under every rule of
    :func:`rules` (backward first, oldest micro-batch first, forward first, longest remaining
    path first), with weight grads deferred to the gaps or not;
  - the authors' greedy itself, all eight variants (:mod:`~ppsim.plan.order_search.wavefront`);
- the best few of all these, improved by the local search of :mod:`~ppsim.plan.order_search.improve`;
- for a plan small enough, the exact search (:mod:`~ppsim.plan.order_search.exact`): orders shorter
  than the best so far, or the proof that there are none, within a budget of decisions.

Each candidate comes with the makespan of its own timeline (durations and latencies, messages
free of bandwidth); the caller (:func:`ppsim.prediction.auto.auto_build`) simulates the best of
them, the hand-written ones, and the schedules of several chunks per rank on their own costs, and
keeps the fastest that fits. :func:`~ppsim.plan.order_search.bound.lower_bound` is a step no plan
of one stage per rank can beat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ppsim.errors import ScheduleError
from ppsim.plan.action import Action, Kind
from ppsim.plan.order_search.bound import lower_bound
from ppsim.plan.order_search.exact import exact
from ppsim.plan.order_search.improve import improve
from ppsim.plan.order_search.list_scheduler import Priority, list_schedule
from ppsim.plan.order_search.timeline import Orders, Timing, fits, timeline
from ppsim.plan.order_search.wavefront import VARIANTS, wavefront
from ppsim.plan.plan import Plan, loop_placement
from ppsim.plan.schedules import SCHEDULES, SEARCHED, Placement
from ppsim.plan.schedules.base import make_plan


def hand_written(p: int, m: int) -> list[tuple[str, Plan]]:
    """The registered training schedules that run one stage per rank (on the loop placement) at
    these sizes, each built."""
    out = []
    for name, info in SCHEDULES.items():
        if (info.training and info.chunks.allows(1) and info.placement is Placement.LOOP and info.ranks is None
                and not info.overlaps and info.microbatches.nearest(p, m, 1) is None):
            out.append((name, info.build(p, m, 1)))
    return out


@dataclass(frozen=True)
class Candidate:
    """One plan ``auto`` considered: how it was made, its order and its own timeline's makespan."""

    how: str
    plan: Plan
    makespan: float
    family: str = "hand-written"  #: what made it: hand-written, list scheduler, wavefront, local search, exact search
    proven: bool = False  #: no orders of one stage per rank have a shorter timeline

    @property
    def hand_written(self) -> bool:
        return self.family == "hand-written"


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


#: the actions the local search may time for each (its timelines x the plan's actions), so that
#: its cost does not grow with the plan
WORK = 60_000
#: the exact search runs on plans of at most this many compute actions, for at most EXACT_WORK
#: decisions x actions (docs/internals/plan.md has its cost and what it finds)
EXACT_ACTIONS = 400
EXACT_WORK = 3_000_000


def candidates(p: int, m: int, timing: Timing, budget: Sequence[float]) -> list[Candidate]:
    """Every plan the search considers whose activations fit ``budget`` (per rank, in the units of
    ``timing.activation``), best estimated first; the hand-written ones are marked."""
    if any(b < timing.activation[r] for r, b in enumerate(budget)):
        raise ScheduleError("no plan fits: a rank cannot hold even one micro-batch of activations; lower "
                            "training.micro_batch, recompute, or raise pipeline.memory_budget", field="pipeline.schedule")
    out: list[Candidate] = []
    for name, plan in hand_written(p, m):
        if fits(plan.actions, timing, budget):
            out.append(Candidate(name, plan, _makespan(plan.actions, timing)))
    for cap_name, per_rank in _caps(p, m, timing, budget):
        for how, orders, makespan in _greedy_orders(p, m, timing, per_rank):
            family = "wavefront" if how.startswith("wavefront") else "list scheduler"
            out.append(Candidate(f"{how}, {cap_name}", make_plan(SEARCHED, p, m, 1, orders), makespan, family))
    ranked = _distinct(out)
    if ranked[0].makespan <= lower_bound(p, m, timing, budget) * (1 + 1e-9):
        return [replace(ranked[0], proven=True), *ranked[1:]]  # the best is as short as any can be
    tries = max(10, WORK // (3 * p * m))
    for c in _best_of_each_family(ranked):  # orders of one family tend to stick where the others do not
        orders, t, kept = improve(c.plan.actions, timing, budget, tries)
        if kept:
            how = f"{c.how}, improved by {kept} swap{'s' if kept > 1 else ''}"
            ranked.append(Candidate(how, make_plan(SEARCHED, p, m, 1, orders), t.makespan, "local search"))
    ranked = _distinct(ranked)
    if 3 * p * m > EXACT_ACTIONS:
        return ranked
    found = exact(p, m, timing, budget, beat=ranked[0].makespan, nodes=EXACT_WORK // (3 * p * m))
    if found.orders is not None:
        how = "exact search" + (", proven shortest" if found.proven else f", best of {found.nodes:,} decisions")
        ranked.insert(0, Candidate(how, make_plan(SEARCHED, p, m, 1, found.orders), found.makespan, "exact search",
                                   proven=found.proven))
    elif found.proven:  # nothing is shorter than the best already found
        ranked[0] = replace(ranked[0], proven=True)
    return ranked


def _best_of_each_family(ranked: list[Candidate], each: int = 2) -> list[Candidate]:
    """The best ``each`` of every family, in ranked order."""
    taken: dict[str, int] = {}
    out = []
    for c in ranked:
        if taken.get(c.family, 0) < each:
            taken[c.family] = taken.get(c.family, 0) + 1
            out.append(c)
    return out


def _caps(p: int, m: int, timing: Timing, budget: Sequence[float]) -> list[tuple[str, list[float]]]:
    """The caps the greedy orders are built under, named, each as a budget per rank."""
    largest = min(b / timing.activation[r] for r, b in enumerate(budget))
    caps = [(f"cap {c:.3g} micro-batches", [c * timing.activation[r] for r in range(p)])
            for c in caps_to_try(p, m, min(largest, float(m)))]
    own = [min(b, m * timing.activation[r]) for r, b in enumerate(budget)]
    if own != caps[-1][1]:  # ranks with room to spare hold more than the tightest one
        caps.append(("each rank's own budget", own))
    return caps


def _greedy_orders(p: int, m: int, timing: Timing, cap: Sequence[float]
                   ) -> list[tuple[str, list[list[Action]], float]]:
    """The list scheduler's orders under every rule, and the wavefront's eight, under one cap,
    each with the makespan of the timeline it was built on (the orders' own)."""
    placement = loop_placement(p, 1)
    out = []
    for rule_name, priority in rules(p, timing, True).items():
        for defer in (True, False):
            made = list_schedule(m, placement, True, timing, cap, priority, defer_weight_grads=defer)
            if made is not None:  # one stage per rank cannot stall (see list_scheduler)
                out.append((rule_name + (", weight grads in the gaps" if defer else ""), *made))
    for variant in VARIANTS:
        waves = wavefront(p, m, timing, cap, variant)
        if waves is not None:
            out.append((f"wavefront ({variant.words()})", *waves))
    return out


def _distinct(found: list[Candidate]) -> list[Candidate]:
    """Best first; of plans with the same order, the first (a hand-written one before its equals)."""
    found = sorted(found, key=lambda c: (c.makespan, not c.hand_written))
    seen: set[tuple[tuple[Action, ...], ...]] = set()
    out = []
    for c in found:
        if c.plan.actions not in seen:
            seen.add(c.plan.actions)
            out.append(c)
    return out


def _makespan(orders: Orders, timing: Timing) -> float:
    """The orders' makespan on the timing's durations and latencies."""
    t = timeline(orders, timing)
    assert t is not None  # every candidate finishes: built by a schedule or a greedy that follows the rule
    return t.makespan
