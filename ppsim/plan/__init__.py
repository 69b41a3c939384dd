"""The Plan contract: Actions, Plans, their text forms, the passes over them, and the schedules.

Imports nothing of ppsim but errors, formats and gc_pause: a plan knows no costs and no hardware.
"""

from ppsim.plan.action import (
    BACKWARD_KINDS,
    COMM_KINDS,
    COMPUTE_KINDS,
    LANE_OF_KIND,
    RECV_KINDS,
    SEND_KINDS,
    STEP_KINDS,
    Action,
    Kind,
    Lane,
    Overlap,
    matching,
    message_kinds,
    peer_stage,
)
from ppsim.plan.deps import Duration, default_duration, dependencies, ideal_times, number_steps
from ppsim.plan.grid import aligned_grid, render_grid
from ppsim.plan.lower import add_comms, add_step_end, lower
from ppsim.plan.plan import Plan, loop_placement, v_placement
from ppsim.plan.validate import validate, validate_structure

__all__ = [
    "BACKWARD_KINDS", "COMM_KINDS", "COMPUTE_KINDS", "LANE_OF_KIND", "Lane", "RECV_KINDS", "SEND_KINDS", "STEP_KINDS",
    "Action", "Duration", "Kind", "Overlap", "Plan", "add_comms", "add_step_end", "aligned_grid", "default_duration",
    "dependencies", "ideal_times", "loop_placement", "lower", "matching", "message_kinds", "number_steps",
    "peer_stage", "render_grid", "v_placement", "validate", "validate_structure",
]
