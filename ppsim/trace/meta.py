"""The trace metadata that comes from the plan: one function for simulated and measured traces alike."""

from __future__ import annotations

from typing import Any

from ppsim.plan import Plan


def plan_meta(plan: Plan, *, source: str, clock: str, comm: str, message_bytes: int) -> dict[str, Any]:
    """What a Trace's ``meta`` says of the plan it ran (``source``: simulated | measured); a
    searched plan (schedule ``auto``) adds its ``search``: the plan chosen and those it beat."""
    searched = {"search": plan.meta["search"]} if "search" in plan.meta else {}
    return {
        "source": source,
        "clock": clock,
        "time_unit": "ms",
        "schedule": plan.schedule,
        "num_ranks": plan.num_ranks,
        "num_microbatches": plan.num_microbatches,
        "chunks": plan.chunks,
        "stage_to_rank": list(plan.stage_to_rank),
        "comm": comm,
        "message_bytes": message_bytes,
        **searched,
    }
