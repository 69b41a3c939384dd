"""Pure passes over Plans: dependencies, unit-step numbering, lowering (sends/receives, end of step)
and validation with a picture of the step x rank grid.

Lowering places sends and receives by the plan's ideal timeline (every action as soon as its
inputs exist, communication free, relative durations given): a receive right before the action
that consumes it. With non-blocking sends, a send goes right after the action that produced it.
For sends that block until the peer receives (gloo / NCCL rendezvous) both ends of a message take
the same key, the consumer's start in the ideal timeline (then a fixed order of messages), and
every rank orders its messages by that key. Then a rank can only wait on a message whose key is
smaller than the one its peer waits on, so no cycle of waits can form: the plan cannot deadlock.
For fill-drain and 1F1B-like schedules both ends then reach each message together; schedules whose
messages do not line up (interleaved with backward != forward) pay for blocking sends with stalls,
which is why Megatron and torch use non-blocking sends for them (``comm: async``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from ppsim.errors import PlanError
from ppsim.plan import (
    BACKWARD_KINDS,
    COMM_KINDS,
    COMPUTE_KINDS,
    Action,
    Kind,
    Plan,
)
from ppsim.util import gc_paused

Message = tuple[Action, Action]  #: (send action on the producer's rank, recv action on the consumer's rank)


# ----------------------------------------------------------------------------------------------
# dependencies of compute actions
# ----------------------------------------------------------------------------------------------
_action = partial(tuple.__new__, Action)  #: Action((s, k, mb)) without the Python-level __new__


def grad_producers(plan: Plan) -> dict[tuple[int, int | None], Kind]:
    """For every (stage, micro-batch): the kind that produces its input grad (B or I)."""
    B, I = Kind.B, Kind.I
    return {(a.stage, a.microbatch): a.kind for r in plan.actions for a in r if a.kind is B or a.kind is I}


def dependencies(a: Action, num_stages: int, grads: dict[tuple[int, int | None], Kind]) -> tuple[Action, ...]:
    """The compute actions whose output ``a`` consumes."""
    s, kind, mb = a
    if kind is Kind.F:
        return (_action((s - 1, kind, mb)),) if s > 0 else ()
    if kind is Kind.B or kind is Kind.I:
        if s < num_stages - 1:
            return (_action((s, Kind.F, mb)), _action((s + 1, grads.get((s + 1, mb), Kind.B), mb)))
        return (_action((s, Kind.F, mb)),)
    if kind is Kind.W:
        return (_action((s, Kind.I, mb)),)
    return ()


def message_kinds(producer: Action) -> tuple[Kind, Kind]:
    return (Kind.SEND_F, Kind.RECV_F) if producer.kind is Kind.F else (Kind.SEND_B, Kind.RECV_B)


def peer_stage(a: Action) -> int:
    """The stage at the other end of a communication action."""
    if a.kind is Kind.SEND_F or a.kind is Kind.RECV_B:
        return a.stage + 1
    return a.stage - 1


def matching(a: Action) -> Action:
    """The other end of a send or receive."""
    pairs = {Kind.SEND_F: Kind.RECV_F, Kind.RECV_F: Kind.SEND_F, Kind.SEND_B: Kind.RECV_B, Kind.RECV_B: Kind.SEND_B}
    return Action(peer_stage(a), pairs[a.kind], a.microbatch)


# ----------------------------------------------------------------------------------------------
# grid picture for errors
# ----------------------------------------------------------------------------------------------
def render_grid(
    actions: Sequence[Sequence[Action]],
    marks: dict[int, int] | None = None,
    *,
    window: int = 6,
    max_ranks: int = 12,
) -> str:
    """The step x rank grid of action texts; ``marks`` maps rank -> index to highlight as ``>>X<<``.

    Large plans are cropped to the rows around the marks and to the marked ranks' neighbourhood.
    """
    marks = marks or {}
    n_rows = max((len(r) for r in actions), default=0)
    if marks:
        lo = max(0, min(marks.values()) - window)
        hi = min(n_rows, max(marks.values()) + window + 1)
    else:
        lo, hi = 0, min(n_rows, 2 * window + 1)
    ranks = list(range(len(actions)))
    if len(ranks) > max_ranks:
        centre = min(marks) if marks else 0
        start = max(0, min(centre - max_ranks // 2, len(ranks) - max_ranks))
        ranks = ranks[start : start + max_ranks]

    def cell(r: int, i: int) -> str:
        if i >= len(actions[r]):
            return ""
        text = str(actions[r][i])
        return f">>{text}<<" if marks.get(r) == i else text

    rows = [[f"rank {r}" for r in ranks]] + [[cell(r, i) for r in ranks] for i in range(lo, hi)]
    labels = ["step"] + [str(i) for i in range(lo, hi)]
    widths = [max(len(row[c]) for row in rows) for c in range(len(ranks))]
    lw = max(len(x) for x in labels)
    lines = []
    if lo > 0:
        lines.append(f"{'':>{lw}}  ... {lo} earlier steps")
    for label, row in zip(labels, rows):
        lines.append(f"{label:>{lw}}  " + "  ".join(f"{c:<{w}}" for c, w in zip(row, widths)).rstrip())
    if hi < n_rows:
        lines.append(f"{'':>{lw}}  ... {n_rows - hi} later steps")
    return "\n".join(lines)


def aligned_grid(plan: Plan) -> str:
    """The whole plan as a grid; a compute-only plan is laid out on its unit steps, so the fill and
    drain of the pipeline show as empty cells."""
    if plan.lowered:
        rows = max((len(r) for r in plan.actions), default=0)
        return render_grid(plan.actions, window=rows, max_ranks=plan.num_ranks)
    steps = number_steps(plan)
    n = 1 + max((max(s) for s in steps if s), default=-1)
    cells = [[""] * n for _ in plan.actions]
    for r, ra in enumerate(plan.actions):
        for i, a in enumerate(ra):
            cells[r][steps[r][i]] = str(a)
    widths = [max([len(f"rank {r}")] + [len(c) for c in cells[r]]) for r in range(len(cells))]
    lw = max(4, len(str(n - 1)))
    lines = [f"{'step':>{lw}}  " + "  ".join(f"{'rank ' + str(r):<{w}}" for r, w in enumerate(widths)).rstrip()]
    for t in range(n):
        lines.append(f"{t:>{lw}}  " + "  ".join(f"{cells[r][t]:<{w}}" for r, w in enumerate(widths)).rstrip())
    return "\n".join(lines)


def _fail(msg: str, actions: Sequence[Sequence[Action]], marks: dict[int, int]) -> PlanError:
    return PlanError(msg, detail=render_grid(actions, marks))


# ----------------------------------------------------------------------------------------------
# the ideal timeline: as soon as possible, communication free
# ----------------------------------------------------------------------------------------------
Duration = Callable[[Action], float]

#: relative durations used when no costs are given: a transformer's backward is twice its forward
DEFAULT_WEIGHTS = {Kind.F: 1.0, Kind.B: 2.0, Kind.I: 1.0, Kind.W: 1.0}


def default_duration(a: Action) -> float:
    return DEFAULT_WEIGHTS.get(a.kind, 0.0)


Time = tuple[float, int]  #: (time, depth): depth breaks ties so that an output always follows its input


def ideal_times(plan: Plan, duration: Duration = default_duration) -> tuple[list[list[Time]], list[list[Time]]]:
    """Start and end of every compute action when each starts as soon as its rank is free and its
    inputs exist, communication being free. Times are (time, depth) pairs compared in order, where
    every action adds its duration and one to the depth, so an action ends strictly after it starts
    even when it takes no time. Raises PlanError with the grid if the plan can never finish (a
    cycle of dependencies)."""
    acts = plan.actions
    last = plan.num_stages - 1
    grads = grad_producers(plan)
    F, B, I, W = Kind.F, Kind.B, Kind.I, Kind.W
    zero: Time = (0.0, 0)
    starts: list[list[Time]] = [[zero] * len(r) for r in acts]
    ends: list[list[Time]] = [[zero] * len(r) for r in acts]
    done: dict[tuple[int, Kind, int | None], Time] = {}
    pos = [0] * len(acts)
    waiting: dict[tuple[int, Kind, int | None], list[int]] = {}
    work = list(range(len(acts)))
    while work:
        r = work.pop()
        ra = acts[r]
        n = len(ra)
        i = pos[r]
        free = ends[r][i - 1] if i else zero
        rank_starts, rank_ends = starts[r], ends[r]
        while i < n:
            a = ra[i]
            s, k, mb = a
            start = free
            # the inputs of a: the previous stage's forward, the next stage's input grad, or its own I
            if k is F:
                d1, d2 = ((s - 1, F, mb) if s else None), None
            elif k is B or k is I:
                d1 = (s, F, mb)
                d2 = (s + 1, grads.get((s + 1, mb), B), mb) if s < last else None
            elif k is W:
                d1, d2 = (s, I, mb), None
            else:
                d1 = d2 = None
            if d1 is not None:
                t = done.get(d1)
                if t is None:
                    waiting.setdefault(d1, []).append(r)
                    break
                if t > start:
                    start = t
            if d2 is not None:
                t = done.get(d2)
                if t is None:
                    waiting.setdefault(d2, []).append(r)
                    break
                if t > start:
                    start = t
            free = (start[0] + duration(a), start[1] + 1)
            rank_starts[i] = start
            rank_ends[i] = free
            done[a] = free
            i += 1
            woken = waiting.pop(a, None)
            if woken:
                work.extend(woken)
        pos[r] = i
    if any(pos[r] < len(acts[r]) for r in range(len(acts))):
        marks = {r: pos[r] for r in range(len(acts)) if pos[r] < len(acts[r])}
        stuck = ", ".join(f"rank {r} at {acts[r][i]}" for r, i in marks.items())
        raise _fail(
            f"plan {plan.schedule!r} cannot finish: every remaining action waits on another ({stuck})", acts, marks
        )
    return starts, ends


def number_steps(plan: Plan) -> list[list[int]]:
    """The unit step of every action: the ideal timeline when every action takes one step."""
    starts, _ = ideal_times(plan, lambda a: 1.0)
    return [[int(t[0]) for t in r] for r in starts]


# ----------------------------------------------------------------------------------------------
# lowering
# ----------------------------------------------------------------------------------------------
def add_comms(plan: Plan, duration: Duration = default_duration, *, rendezvous: bool = True) -> Plan:
    """Insert a send after every output another rank consumes and a receive before its use.

    Actions are placed by the ideal timeline (``duration`` gives relative compute times). A
    receive goes right before its consumer, so a rank never waits for data earlier than it needs
    it. Without ``rendezvous`` the send goes right after its producer; with it (sends block until
    received, as gloo's) the send takes its receive's key, so both ends order their messages alike
    and the plan cannot deadlock (see the module docstring).
    """
    if any(a.kind in COMM_KINDS for r in plan.actions for a in r):
        raise PlanError("plan already has communication actions; add_comms runs once")
    grads = grad_producers(plan)
    where = plan.stage_to_rank
    n_stages = plan.num_stages
    act = _action
    SEND_F, SEND_B, RECV_F, RECV_B = Kind.SEND_F, Kind.SEND_B, Kind.RECV_F, Kind.RECV_B
    if not rendezvous:
        # receives right before their consumer, sends right after their producer: no sort needed
        ideal_times(plan, duration)  # rejects plans that cannot finish
        out: list[list[Action]] = []
        for r, ra in enumerate(plan.actions):
            seq: list[Action] = []
            add = seq.append
            for a in ra:
                if a.kind in COMPUTE_KINDS:
                    for d in dependencies(a, n_stages, grads):
                        if where[d.stage] != r:
                            add(act((a.stage, RECV_F if d.kind is Kind.F else RECV_B, a.microbatch)))
                add(a)
                s, k, mb = a
                if k is Kind.F and s < n_stages - 1 and where[s + 1] != r:
                    add(act((s, SEND_F, mb)))
                elif (k is Kind.B or k is Kind.I) and s > 0 and where[s - 1] != r:
                    add(act((s, SEND_B, mb)))
            out.append(seq)
        return plan.with_actions(out, lowered=True)
    starts, _ = ideal_times(plan, duration)
    # entries sort by (time, depth, 0 for messages / 1 for compute, message order, stage, mb)
    entries: list[list[tuple[Any, ...]]] = [[] for _ in plan.actions]
    for r, ra in enumerate(plan.actions):
        mine = entries[r].append
        for i, a in enumerate(ra):
            t, depth = starts[r][i]
            mine((t, depth, 1, 0, 0, 0, a))
            if a.kind not in COMPUTE_KINDS:
                continue
            for d in dependencies(a, n_stages, grads):
                pr = where[d.stage]
                if pr == r:
                    continue
                is_act = d.kind is Kind.F
                order = 1 if is_act else 0  # within one moment, grads before activations
                mb = d.microbatch
                entries[pr].append((t, depth, 0, order, d.stage, mb, act((d.stage, SEND_F if is_act else SEND_B, mb))))
                mine((t, depth, 0, order, d.stage, mb, act((a.stage, RECV_F if is_act else RECV_B, mb))))
    lowered = []
    for es in entries:
        es.sort()
        lowered.append([e[6] for e in es])
    return plan.with_actions(lowered, lowered=True)


def add_step_end(plan: Plan, data_parallel: int = 1, clip: bool = False) -> Plan:
    """Append, on every rank, the gradient all-reduce across data-parallel replicas (when there are
    several), with ``clip`` the gradient-norm all-reduce over the pipeline (once per rank, on its
    last virtual stage), and the optimizer step of each of its stages. Forward-only plans get none."""
    has_backward = any(a.kind in BACKWARD_KINDS for r in plan.actions for a in r)
    if not has_backward:
        return plan.with_actions(plan.actions, lowered=True)
    out = []
    for r, ra in enumerate(plan.actions):
        stages = sorted(plan.stages_of_rank(r), reverse=True)
        tail: list[Action] = []
        if data_parallel > 1:
            tail += [Action(s, Kind.REDUCE_GRAD) for s in stages]
        if clip:
            tail.append(Action(stages[0], Kind.CLIP))
        tail += [Action(s, Kind.OPT) for s in stages]
        out.append(list(ra) + tail)
    return plan.with_actions(out, lowered=True)


def lower(plan: Plan, data_parallel: int = 1, duration: Duration = default_duration, *, rendezvous: bool = True,
          clip: bool = False) -> Plan:
    """The full lowering of a compute-only plan: communication, then end-of-step actions.

    The input is validated; the output is valid by construction (the property tests check it with
    ``validate``), so the hot path does not pay for checking it again."""
    with gc_paused():
        if not _structure_is_sound(plan):
            validate_structure(plan)  # raises with the precise message and the grid
        try:
            with_comms = add_comms(plan, duration, rendezvous=rendezvous)
        except PlanError:
            validate_structure(plan)  # a misordered pair is a clearer message than the deadlock
            raise
        return add_step_end(with_comms, data_parallel, clip)


def _structure_is_sound(plan: Plan) -> bool:
    """Fast check of what ``validate_structure`` checks except the order on a rank (which the
    ideal timeline catches as a deadlock): placement, ranges, no duplicates, nothing missing."""
    where = plan.stage_to_rank
    if len(plan.actions) != plan.num_ranks:
        return False
    if not all(0 <= a.stage < len(where) and where[a.stage] == r for r, ra in enumerate(plan.actions) for a in ra):
        return False
    actual = [a for ra in plan.actions for a in ra]
    present = set(actual)
    if len(present) != len(actual):
        return False
    stages, mbs = range(plan.num_stages), range(plan.num_microbatches)
    F, B, I, W = Kind.F, Kind.B, Kind.I, Kind.W
    expected = {_action((s, F, mb)) for s in stages for mb in mbs}
    if len(present) != len(expected):  # training: add each micro-batch's backward, whole or split
        for s in stages:
            for mb in mbs:
                if (s, B, mb) in present:
                    expected.add(_action((s, B, mb)))
                else:
                    expected.add(_action((s, I, mb)))
                    expected.add(_action((s, W, mb)))
    return present == expected


# ----------------------------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------------------------
def validate(plan: Plan, *, rendezvous: bool = True) -> None:
    """Check a plan's invariants; raise PlanError with the grid and the failing spot marked.

    - every action runs on the rank that holds its stage, and stages and micro-batches are in range;
    - every (stage, micro-batch) has one forward and, for training plans, one backward (B, or I and W);
    - on a rank, a backward follows its forward and a weight grad follows its input grad;
    - lowered plans: every send has its receive, after the output it sends and before its use;
      and (with ``rendezvous``) the plan runs to the end even if every send blocks until its
      receive is posted;
    - compute-only plans: the dependencies leave no cycle.
    """
    seen = validate_structure(plan)
    if plan.lowered:
        _validate_comms(plan, seen)
        if rendezvous:
            _check_runs_with_rendezvous(plan)
    else:
        if any(a.kind not in COMPUTE_KINDS for a in seen):
            raise PlanError("plan is marked not lowered but holds communication or end-of-step actions")
        ideal_times(plan)


def validate_structure(plan: Plan) -> dict[Action, tuple[int, int]]:
    """The per-action checks of ``validate`` (placement, ranges, completeness, order on a rank);
    returns where every action sits as (rank, index)."""
    acts = plan.actions
    S, m = plan.num_stages, plan.num_microbatches
    if len(acts) != plan.num_ranks:
        raise PlanError(f"plan has {len(acts)} rank lists for {plan.num_ranks} ranks")
    seen: dict[Action, tuple[int, int]] = {}
    for r, ra in enumerate(acts):
        for i, a in enumerate(ra):
            if not 0 <= a.stage < S:
                raise _fail(f"rank {r} step {i}: {a} names stage {a.stage}, but the plan has {S} stages", acts, {r: i})
            if plan.stage_to_rank[a.stage] != r:
                raise _fail(
                    f"rank {r} step {i}: {a} belongs to stage {a.stage}, which runs on rank {plan.stage_to_rank[a.stage]}",
                    acts,
                    {r: i},
                )
            if a.microbatch is not None and not 0 <= a.microbatch < m:
                raise _fail(f"rank {r} step {i}: {a} names micro-batch {a.microbatch}, but the plan has {m}", acts, {r: i})
            if a in seen:
                r0, i0 = seen[a]
                raise _fail(f"{a} appears twice (rank {r0} step {i0} and rank {r} step {i})", acts, {r0: i0, r: i})
            seen[a] = (r, i)
    training = any(a.kind in BACKWARD_KINDS for a in seen)
    for s in range(S):
        r = plan.stage_to_rank[s]
        for mb in range(m):
            f = Action(s, Kind.F, mb)
            if f not in seen:
                raise _fail(f"stage {s} never runs the forward of micro-batch {mb} ({f})", acts, {r: len(acts[r]) - 1})
            if not training:
                continue
            b, i_, w = Action(s, Kind.B, mb), Action(s, Kind.I, mb), Action(s, Kind.W, mb)
            if b in seen and (i_ in seen or w in seen):
                raise _fail(f"micro-batch {mb} on stage {s} has both a full backward and a split one", acts, {r: seen[b][1]})
            if b not in seen and not (i_ in seen and w in seen):
                missing = b if i_ not in seen and w not in seen else (i_ if i_ not in seen else w)
                raise _fail(f"stage {s} never runs {missing}", acts, {r: len(acts[r]) - 1})
            first = b if b in seen else i_
            if seen[first][1] < seen[f][1]:
                raise _fail(f"{first} runs before its forward {f} on rank {r}", acts, {r: seen[first][1]})
            if w in seen and seen[w][1] < seen[i_][1]:
                raise _fail(f"{w} runs before its input grad {i_} on rank {r}", acts, {r: seen[w][1]})
    return seen


def _validate_comms(plan: Plan, seen: dict[Action, tuple[int, int]]) -> None:
    acts = plan.actions
    grads = grad_producers(plan)
    for a, (r, i) in seen.items():
        if a.kind in COMM_KINDS:
            other = matching(a)
            if other not in seen:
                raise _fail(f"{a} on rank {r} has no matching {other}", acts, {r: i})
        if a.kind not in COMPUTE_KINDS:
            continue
        for d in dependencies(a, plan.num_stages, grads):
            pr = plan.stage_to_rank[d.stage]
            if pr == r:
                if d in seen and seen[d][1] > i:
                    raise _fail(f"{a} runs before {d}, whose output it needs, on rank {r}", acts, {r: i})
                continue
            send_kind, recv_kind = message_kinds(d)
            send, recv = Action(d.stage, send_kind, d.microbatch), Action(a.stage, recv_kind, a.microbatch)
            if recv not in seen or seen[recv][1] > i:
                raise _fail(f"{a} on rank {r} needs {recv} before it", acts, {r: i})
            if send not in seen or d not in seen or seen[send][1] < seen[d][1]:
                spot = seen.get(send, seen.get(d, (pr, 0)))
                raise _fail(f"{send} on rank {pr} must come after {d}", acts, {pr: spot[1]})


def _check_runs_with_rendezvous(plan: Plan) -> None:
    """Execute the lowered plan symbolically with sends that block until the receive is posted;
    a plan that stops with actions left would deadlock on gloo / NCCL."""
    acts = plan.actions
    where = plan.stage_to_rank
    pos = [0] * len(acts)
    work = list(range(len(acts)))
    while work:
        r = work.pop()
        ra = acts[r]
        while pos[r] < len(ra):
            a = ra[pos[r]]
            if a.kind in COMM_KINDS:
                peer = where[peer_stage(a)]
                if pos[peer] < len(acts[peer]) and acts[peer][pos[peer]] == matching(a):
                    pos[peer] += 1
                    work.append(peer)
                else:
                    break
            pos[r] += 1
    marks = {r: pos[r] for r in range(len(acts)) if pos[r] < len(acts[r])}
    if marks:
        stuck = ", ".join(f"rank {r} at {acts[r][i]}" for r, i in marks.items())
        raise _fail(f"plan {plan.schedule!r} deadlocks when sends block until received ({stuck})", acts, marks)
