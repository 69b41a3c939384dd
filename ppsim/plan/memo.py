"""Facts derived from a plan's actions alone, computed once per plan: a search prices the same
plan many times (the tuner, per recompute mode and ZeRO stage), and a plan's actions never change.

A fact is remembered by the identity of the plan's ``actions`` (a tuple: immutable) and its
placement, for the few plans most recently asked about; what it remembers must not be mutated.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    from ppsim.plan.plan import Plan

T = TypeVar("T")
KEPT = 64  #: plans remembered per fact


def per_plan(fact: Callable[[Plan], T]) -> Callable[[Plan], T]:
    """``fact(plan)``, computed once for each plan's actions and placement."""
    known: OrderedDict[tuple[int, tuple[int, ...]], tuple[object, T]] = OrderedDict()

    @wraps(fact)
    def cached(plan: Plan) -> T:
        key = (id(plan.actions), plan.stage_to_rank)
        hit = known.get(key)
        if hit is not None and hit[0] is plan.actions:
            known.move_to_end(key)
            return hit[1]
        value = fact(plan)
        known[key] = (plan.actions, value)  # holding the actions keeps their id from being reused
        if len(known) > KEPT:
            known.popitem(last=False)
        return value

    return cached
