"""The plan's rules are written once (ppsim/plan/rules.py): what the passes write out for speed is held
to them here: the dependency rule, the sends and receives of lowering, the list scheduler's inverse."""

from __future__ import annotations

import itertools

import pytest

from ppsim.plan import Action, Kind, schedules
from ppsim.plan.deps import dependencies
from ppsim.plan.order_search.list_scheduler import scheduled_needs, scheduled_users
from ppsim.plan.posted import posted_order
from ppsim.plan.rules import MAKES, MESSAGES, NEEDS, RECEIVES, SENDS, Fact, FlagLayout

COMPUTE = (Kind.F, Kind.B, Kind.I, Kind.W)
MAKER = {Fact.FORWARD: Kind.F, Fact.INPUT_GRAD: Kind.I}


def _by_the_table(s: int, kind: Kind, mb: int, n: int, grads: dict) -> set[tuple[int, Kind, int]]:
    return {(s + off, MAKER.get(fact) or grads.get((s + off, mb), Kind.B), mb)
            for off, fact in NEEDS[kind] if 0 <= s + off < n}


@pytest.mark.parametrize("n", [1, 2, 5])
@pytest.mark.parametrize("grad_kind", [Kind.B, Kind.I])
def test_dependencies_are_the_rule(n: int, grad_kind: Kind) -> None:
    grads = {(s, mb): grad_kind for s in range(n) for mb in range(3)}
    for s, kind, mb in itertools.product(range(n), COMPUTE, range(3)):
        assert set(dependencies((s, kind, mb), n, grads)) == _by_the_table(s, kind, mb, n, grads), (s, kind, mb)


def test_every_message_goes_the_way_its_consumer_needs_it() -> None:
    """A fact needed from another stage travels towards that stage, in the message that carries it."""
    crossing = {(fact, off) for needs in NEEDS.values() for off, fact in needs if off}
    assert {fact for fact, _ in crossing} == set(MESSAGES)
    for fact, off in crossing:
        assert MESSAGES[fact][2] == -off  # it comes from stage s + off, so it goes -off
        assert any(fact in made for made in MAKES.values())
    for kind in COMPUTE:
        assert {(r, off) for r, off, _ in RECEIVES[kind]} == {(MESSAGES[f][1], off) for off, f in NEEDS[kind] if off}


def test_the_flag_layout_is_three_blocks() -> None:
    layout = FlagLayout(4, 8)
    flags = {layout.flag(f, s, mb) for f in Fact for s in range(4) for mb in range(8)}
    assert flags == set(range(layout.total)) and layout.total == 3 * 32
    assert layout.flag(Fact.GRAD_MADE, 2, 3) == layout.block(Fact.GRAD_MADE) + 2 * 8 + 3


def _placed_by_the_tables(plan) -> list[list[str]]:
    """posted_order's placement, every action by the tables: the receives of what it needs from
    another rank right before it, the sends of what another rank needs right after (from and to
    stages of its own pipe)."""
    where, n = plan.stage_to_rank, plan.stages_per_pipe
    out = []
    for ra in plan.actions:
        placed: list[str] = []
        for a in ra:
            parts = a.parts
            for s, k, mb in parts:
                placed += [str(Action(s, recv, mb)) for recv, off, _ in RECEIVES.get(k, ())
                           if (s + off) // n == s // n and where[s + off] != where[s]]
            placed.append(str(a))
            for s, k, mb in parts:
                placed += [str(Action(s, send, mb)) for send, off, _ in SENDS.get(k, ())
                           if (s + off) // n == s // n and where[s + off] != where[s]]
        out.append(placed)
    return out


@pytest.mark.parametrize("name", sorted(schedules.SCHEDULES))
def test_posted_sends_and_receives_are_placed_as_the_tables_say(name: str) -> None:
    info = schedules.get(name)
    for p in (info.ranks,) if info.ranks else [p for p in (1, 2, 3, 4) if p % info.pipes == 0]:
        v = info.chunks.default
        m = info.microbatches.nearest(p, 2 * p * v, v) or 2 * p * v
        plan = info.build(p, m, v)
        placed, _ = posted_order(plan)
        assert [[str(a) for a in r] for r in placed] == _placed_by_the_tables(plan), (name, p)


@pytest.mark.parametrize(("n", "m", "backward"), [(1, 1, Kind.B), (3, 4, Kind.B), (4, 3, Kind.I), (2, 5, Kind.I)])
def test_the_list_schedulers_users_are_the_inverse_of_its_needs(n: int, m: int, backward: Kind) -> None:
    kinds = (Kind.F, Kind.I, Kind.W) if backward is Kind.I else (Kind.F, Kind.B)
    grads = {(s, mb): backward for s in range(n) for mb in range(m)}
    actions = [Action(s, k, mb) for s in range(n) for mb in range(m) for k in kinds]
    inverse: dict[Action, list[Action]] = {a: [] for a in actions}
    for a in actions:
        for d in scheduled_needs(a, n, grads):
            inverse[d].append(a)
    for a in actions:
        assert sorted(scheduled_users(a, n, m, backward)) == sorted(inverse[a]), a
