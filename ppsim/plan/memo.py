"""Facts derived from a plan's actions alone, computed once per plan: a search prices the same
plan many times (the tuner, per recompute mode and ZeRO stage), and a plan's actions never change.

A fact is remembered by the identity of the plan's ``actions`` (a tuple: immutable) and its
placement, for the few plans most recently asked about; what it remembers must not be mutated.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, overload

if TYPE_CHECKING:  # pragma: no cover
    from ppsim.plan.plan import Plan

T = TypeVar("T")
KEPT = 16  #: plans remembered per fact (each holds its plan's actions alive)


class PerPlan(Protocol[T]):
    """A fact of a plan, computed once per plan; ``remember`` records one known without computing it."""

    #: ``remember(plan, value, *args)``: take ``value`` as the fact of ``plan`` (returns it)
    remember: Callable[..., T]

    def __call__(self, plan: Plan, *args: Any) -> T: ...


@overload
def per_plan(fact: Callable[..., T], *, kept: int = KEPT) -> PerPlan[T]: ...
@overload
def per_plan(fact: None = None, *, kept: int = KEPT) -> Callable[[Callable[..., T]], PerPlan[T]]: ...
def per_plan(fact: Callable[..., T] | None = None, *, kept: int = KEPT) -> Any:
    """``fact(plan, *args)``, computed once for each plan's actions and placement (and each
    combination of the further, hashable, arguments), for the ``kept`` most recent; use as
    ``@per_plan`` or ``@per_plan(kept=N)`` (fewer for facts as big as a plan). The cached function's
    ``remember(plan, value, *args)`` records a fact known without computing it."""
    if fact is None:
        return lambda f: per_plan(f, kept=kept)
    known: OrderedDict[tuple[object, ...], tuple[object, T]] = OrderedDict()

    @wraps(fact)
    def cached(plan: Plan, *args: object) -> T:
        key = (id(plan.actions), plan.stage_to_rank, plan.pipes, args)
        hit = known.get(key)
        if hit is not None and hit[0] is plan.actions:
            known.move_to_end(key)
            return hit[1]
        return remember(plan, fact(plan, *args), *args)

    def remember(plan: Plan, value: T, *args: object) -> T:
        """Take ``value`` as the fact of ``plan`` (what its maker knows without computing it)."""
        key = (id(plan.actions), plan.stage_to_rank, plan.pipes, args)
        known[key] = (plan.actions, value)  # holding the actions keeps their id from being reused
        known.move_to_end(key)
        if len(known) > kept:
            known.popitem(last=False)
        return value

    out = cast("PerPlan[T]", cached)  # the function given its remember below
    out.remember = remember
    return out
