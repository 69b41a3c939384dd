"""DualPipe and DualPipeV (DeepSeek-V3's DualPipe, and DualPipe cut in half, as torch's
``ScheduleDualPipeV`` runs it). DualPipeV: V placement — rank r holds stage r on the way down and
stage 2p - 1 - r on the way up — and, in the steady state, a forward of one chunk overlapped with a
backward of the other as one compound action (:class:`~ppsim.plan.Overlap`), so that each one's
communication hides under the other's compute. DualPipe runs the same phases on two copies of the
model fed from both ends (:func:`dualpipe`).

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

DualPipeV needs at least as many micro-batches as stages (m >= 2p); DualPipe as many per pipe.
"""

from __future__ import annotations

from collections import deque

from ppsim.plan.action import Action, Kind, Overlap
from ppsim.plan.plan import Plan, v_placement
from ppsim.plan.schedules.base import make_plan


class _RankOrder:
    """One rank's order as it is written: forwards and backwards numbered per stage, the weight
    grads of split backwards owed oldest first."""

    def __init__(self, first: dict[int, int]) -> None:
        self.actions: list[Action | Overlap] = []
        self.forwards: dict[int, int] = dict(first)
        self.backwards: dict[int, int] = dict(first)
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
    orders = [_order(p, r, m, r, 2 * p - 1 - r, {}) for r in range(p)]
    return make_plan("dualpipev", p, m, 2, orders, v_placement(p))  # type: ignore[arg-type]  # Overlaps stand in for Actions


def dualpipe(num_ranks: int, num_microbatches: int, chunks: int = 2) -> Plan:
    """DualPipe's order on every rank: two pipes of the whole model in opposite directions, each
    carrying half the micro-batches; p even, m even and m >= 2p.

    Pipe 0 is stages 0 to p - 1 on ranks 0 to p - 1 (micro-batches 0 to m/2 - 1), pipe 1 stages p
    to 2p - 1 on ranks p - 1 down to 0 (micro-batches m/2 to m - 1): the V placement, so rank r
    holds the r-th stage of the model and the (p - 1 - r)-th, and a pipe's end meets the other
    pipe's start on one rank. Each rank runs DualPipeV's eight phases as a rank of half as many
    (DeepSeek's ``half_rank = min(r, p - 1 - r)``, half the micro-batches), its down stage the one
    where it is nearer the start of its pipe."""
    p, m = num_ranks, num_microbatches
    half = m // 2
    orders = []
    for r in range(p):
        own, mirrored = r, 2 * p - 1 - r  # the rank's stage of pipe 0 and of pipe 1
        near = min(r, p - 1 - r)
        a, b = (own, mirrored) if r < p // 2 else (mirrored, own)
        orders.append(_order(p // 2, near, half, a, b, {mirrored: half}))
    return make_plan("dualpipe", p, m, 2, orders, v_placement(p), pipes=2)  # type: ignore[arg-type]  # Overlaps stand in for Actions


def _order(p: int, r: int, m: int, a: int, b: int, first: dict[int, int]) -> list[Action | Overlap]:
    """The eight phases of one rank (the module docstring) on a pipeline of p ranks and m
    micro-batches: ``a`` its down stage, ``b`` its up stage, ``first`` each stage's first
    micro-batch where it is not 0."""
    o = _RankOrder(first)
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
    return o.actions
