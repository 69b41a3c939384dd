"""How long each action of a plan takes, from a CostTable: the one table of which StageCost field
times which kind, used by the simulator and by lowering (which places messages by the same times).

An overlapped forward and backward (:class:`~ppsim.plan.Overlap`) takes both passes' time less the
communication each hides under the other's compute: a pass's hideable communication (a MoE layer's
dispatch and combine, ``StageCost.forward_overlap_ms`` / ``backward_overlap_ms``, as DeepSeek's
DualPipe and Megatron's combined 1F1B interleave them with the other micro-batch's attention and
MLP) runs while the other pass computes, up to that compute (the pass less all its communication).
The rest of the communication inside the passes (tensor-parallel collectives: on the compute's
own stream) stays exposed; without all-to-alls the overlap only reorders the work, as torch's
runtime runs it (its parts one after the other). With delayed weight grads (Megatron's
``--delay-wgrad-compute``) a backward has already hidden part of its all-to-alls under its own
weight grads (``StageCost.self_hidden_ms``); the pair then takes at least its all-to-alls' whole
time, which one communication stream runs one after the other. The communication kernels beside
the compute take ``CostTable.overlap_sm_share`` of the SMs while they run (DeepEP's, HybridEP's:
``training.moe_comm_sms`` of the device's ``sms``), so the compute ends that share of the hidden
time later."""

from __future__ import annotations

from collections.abc import Callable

from ppsim.costs.table import CostTable
from ppsim.plan import Action, Kind, Overlap

#: the StageCost field that gives the duration of each kind that occupies the compute lane
DURATION_FIELD: dict[Kind, str] = {Kind.F: "forward_ms", Kind.B: "backward_ms", Kind.I: "input_grad_ms",
                                   Kind.W: "weight_grad_ms", Kind.OPT: "optimizer_ms"}
_BACKWARD_PIECES = frozenset({Kind.F, Kind.B, Kind.I, Kind.W})


def overlapped_ms(costs: CostTable, a: Overlap) -> float:
    """How long ``a`` (a forward and a backward overlapped) takes: both passes, less the
    communication of each that the other's compute hides."""
    f, b = costs.stages[a.forward.stage], costs.stages[a.backward.stage]
    backward = getattr(b, DURATION_FIELD[a.backward.kind])
    forward_compute = f.forward_ms - min(f.forward_comm_ms, f.forward_ms)
    backward_compute = backward - min(b.backward_comm_ms, backward)
    hidden = (min(f.forward_overlap_ms, f.forward_ms, backward_compute)
              + min(b.backward_overlap_ms, backward, forward_compute))
    # while the hidden communication runs, its kernels hold a share of the SMs: the compute beside
    # it runs on the rest, so it ends that share of the hidden time later
    slowed = hidden * costs.overlap_sm_share
    return max(f.forward_ms + backward - hidden + slowed,
               f.forward_overlap_ms + b.backward_overlap_ms + b.self_hidden_ms)


def compute_ms(costs: CostTable) -> Callable[[Action | Overlap], float]:
    """Duration of a compute action (F, B, I, W, an overlapped F and B) of the table's stages; 0 for
    every other kind (what :func:`ppsim.plan.lower` needs to place messages on the ideal timeline)."""
    table = {(k, kind): getattr(c, field) for k, c in enumerate(costs.stages)
             for kind, field in DURATION_FIELD.items() if kind in _BACKWARD_PIECES}
    def duration(a: Action | Overlap) -> float:
        if isinstance(a, Overlap):
            return overlapped_ms(costs, a)
        return table.get((a.stage, a.kind), 0.0)

    return duration


def alltoall_ms(costs: CostTable, actions: tuple[Action | Overlap, ...] | list[Action | Overlap]) -> float:
    """The time ``actions`` (one rank's) spend in the experts' all-to-alls and do not hide: each
    forward's and input grad's dispatch and combine (``forward_overlap_ms``, ``backward_overlap_ms``;
    a whole backward's too), an overlapped action's less what the other pass's compute hides."""
    total = 0.0
    for a in actions:
        if isinstance(a, Overlap):
            f, b = costs.stages[a.forward.stage], costs.stages[a.backward.stage]
            both = f.forward_ms + getattr(b, DURATION_FIELD[a.backward.kind])
            total += f.forward_overlap_ms + b.backward_overlap_ms - (both - overlapped_ms(costs, a))
        elif a.kind is Kind.F:
            total += costs.stages[a.stage].forward_overlap_ms
        elif a.kind in (Kind.B, Kind.I):
            total += costs.stages[a.stage].backward_overlap_ms
    return total
