"""Checks of a plan's invariants; every failure is a PlanError with the step x rank grid marked.

- every action runs on the rank that holds its stage, stages and micro-batches are in range, and
  nothing appears twice;
- every (stage, micro-batch) has one forward and, in a training plan, one backward (B, or I and W);
- on a rank, a backward follows its forward and a weight grad its input grad;
- lowered plans: every send has its receive, after the output it sends and before its use; two
  ranks receive each other's messages in the order they were sent (NCCL and gloo match them by
  order); and (with ``rendezvous``) the plan runs to the end even if every send blocks until its
  receive is posted;
- compute-only plans: the dependencies leave no cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

from ppsim.errors import PlanError
from ppsim.plan.action import (
    COMM_KINDS,
    COMPUTE_KINDS,
    RECV_KINDS,
    SEND_KINDS,
    Action,
    Kind,
    matching,
    message_kinds,
    new_action,
    peer_stage,
)
from ppsim.plan.deps import dependencies, grad_producers, ideal_times
from ppsim.plan.grid import render_grid
from ppsim.plan.plan import Plan
from ppsim.plan.rules import is_training

Positions = dict[Action, tuple[int, int]]  #: where every action sits: (rank, index)


def fail(message: str, actions: Sequence[Sequence[Action]], marks: dict[int, int]) -> PlanError:
    """A PlanError whose picture is the grid with ``marks`` (rank -> index) highlighted."""
    return PlanError(message, detail=render_grid(actions, marks))


def validate(plan: Plan, *, rendezvous: bool = True) -> None:
    """Check every invariant of the module docstring; raise PlanError with the grid on the first broken one."""
    seen = validate_structure(plan)
    if plan.lowered:
        _check_messages(plan, seen)
        _check_channel_order(plan)
        if rendezvous:
            _check_runs_with_rendezvous(plan)
    else:
        if any(a.kind not in COMPUTE_KINDS for a in seen):
            raise PlanError("plan is marked not lowered but holds communication or end-of-step actions")
        ideal_times(plan)


def validate_structure(plan: Plan, *, check_order: bool = True) -> Positions:
    """Placement, ranges, no duplicates and completeness (and, with ``check_order``, the order of
    each micro-batch's forward and backward pieces on its rank); returns where every action sits."""
    acts = plan.actions
    if len(acts) != plan.num_ranks:
        raise PlanError(f"plan has {len(acts)} rank lists for {plan.num_ranks} ranks")
    seen = _positions(plan)
    _check_complete(plan, seen, check_order)
    return seen


_PIECE_CODES = {Kind.F: 0, Kind.B: 1, Kind.I: 2, Kind.W: 3}  #: compute pieces, in blocks of a seen-table


def structure_holds(plan: Plan) -> bool:
    """Whether a compute-only plan passes :func:`validate_structure` without ``check_order``
    (placement, ranges, nothing twice, complete), checked on a table of flags instead of a dict of
    actions; False means call :func:`validate_structure` for the error with its grid."""
    acts, where = plan.actions, plan.stage_to_rank
    n, m = len(where), plan.num_microbatches
    if len(acts) != plan.num_ranks:
        return False
    size = n * m
    seen = bytearray(4 * size)  # blocks F, B, I, W; flag (stage * m + mb) in each
    codes, OVERLAP = _PIECE_CODES, Kind.OVERLAP_F_B
    others: set[tuple[int, Kind, int | None]] = set()  #: actions of other kinds (an OPT...): placed as the full check places them
    for r, ra in enumerate(acts):
        overlaps = OVERLAP in plan.kinds(r)
        # the pieces: a rank without overlapped pairs is its actions themselves (no parts to unfold)
        for s, k, mb in chain.from_iterable(x.parts for x in ra) if overlaps else ra:
            c = codes.get(k)
            if c is None:  # not a compute piece: on its stage's rank, in range, once (as _place checks)
                if not 0 <= s < n or where[s] != r or (mb is not None and not 0 <= mb < m) or (s, k, mb) in others:
                    return False
                others.add((s, k, mb))
                continue
            if mb is None or not (0 <= s < n and 0 <= mb < m) or where[s] != r:
                return False
            at = c * size + s * m + mb
            if seen[at]:
                return False
            seen[at] = 1
        if overlaps and any(x[1] is OVERLAP and x[0][0] == x[2][0] and x[0][2] == x[2][2]  # type: ignore[index]  # x: an Overlap
                            for x in ra):
            return False  # a micro-batch's backward overlapped with its own forward
    # as big integers of one byte per flag, the blocks add without carries
    ones = int.from_bytes(_runs_flags(plan), "little")
    f, b, i, w = (int.from_bytes(seen[c * size:(c + 1) * size], "little") for c in range(4))
    if f != ones:
        return False
    if not (b or i or w):
        return True  # forward only
    return b + i == ones and i == w  # every piece's backward: a full one, or an input and a weight grad


def _runs_flags(plan: Plan) -> bytes:
    """A flag per (stage, micro-batch), index ``stage * m + mb``: set where the stage runs the
    micro-batch (everywhere, unless the plan runs several pipes)."""
    m = plan.num_microbatches
    if plan.pipes == 1:
        return b"\x01" * (plan.num_stages * m)
    flags = bytearray(plan.num_stages * m)
    for s in range(plan.num_stages):
        for mb in plan.microbatches_of(s):
            flags[s * m + mb] = 1
    return bytes(flags)


def _positions(plan: Plan) -> Positions:
    """Where every plain action sits; both parts of an overlapped action sit at its place."""
    acts, where = plan.actions, plan.stage_to_rank
    n_stages, m = len(where), plan.num_microbatches
    seen: Positions = {}
    for r, ra in enumerate(acts):
        for i, x in enumerate(ra):
            for a in x.parts:
                _place(a, r, i, seen, acts, where, n_stages, m)
                if plan.pipes > 1 and a.microbatch is not None and a.microbatch not in plan.microbatches_of(a.stage):
                    runs = plan.microbatches_of(a.stage)
                    raise fail(f"rank {r} step {i}: {a} names micro-batch {a.microbatch}, but stage {a.stage}'s pipe "
                               f"runs micro-batches {runs.start} to {runs.stop - 1}", acts, {r: i})
            if x.kind is Kind.OVERLAP_F_B:
                f, b = x.parts
                if f.microbatch == b.microbatch and f.stage == b.stage:
                    raise fail(f"rank {r} step {i}: {x} overlaps a micro-batch's backward with its own forward",
                               acts, {r: i})
    return seen


def _place(a: Action, r: int, i: int, seen: Positions, acts: Sequence[Sequence[Action]], where: tuple[int, ...],
           n_stages: int, m: int) -> None:
    """Record that ``a`` sits at rank ``r``, index ``i``, or raise if it cannot be there."""
    s, _, mb = a
    if 0 <= s < n_stages and where[s] == r and (mb is None or 0 <= mb < m) and a not in seen:
        seen[a] = (r, i)
        return
    if not 0 <= s < n_stages:
        raise fail(f"rank {r} step {i}: {a} names stage {s}, but the plan has {n_stages} stages", acts, {r: i})
    if where[s] != r:
        raise fail(f"rank {r} step {i}: {a} belongs to stage {s}, which runs on rank {where[s]}", acts, {r: i})
    if a not in seen:
        raise fail(f"rank {r} step {i}: {a} names micro-batch {mb}, but the plan has {m}", acts, {r: i})
    r0, i0 = seen[a]
    raise fail(f"{a} appears twice (rank {r0} step {i0} and rank {r} step {i})", acts, {r0: i0, r: i})


def _check_complete(plan: Plan, seen: Positions, check_order: bool) -> None:
    acts, where = plan.actions, plan.stage_to_rank
    training = is_training(a.kind for a in seen)
    F, B, I, W = Kind.F, Kind.B, Kind.I, Kind.W
    for s in range(plan.num_stages):
        r = where[s]
        end = {r: len(acts[r]) - 1}
        for mb in plan.microbatches_of(s):
            f = new_action((s, F, mb))
            if f not in seen:
                raise fail(f"stage {s} never runs the forward of micro-batch {mb} ({f})", acts, end)
            if not training:
                continue
            b, i_, w = new_action((s, B, mb)), new_action((s, I, mb)), new_action((s, W, mb))
            has_b, has_i, has_w = b in seen, i_ in seen, w in seen
            if has_b and (has_i or has_w):
                raise fail(f"micro-batch {mb} on stage {s} has both a full backward and a split one", acts,
                           {r: seen[b][1]})
            if not has_b and not (has_i and has_w):
                missing = b if not has_i and not has_w else (i_ if not has_i else w)
                raise fail(f"stage {s} never runs {missing}", acts, end)
            if not check_order:
                continue
            first = b if has_b else i_
            if seen[first][1] < seen[f][1]:
                raise fail(f"{first} runs before its forward {f} on rank {r}", acts, {r: seen[first][1]})
            if has_w and seen[w][1] < seen[i_][1]:
                raise fail(f"{w} runs before its input grad {i_} on rank {r}", acts, {r: seen[w][1]})


def _check_messages(plan: Plan, seen: Positions) -> None:
    """Every send has its receive; a message is sent after its producer and received before its consumer."""
    acts = plan.actions
    grads = grad_producers(plan)
    for a, (r, i) in seen.items():
        if a.kind in COMM_KINDS:
            other = matching(a)
            if other not in seen:
                raise fail(f"{a} on rank {r} has no matching {other}", acts, {r: i})
        if a.kind not in COMPUTE_KINDS:
            continue
        for key in dependencies(a, plan.stages_per_pipe, grads):
            d = Action(*key)
            pr = plan.stage_to_rank[d.stage]
            if pr == r:
                if d in seen and seen[d][1] > i:
                    raise fail(f"{a} runs before {d}, whose output it needs, on rank {r}", acts, {r: i})
                continue
            send_kind, recv_kind = message_kinds(d)
            send, recv = Action(d.stage, send_kind, d.microbatch), Action(a.stage, recv_kind, a.microbatch)
            if recv not in seen or seen[recv][1] > i:
                raise fail(f"{a} on rank {r} needs {recv} before it", acts, {r: i})
            if send not in seen or d not in seen or seen[send][1] < seen[d][1]:
                spot = seen.get(send, seen.get(d, (pr, 0)))
                raise fail(f"{send} on rank {pr} must come after {d}", acts, {pr: spot[1]})


def _check_channel_order(plan: Plan) -> None:
    """Between two ranks, the receives come in the order of the sends."""
    acts, where = plan.actions, plan.stage_to_rank
    sent: dict[tuple[int, int], list[tuple[Action, int]]] = {}
    for r, ra in enumerate(acts):
        for i, a in enumerate(ra):
            if a.kind in SEND_KINDS:
                sent.setdefault((r, where[peer_stage(a)]), []).append((a, i))
    for r, ra in enumerate(acts):
        position = {}
        for i, a in enumerate(ra):
            if a.kind in RECV_KINDS:
                position[matching(a)] = (a, i)
        for (src, dst), sends in sent.items():
            if dst != r:
                continue
            last = -1
            for send, i in sends:
                recv, j = position[send]
                if j < last:
                    raise fail(f"rank {src} sends {send} after an earlier message to rank {r}, which receives "
                               f"it first ({recv}): NCCL and gloo would match the two crossed", acts, {src: i, r: j})
                last = j


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
        raise fail(f"plan {plan.schedule!r} deadlocks when sends block until received ({stuck})", acts, marks)
