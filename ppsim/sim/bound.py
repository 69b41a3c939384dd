"""A lower bound on a plan's step time without simulating it: what the tuner uses to skip plans
that cannot beat those it has already simulated.

Every rank runs its actions one at a time, so its last compute action ends no sooner than its
earliest possible start plus the sum of its compute. Its earliest start: any action of a rank
needs a forward of one of its stages, which needs the forwards of every stage before it. After its
last compute action, two things still take time: the rank's own end of step (optimizer step,
clipping's local norm, the gradient all-reduce when it is not overlapped) and whatever depends on
that action (after a backward of stage s, the input grads of every stage below s and then the end
of step of stage 0's rank; after a forward, the rest of the forwards and every backward).
Each message on those chains costs at least its unloaded transfer (on a fabric, only its latency and
overheads); sharing links is left out, so the bound holds however they are shared. On 1F1B with
free links it is exact: (m + p - 1)(F + B) plus the optimizer step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from operator import itemgetter

from ppsim.costs.table import CostTable
from ppsim.plan import Action, Kind, Overlap, Plan
from ppsim.plan.deps import ideal_times
from ppsim.plan.memo import per_plan
from ppsim.sim.durations import compute_ms

_stage_and_kind = itemgetter(0, 1)


def _priced(a: Action | Overlap) -> tuple[int, Kind] | Overlap:
    """What an action's duration depends on: its (stage, kind); an overlap's, both parts' (without
    their micro-batches)."""
    if isinstance(a, Overlap):
        f, _, b = a
        return Overlap(Action(f.stage, f.kind, 0), Kind.OVERLAP_F_B, Action(b.stage, b.kind, 0))
    return a.stage, a.kind


@per_plan
def _counts(plan: Plan) -> tuple[Counter[tuple[int, Kind] | Overlap], ...]:
    """Per rank, how many actions of each priced form (:func:`_priced`) it runs."""
    return tuple(Counter(map(_priced if Kind.OVERLAP_F_B in plan.kinds(r) else _stage_and_kind, actions))
                 for r, actions in enumerate(plan.actions))


def step_time_bound_ms(plan: Plan, costs: CostTable, *, data_parallel: int = 1, clip: bool = False) -> float:
    """A lower bound on the step time :func:`ppsim.sim.simulate` finds for ``plan`` (compute only,
    before lowering) lowered with ``data_parallel`` replicas and ``clip``, on ``costs``."""
    stages = costs.stages
    n = len(stages)
    duration = compute_ms(costs)
    where = plan.stage_to_rank
    # the least a message across boundary b takes: on static links its whole transfer; on a fabric a
    # flow may run faster than the static share, so only its latency and overheads; none from a
    # pipe's last stage (with several copies of the model, the next stage starts another copy)
    per_pipe = plan.stages_per_pipe
    hop = [0.0] * n
    for b in range(n - 1):
        if where[b] != where[b + 1] and (b + 1) % per_pipe:
            link = costs.link(b)
            hop[b] = costs.p2p_ms(b) if costs.fabric is None else \
                link.send_overhead_ms + link.latency_ms + link.recv_overhead_ms
    # the time from nothing to the start of stage s's first forward, and the input-grad chain below s,
    # each from the first stage of s's pipe; and each pipe's whole chains
    before, below = [0.0] * n, [0.0] * n
    for s in range(1, n):
        if s % per_pipe:
            before[s] = before[s - 1] + stages[s - 1].forward_ms + hop[s - 1]
            below[s] = below[s - 1] + min(stages[s - 1].backward_ms, stages[s - 1].input_grad_ms) + hop[s - 1]
    ends = range(per_pipe - 1, n, per_pipe)
    forwards = [before[e] + stages[e].forward_ms for e in ends]
    input_grads = [below[e] + min(stages[e].backward_ms, stages[e].input_grad_ms) for e in ends]
    tail = _tails(plan, costs, data_parallel, clip)
    training = bool(plan.kinds().intersection({Kind.B, Kind.I, Kind.W, Kind.OVERLAP_F_B}))
    # after the last input grad of a pipe's first stage, on its rank
    first_rank_tail = [tail(plan.stage_to_rank[k * per_pipe]) for k in range(len(forwards))]

    def after(a: Action) -> float:
        """The shortest chain of work that still depends on ``a`` once it has ended."""
        s, k, _ = a
        if k is Kind.OVERLAP_F_B:
            return max(after(part) for part in a.parts)
        pipe = s // per_pipe
        if k is Kind.F:  # the forwards after it (from the message it sends on), then every input grad
            rest = forwards[pipe] - before[s] - stages[s].forward_ms
            return rest + (input_grads[pipe] + first_rank_tail[pipe] if training else 0.0)
        if (k is Kind.B or k is Kind.I) and s % per_pipe:  # the message down, then the input grads below it
            return below[s] + first_rank_tail[pipe]
        return 0.0

    bound = 0.0
    for r, actions in enumerate(plan.actions):
        if not actions:
            continue
        start = min(before[s] for s in plan.stages_of_rank(r))
        busy = sum(duration(x if isinstance(x, Overlap) else Action(*x)) * count for x, count in _counts(plan)[r].items())
        bound = max(bound, start + busy + max(tail(r), after(actions[-1])))
    return bound


def _tails(plan: Plan, costs: CostTable, data_parallel: int, clip: bool) -> Callable[[int], float]:
    """Each rank's own end of step, after its last compute action: its stages' optimizer steps,
    clipping's local norm, and the gradient all-reduce when nothing overlaps it."""
    stages = costs.stages
    training = bool(plan.kinds().intersection({Kind.B, Kind.I, Kind.W, Kind.OVERLAP_F_B}))
    reduce = data_parallel > 1 and not costs.overlap_grad_reduce and costs.fabric is None

    def tail(r: int) -> float:
        if not training:
            return 0.0
        mine = plan.stages_of_rank(r)
        out = sum(stages[s].optimizer_ms for s in mine)
        if clip:
            out += stages[mine[-1]].clip_ms
        if reduce:
            out += sum(stages[s].allreduce_ms for s in mine)
        return out

    return tail


def ordered_bound_ms(plan: Plan, costs: CostTable, *, data_parallel: int = 1, clip: bool = False) -> float:
    """A tighter lower bound than :func:`step_time_bound_ms`, at the cost of a pass over the plan:
    every rank runs its compute actions in its own order, each as soon as the rank is free and its
    inputs exist, messages taking no time (the plan's ideal timeline), then its own end of step.
    The simulator runs the same actions in the same order, each input arriving no sooner, so no
    simulated step is shorter. What it adds: the waits the order itself imposes (a V-Min rank's
    gaps), which the cheaper bound leaves out."""
    duration = compute_ms(costs)
    _, ends = ideal_times(plan, duration)
    tail = _tails(plan, costs, data_parallel, clip)
    return max((ends[r][-1][0] + tail(r) for r in range(plan.num_ranks) if ends[r]), default=0.0)
