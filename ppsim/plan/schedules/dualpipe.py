"""DualPipeV (DeepSeek-V3's DualPipe cut in half, as torch's ``ScheduleDualPipeV`` runs it): V
placement — rank r holds stage r on the way down and stage 2p - 1 - r on the way up — and, in the
steady state, a forward of one chunk overlapped with a backward of the other as one compound action
(:class:`~ppsim.plan.Overlap`), so that each one's communication hides under the other's compute.

Per rank, in eight phases (a = the down stage, b = the up stage; a "backward" is a full B until
the rank switches to split backwards in phase 6, I afterwards):

1. 2(p - 1 - r) forwards of a;
2. r + 1 times: F a, F b;
3. p - 1 - r times: I b, the oldest owed W, F b (zero-bubble warm-up of the up stage);
4. m - 2p + r + 1 times: (F a ; B b) overlapped — on the last rank the first one not overlapped,
   which shortens the bubble — then (F b ; B a);
5. p - 1 - r times: B b, (F b ; B a);
6. r + 1 times: backward b, backward a — halfway through, the rank turns to split backwards
   (before b's on odd ranks, before a's on even ones), leaving their W's for the gaps;
7. p - 1 - r times: the oldest owed W, backward a;
8. r + 1 owed W's.

It needs at least as many micro-batches as stages (m >= 2p).
"""

from __future__ import annotations

from collections import deque

from ppsim.plan.action import Action, Kind, Overlap
from ppsim.plan.plan import Plan, v_placement
from ppsim.plan.schedules.base import make_plan


class _RankOrder:
    """One rank's order as it is written: forwards and backwards numbered per stage, the weight
    grads of split backwards owed oldest first."""

    def __init__(self) -> None:
        self.actions: list[Action | Overlap] = []
        self.forwards: dict[int, int] = {}
        self.backwards: dict[int, int] = {}
        self.owed: deque[Action] = deque()

    def _next_forward(self, stage: int) -> Action:
        n = self.forwards.get(stage, 0)
        self.forwards[stage] = n + 1
        return Action(stage, Kind.F, n)

    def _next_backward(self, stage: int, split: bool) -> Action:
        n = self.backwards.get(stage, 0)
        self.backwards[stage] = n + 1
        if split:
            self.owed.append(Action(stage, Kind.W, n))
        return Action(stage, Kind.I if split else Kind.B, n)

    def f(self, stage: int) -> None:
        self.actions.append(self._next_forward(stage))

    def b(self, stage: int, split: bool = False) -> None:
        self.actions.append(self._next_backward(stage, split))

    def overlap(self, forward_stage: int, backward_stage: int) -> None:
        self.actions.append(Overlap.of(self._next_forward(forward_stage), self._next_backward(backward_stage, False)))

    def w(self) -> None:
        if self.owed:
            self.actions.append(self.owed.popleft())


def dualpipev(num_ranks: int, num_microbatches: int, chunks: int = 2) -> Plan:
    """DualPipeV's order on every rank (see the module docstring); m >= 2p."""
    p, m = num_ranks, num_microbatches
    orders: list[list[Action | Overlap]] = []
    for r in range(p):
        a, b = r, 2 * p - 1 - r
        o = _RankOrder()
        for _ in range(2 * (p - 1 - r)):
            o.f(a)
        for _ in range(r + 1):
            o.f(a)
            o.f(b)
        for _ in range(p - 1 - r):
            o.b(b, split=True)
            o.w()
            o.f(b)
        for i in range(m - 2 * p + r + 1):
            if i == 0 and r == p - 1:
                o.f(a)
                o.b(b)
            else:
                o.overlap(a, b)
            o.overlap(b, a)
        for _ in range(p - 1 - r):
            o.b(b)
            o.overlap(b, a)
        split = False
        half = (r + 1) // 2
        for i in range(r + 1):
            if i == half and r % 2 == 1:
                split = True
            o.b(b, split)
            if i == half and r % 2 == 0:
                split = True
            o.b(a, split)
        for _ in range(p - 1 - r):
            o.w()
            o.b(a, split)
        while o.owed:
            o.w()
        orders.append(o.actions)
    return make_plan("dualpipev", p, m, 2, orders, v_placement(p))  # type: ignore[arg-type]  # Overlaps stand in for Actions
