"""How long each action of a plan takes, from a CostTable: the one table of which StageCost field
times which kind, used by the simulator and by lowering (which places messages by the same times)."""

from __future__ import annotations

from collections.abc import Callable

from ppsim.costs.table import CostTable
from ppsim.plan import Action, Kind

#: the StageCost field that gives the duration of each kind that occupies the compute lane
DURATION_FIELD: dict[Kind, str] = {Kind.F: "forward_ms", Kind.B: "backward_ms", Kind.I: "input_grad_ms",
                                   Kind.W: "weight_grad_ms", Kind.OPT: "optimizer_ms"}
_BACKWARD_PIECES = frozenset({Kind.F, Kind.B, Kind.I, Kind.W})


def compute_ms(costs: CostTable) -> Callable[[Action], float]:
    """Duration of a compute action (F, B, I, W) of the table's stages; 0 for every other kind
    (what :func:`ppsim.plan.lower` needs to place messages on the ideal timeline)."""
    table = {(k, kind): getattr(c, field) for k, c in enumerate(costs.stages)
             for kind, field in DURATION_FIELD.items() if kind in _BACKWARD_PIECES}

    def duration(a: Action) -> float:
        return table.get((a.stage, a.kind), 0.0)

    return duration
