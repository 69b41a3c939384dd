"""How long each action of a plan takes, from a CostTable: the one table of which StageCost field
times which kind, used by the simulator and by lowering (which places messages by the same times).

An overlapped forward and backward (:class:`~ppsim.plan.Overlap`) takes both passes' time less the
communication each hides under the other's compute: a MoE layer's dispatch and combine, as
DeepSeek's DualPipe and Megatron's combined 1F1B interleave them with the other micro-batch's
attention and experts. Where the stages price their MoE blocks' parts (``StageCost.moe_phases``)
the passes pair block by block in the three phases of :func:`paired_block_ms`, each all-to-all
hidden up to its own phase's compute; else a pass's hideable communication
(``StageCost.forward_overlap_ms`` / ``backward_overlap_ms``) runs while the other pass computes,
up to that compute (the pass less all its communication).
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

from ppsim.costs.table import CostTable, MoEPhases
from ppsim.plan import Action, Kind, Overlap

#: the StageCost field that gives the duration of each kind that occupies the compute lane
DURATION_FIELD: dict[Kind, str] = {Kind.F: "forward_ms", Kind.B: "backward_ms", Kind.I: "input_grad_ms",
                                   Kind.W: "weight_grad_ms", Kind.OPT: "optimizer_ms"}
_BACKWARD_PIECES = frozenset({Kind.F, Kind.B, Kind.I, Kind.W})


def paired_block_ms(f: MoEPhases, b: MoEPhases, sm_share: float = 0.0, weight_grads: bool = True) -> float:
    """A MoE block's forward and another's backward run as one, in Megatron-Core's three phases
    (``TransformerLayerSchedulePlan.run``, after DeepSeek's DualPipe): the backward's combine beside
    the forward's attention; the forward's dispatch, then the backward's (once its experts' input
    grads are done) beside the backward's experts' input and weight grads and then the forward's
    experts (once its dispatch is done); the forward's combine beside the backward's attention input
    grads; then the attention's weight grads (none with ``weight_grads`` off: a split backward's I).
    The compute beside a communication runs on the SMs it leaves (``sm_share`` of them taken);
    never longer than the two blocks one after the other."""
    def beside(comm: float, compute: float) -> float:
        return max(comm, compute + sm_share * min(comm, compute))

    w_mlp, w_attention = (b.mlp_weight_grad, b.attention_weight_grad) if weight_grads else (0.0, 0.0)
    first = beside(b.combine_backward, f.attention_forward)
    comm_end = max(f.dispatch_forward, b.mlp_input_grad) + b.dispatch_backward
    compute = b.mlp_input_grad + w_mlp + f.mlp_forward
    compute_end = max(b.mlp_input_grad + w_mlp, f.dispatch_forward) + f.mlp_forward
    second = max(comm_end, compute_end + sm_share * min(f.dispatch_forward + b.dispatch_backward, compute))
    third = beside(f.combine_forward, b.attention_input_grad)
    # never longer than the two one after the other (the slowed compute is counted where it waits too)
    return min(first + second + third + w_attention, f.forward_ms + b.backward_ms(weight_grads))


def overlapped_ms(costs: CostTable, a: Overlap) -> float:
    """How long ``a`` (a forward and a backward overlapped) takes: both passes, less the
    communication of each that the other's compute hides: block by block in the phases of
    :func:`paired_block_ms` where both stages know their MoE blocks' parts, else pass by pass."""
    f, b = costs.stages[a.forward.stage], costs.stages[a.backward.stage]
    backward = getattr(b, DURATION_FIELD[a.backward.kind])
    if f.moe_phases is not None and b.moe_phases is not None:
        pairs = min(f.moe_layers, b.moe_layers)
        whole = a.backward.kind is not Kind.I  # an input grad leaves its weight grads to a W
        serial = f.moe_phases.forward_ms + b.moe_phases.backward_ms(whole)
        paired = paired_block_ms(f.moe_phases, b.moe_phases, costs.overlap_sm_share, whole)
        # what the backward's own delayed weight grads hid is back in the pair, which hides it itself
        # (less the slowdown of the backward's weight grads beside it, charged where it hid it alone)
        own = b.self_hidden_ms * (1 - costs.overlap_sm_share) if whole else 0.0
        return f.forward_ms + backward + own - pairs * (serial - paired)
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
    pairs: dict[tuple[int, int, Kind], float] = {}  # an overlap's time by its two passes' stages and kinds

    def duration(a: Action | Overlap) -> float:
        if isinstance(a, Overlap):
            key = (a.forward.stage, a.backward.stage, a.backward.kind)
            ms = pairs.get(key)
            if ms is None:
                ms = pairs[key] = overlapped_ms(costs, a)
            return ms
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
