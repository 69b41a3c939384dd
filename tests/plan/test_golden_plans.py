"""Golden plans: every schedule's compute order, and its lowering, at a small size, stored in
tests/data/plans as torch's CSV layout (one row per rank). A change to a schedule or to the
lowering shows here as a readable diff; regenerate with ``PPSIM_UPDATE_GOLDEN=1 pytest tests/plan/test_golden_plans.py``
after checking the new order is right."""

from __future__ import annotations

import os

import pytest

from conftest import DATA
from ppsim.plan import Plan, lower, schedules, validate

GOLDEN = DATA / "plans"
RANKS, MICROBATCHES = 4, 8


def _sizes(name: str) -> int:
    """Chunks: each schedule's default (2 for those that take several, else 1)."""
    return schedules.describe(name).chunks.default


def _cases() -> list[tuple[str, str]]:
    out = []
    for name in schedules.NAMES:
        out.append((name, "compute"))
        if schedules.describe(name).training:
            out += [(name, "rendezvous"), (name, "async")]
    return out


def _compute(name: str) -> Plan:
    """The schedule's plan; auto's is the best of its search on unit costs with a 2p budget."""
    if name != schedules.SEARCHED:
        return schedules.build(name, RANKS, MICROBATCHES, _sizes(name))
    from ppsim.plan.order_search.candidates import candidates
    from ppsim.plan.order_search.timeline import Timing

    return candidates(RANKS, MICROBATCHES, Timing.unit(RANKS), [2.0 * RANKS] * RANKS)[0].plan


def _plan(name: str, form: str) -> Plan:
    compute = _compute(name)
    if form == "compute":
        return compute
    # two replicas and gradient clipping: every end-of-step kind appears
    return lower(compute, data_parallel=2, rendezvous=form == "rendezvous", clip=True)


@pytest.mark.parametrize("name, form", _cases(), ids=lambda x: x)
def test_the_plan_is_the_golden_one(name: str, form: str) -> None:
    plan = _plan(name, form)
    validate(plan, rendezvous=form == "rendezvous")
    path = GOLDEN / f"{name}-p{RANKS}-m{MICROBATCHES}-v{_sizes(name)}.{form}.csv"
    if os.environ.get("PPSIM_UPDATE_GOLDEN") == "1":
        path.write_text(plan.to_csv())
    assert path.is_file(), f"{path} is missing: run with PPSIM_UPDATE_GOLDEN=1 to write it"
    assert [list(r) for r in plan.actions] == Plan.actions_from_csv(path.read_text()), (
        f"{name} ({form}) no longer builds the plan in {path.name}")


def test_every_golden_file_belongs_to_a_schedule() -> None:
    expected = {f"{n}-p{RANKS}-m{MICROBATCHES}-v{_sizes(n)}.{f}.csv" for n, f in _cases()}
    assert {p.name for p in GOLDEN.glob("*.csv")} == expected
