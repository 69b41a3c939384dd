"""Plan -> torch.distributed.pipelining's actions: the lowered plan's actions one for one.

torch's action text form is ppsim's (``2F0``, ``0I3``, ``1SEND_B2``, ``0REDUCE_GRAD``), so every
compute, send, receive and gradient-reduction action maps to the torch action of the same text.
Gradient clipping and the optimizer step have no torch counterpart: they are the rank's tail,
run after torch's step in the plan's order.

Receives are posted one compute action ahead of where the plan puts them (right before their
consumer), as torch's own lowering posts them: the data then moves while the rank computes, as
ppsim's model of posted sends assumes. The wait for it stays where the plan has the receive
(``ppexec.runtimes.torch_pipelining.program`` times it there).
"""

from __future__ import annotations

from typing import Any

from ppsim.api import COMPUTE_KINDS, RECV_KINDS, Action, Kind, Plan
from ppsim.errors import PlanError

#: the plan's kinds that run after torch's step (torch has no action for them)
TAIL_KINDS = frozenset({Kind.CLIP, Kind.OPT})


def torch_actions(plan: Plan) -> dict[int, list[Any]]:
    """Every rank's actions as torch ``_Action`` s (what ``_prepare_schedule_with_comms`` takes,
    with ``format="compute_comms"``: run as given), without the tail."""
    from torch.distributed.pipelining.schedules import _Action

    out: dict[int, list[Any]] = {}
    for rank, actions in enumerate(plan.actions):
        out[rank] = []
        for a in posted_early(list(actions)):
            if a.kind in TAIL_KINDS:
                continue
            torch_action = _Action.from_str(str(a))
            if str(torch_action) != str(a):  # from_str matches a prefix: check that the whole text came through
                raise PlanError(f"torch reads action {a} as {torch_action}; this torch does not know ppsim's action")
            out[rank].append(torch_action)
    return out


def posted_early(actions: list[Action]) -> list[Action]:
    """The rank's actions with each receive moved before the compute action that precedes it (its
    relative order among the receives kept, so two ranks still match their messages in order)."""
    out: list[Action] = []
    last_compute = -1  # where in ``out`` the latest compute action sits
    for a in actions:
        if a.kind in RECV_KINDS and last_compute >= 0:
            out.insert(last_compute, a)
            last_compute += 1
        else:
            out.append(a)
            if a.kind in COMPUTE_KINDS:
                last_compute = len(out) - 1
    return out


def waits_before(actions: list[Action]) -> dict[str, list[Action]]:
    """For each compute action (by text), the receives the plan puts right before it: the data
    the rank waits for just before it runs."""
    out: dict[str, list[Action]] = {}
    pending: list[Action] = []
    for a in actions:
        if a.kind in RECV_KINDS:
            pending.append(a)
        elif a.kind in COMPUTE_KINDS:
            out[str(a)] = pending
            pending = []
    return out


def tail(plan: Plan, rank: int) -> list[Action]:
    """What ``rank`` runs after torch's step, in the plan's order: clipping, the optimizer steps."""
    actions = plan.actions[rank]
    first = next((i for i, a in enumerate(actions) if a.kind in TAIL_KINDS), len(actions))
    if any(a.kind not in TAIL_KINDS for a in actions[first:]):
        raise PlanError(f"rank {rank} runs {actions[first]} before the end of its step; clipping and the optimizer "
                        "step come last")
    return list(actions[first:])
