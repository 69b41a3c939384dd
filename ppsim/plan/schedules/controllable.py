"""V-Half and V-Min (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): V placement
and split backward, built from a *building block* — one micro-batch's four passes on each rank
(forward down the V, forward back up, the input grads back down and back up) at fixed offsets of
a period of six unit slots. Repeating the block every six slots gives a schedule whose lifespan
per micro-batch, and so its activation memory, is set by the offsets: about 1/2 (V-Half) or
1/3 (V-Min) of 1F1B's. The weight grads fill the free slots, oldest first, and each rank runs its
passes in slot order.

The paper's authors then move warm-up and cool-down passes into earlier free slots by a greedy
repacking that never raises the peak. ppsim keeps the plain repeated block: its steady state is
the paper's and its peak exactly the bound, but its ends are not repacked, so it idles more (with
F = I = W, V-Half about 0.6 of 1F1B's idle time where the paper's repacked order reaches about
0.3-0.5, V-Min 0.6-0.75 against the paper's ~2/3; ``tests/plan/test_schedule_formulas.py``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from ppsim.errors import ScheduleError
from ppsim.plan.action import Action, Kind
from ppsim.plan.plan import Plan, v_placement
from ppsim.plan.schedules.base import make_plan

PERIOD = 6  #: slots per micro-batch and rank: two forwards, two input grads, two weight grads
Offsets = Callable[[int, int], tuple[int, int, int, int]]  #: (p, rank) -> slots of F down, F up, I up, I down


def v_half_offsets(p: int, i: int) -> tuple[int, int, int, int]:
    gap = 3 if p % 2 == 0 else 0
    return 2 * i, 3 * p - i - 2, 3 * p + gap + 2 * i - 1, 6 * p + gap - i - 2


def v_min_offsets(p: int, i: int) -> tuple[int, int, int, int]:
    gap = 2 if p % 3 == 0 else 0
    return i, 2 * p - i - 1, 2 * p + gap + i, 4 * p + gap - i - 1


def _building_block(name: str, p: int, m: int, offsets: Offsets) -> Plan:
    """Every rank's passes in slot order, weight grads in the free slots (oldest first)."""
    orders: list[list[Action]] = []
    for r in range(p):
        down, up = r, 2 * p - 1 - r
        passes = ((down, Kind.F), (up, Kind.F), (up, Kind.I), (down, Kind.I))
        slots: dict[int, Action] = {}
        for k in range(m):
            for (stage, kind), offset in zip(passes, offsets(p, r), strict=True):
                slot = offset + PERIOD * k
                if slot in slots:  # pragma: no cover - the offsets differ modulo the period
                    raise ScheduleError(f"two passes share slot {slot} on rank {r}", field="pipeline.stages")
                slots[slot] = Action(stage, kind, k)
        order: list[Action] = []
        owed: deque[Action] = deque()  # input grads whose weight grad is still to run, oldest first
        last = max(slots)
        for slot in range(last + 1 + 2 * m):
            a = slots.get(slot)
            if a is None and owed:
                a = owed.popleft()
            if a is None:
                if slot > last:
                    break
                continue
            order.append(a)
            if a.kind is Kind.I:
                owed.append(Action(a.stage, Kind.W, a.microbatch))
        orders.append(order)
    return make_plan(name, p, m, 2, orders, v_placement(p))


def v_half(num_ranks: int, num_microbatches: int, chunks: int = 2) -> Plan:
    """V-Half: the building block that holds about half of 1F1B's activations, (p + 2) // 2
    micro-batches of a rank's share, for about half its bubble."""
    return _building_block("v-half", num_ranks, num_microbatches, v_half_offsets)


def v_min(num_ranks: int, num_microbatches: int, chunks: int = 2) -> Plan:
    """V-Min: the building block that holds about a third of 1F1B's activations, (p + 4) // 3
    micro-batches of a rank's share, for about two thirds of its bubble."""
    return _building_block("v-min", num_ranks, num_microbatches, v_min_offsets)
