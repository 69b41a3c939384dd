"""Lowering a compute-only plan: sends and receives, then the end of the step.

Lowering places sends and receives by the plan's ideal timeline (:func:`~ppsim.plan.deps.ideal_times`:
every action as soon as its inputs exist, communication free, relative durations given): a
receive right before the action that consumes it. With non-blocking sends, a send goes right after
the action that produced it. For sends that block until the peer receives (gloo / NCCL
rendezvous) both ends of a message take the same key, the consumer's start in the ideal timeline
(then a fixed order of messages), and every rank orders its messages by that key. Then a rank can
only wait on a message whose key is smaller than the one its peer waits on, so no cycle of waits
can form: the plan cannot deadlock. For fill-drain and 1F1B-like schedules both ends then reach
each message together; schedules whose messages do not line up (interleaved with backward !=
forward) pay for blocking sends with stalls, which is why Megatron and torch use non-blocking
sends for them (``comm: async``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ppsim.errors import PlanError
from ppsim.gc_pause import gc_paused
from ppsim.plan.action import (
    COMM_KINDS,
    COMPUTE_KINDS,
    RECV_KINDS,
    SEND_KINDS,
    Action,
    Kind,
    matching,
    new_action,
    peer_stage,
)
from ppsim.plan.deps import Duration, default_duration, dependencies, grad_producers, ideal_times
from ppsim.plan.memo import per_plan
from ppsim.plan.plan import Plan
from ppsim.plan.posted import finishes, posted_order
from ppsim.plan.rules import is_training
from ppsim.plan.validate import structure_holds, validate_structure


def add_comms(plan: Plan, duration: Duration = default_duration, *, rendezvous: bool = True) -> Plan:
    """Insert a send after every output another rank consumes and a receive before its use.

    Actions are placed by the ideal timeline (``duration`` gives relative compute times). A
    receive goes right before its consumer, so a rank never waits for data earlier than it needs
    it. Without ``rendezvous`` the send goes right after its producer; with it (sends block until
    received, as gloo's) the send takes its receive's key, so both ends order their messages alike
    and the plan cannot deadlock (see the module docstring).
    """
    if not plan.kinds().isdisjoint(COMM_KINDS):
        raise PlanError("plan already has communication actions; add_comms runs once")
    if not rendezvous:
        return plan.with_actions(_posted(plan), lowered=True)
    grads = grad_producers(plan)
    where = plan.stage_to_rank
    per_pipe = plan.stages_per_pipe
    act = new_action
    SEND_F, SEND_B, RECV_F, RECV_B = Kind.SEND_F, Kind.SEND_B, Kind.RECV_F, Kind.RECV_B
    OVERLAP = Kind.OVERLAP_F_B
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
            for part in (a.parts if a.kind is OVERLAP else (a,)):
                for d_stage, d_kind, mb in dependencies(part, per_pipe, grads):
                    pr = where[d_stage]
                    if pr == r:
                        continue
                    is_act = d_kind is Kind.F
                    order = 1 if is_act else 0  # within one moment, grads before activations
                    entries[pr].append((t, depth, 0, order, d_stage, mb,
                                        act((d_stage, SEND_F if is_act else SEND_B, mb))))
                    mine((t, depth, 0, order, d_stage, mb, act((part.stage, RECV_F if is_act else RECV_B, mb))))
    lowered = []
    for es in entries:
        es.sort()
        lowered.append([e[6] for e in es])
    return plan.with_actions(lowered, lowered=True)


def _posted(plan: Plan) -> list[list[Action]]:
    """Posted sends: each receive right before its consumer, each send right after its producer
    (:func:`~ppsim.plan.posted.posted_order`), then the sends to each peer in the order it
    receives them. A plan whose dependencies form a cycle is refused with the grid (a plan a
    registered schedule built has none: it is not walked again)."""
    if not plan.built_by_a_schedule and not finishes(plan):
        ideal_times(plan)  # raises the error with the grid of where every rank is stuck
        raise PlanError(f"plan {plan.schedule!r} cannot finish")  # pragma: no cover - ideal_times raised
    ranks, in_order = posted_order(plan)
    return ranks if in_order else in_receive_order(ranks, plan.stage_to_rank)


def in_receive_order(ranks: list[list[Action]], where: tuple[int, ...]) -> list[list[Action]]:
    """Each rank's sends to a peer in the order that peer receives them, each as early as that
    allows. NCCL, and gloo without tags, match the sends and receives between two ranks in the
    order they are posted: activations and grads have the same shape, so two messages crossed
    would be taken silently for each other. A send held back waits only for messages its receiver
    needs first, so the plan cannot deadlock where it did not."""
    expected: dict[tuple[int, int], list[Action]] = {}  # (sender, receiver) -> sends in receive order
    for r, seq in enumerate(ranks):
        for a in seq:
            if a.kind in RECV_KINDS:
                send = matching(a)
                expected.setdefault((where[send.stage], r), []).append(send)
    out = []
    for r, seq in enumerate(ranks):
        if not any(a.kind in SEND_KINDS for a in seq):
            out.append(seq)
            continue
        ready: dict[int, set[Action]] = {}
        nxt: dict[int, int] = {}
        mine: list[Action] = []
        for a in seq:
            if a.kind not in SEND_KINDS:
                mine.append(a)
                continue
            peer = where[peer_stage(a)]
            ready.setdefault(peer, set()).add(a)
            order, i = expected[(r, peer)], nxt.get(peer, 0)
            while i < len(order) and order[i] in ready[peer]:
                ready[peer].discard(order[i])
                mine.append(order[i])
                i += 1
            nxt[peer] = i
        out.append(mine)
    return out


def add_step_end(plan: Plan, data_parallel: int = 1, clip: bool = False, *, training: bool | None = None) -> Plan:
    """Append, on every rank, the gradient all-reduce across data-parallel replicas (when there are
    several), with ``clip`` the gradient-norm all-reduce over the pipeline (once per rank, on its
    last virtual stage), and the optimizer step of each of its stages. Forward-only plans get none
    (``training``: whether the plan has backward passes, when the caller knows; else looked up)."""
    if training is None:
        training = is_training(plan.kinds())
    if not training:
        return plan.with_actions(plan.actions, lowered=True)
    out: list[tuple[Action, ...]] = []
    for r, ra in enumerate(plan.actions):
        stages = sorted(plan.stages_of_rank(r), reverse=True)
        tail: list[Action] = []
        if data_parallel > 1:
            tail += [Action(s, Kind.REDUCE_GRAD) for s in stages]
        if clip:
            tail.append(Action(stages[0], Kind.CLIP))
        tail += [Action(s, Kind.OPT) for s in stages]
        out.append(tuple(ra) + tuple(tail))
    return plan.with_actions(out, lowered=True)


@per_plan
def _structure_checked(plan: Plan) -> bool:
    """The plan's placement, ranges, duplicates and completeness, checked once per plan (a search
    lowers the same plan for every recompute mode and ZeRO stage; a registered schedule's plan is
    valid by construction); raises PlanError when broken."""
    if not plan.built_by_a_schedule and not structure_holds(plan):
        validate_structure(plan, check_order=False)  # raises, with the grid
    return True


def lower(plan: Plan, data_parallel: int = 1, duration: Duration = default_duration, *, rendezvous: bool = True,
          clip: bool = False) -> Plan:
    """The full lowering of a compute-only plan: communication, then end-of-step actions.

    The input is validated; the output is valid by construction (the property tests check it with
    :func:`~ppsim.plan.validate.validate`), so the hot path does not pay for checking it again.
    ``meta["sends"]`` records the semantics its messages were ordered for (``rendezvous`` or
    ``posted``), which is what a saved plan is validated against when read back."""
    with gc_paused():
        if not rendezvous:  # posted sends are placed without times: one lowering per plan serves every cost
            shared = _lowered_for_posted_sends(plan, data_parallel, clip, plan.schedule, plan.num_microbatches)
            return replace(shared, meta={**plan.meta, "sends": "posted"})
        return _lowered(plan, data_parallel, duration, rendezvous, clip)


@per_plan(kept=4)  # a lowered plan is three times its plan: keep few
def _lowered_for_posted_sends(plan: Plan, data_parallel: int, clip: bool, *_identity: object) -> Plan:
    return _lowered(plan, data_parallel, default_duration, False, clip)


def _lowered(plan: Plan, data_parallel: int, duration: Duration, rendezvous: bool, clip: bool) -> Plan:
    _structure_checked(plan)  # a misordered rank shows as a cycle below
    try:
        with_comms = add_comms(plan, duration, rendezvous=rendezvous)
    except PlanError:
        validate_structure(plan)  # a misordered pair is a clearer message than the deadlock
        raise
    lowered = add_step_end(with_comms, data_parallel, clip, training=is_training(plan.kinds()))
    # meta["sends"]: the semantics its messages were ordered for
    return replace(lowered, meta={**lowered.meta, "sends": "rendezvous" if rendezvous else "posted"})
