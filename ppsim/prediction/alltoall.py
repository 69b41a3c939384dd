"""Where a predicted step's expert-parallel all-to-alls fall: the dispatch and combine of every MoE
layer of every pass, as intervals per rank on the trace's clock (``meta["alltoall_spans"]``, what a
measured run fills with the times its ranks spent in ``all_to_all_single``).

The simulator prices a MoE stage's all-to-alls inside its passes (``StageCost.forward_overlap_ms``,
``backward_overlap_ms``); this places them where a layer runs them. A pass of L MoE layers is L
equal slots; in a forward's slot the attention runs, then the dispatch, the experts, the combine at
the slot's end (DeepSeek's attention / dispatch / MLP / combine); a backward's slot runs them in
reverse: the combine's gradient first, then the experts', the dispatch's gradient, the attention's.
How a slot's compute splits between attention and experts is not priced apart: the dispatch sits at
its middle. An overlapped forward and backward (DualPipe, combined 1F1B) runs each all-to-all beside
the other micro-batch's compute: its slot holds the forward's dispatch and combine and the
backward's two, a quarter apart, each for its whole time (hidden where the other pass computes)."""

from __future__ import annotations

from ppsim.costs.table import CostTable
from ppsim.plan import Kind, Overlap
from ppsim.trace import Trace

Interval = tuple[float, float]


def _spread(start: float, duration: float, layers: int, pieces: list[tuple[float, float]]) -> list[Interval]:
    """``layers`` equal slots from ``start`` over ``duration``; in each, every (offset as a share of
    the slot, length in ms) piece; lengths are per layer."""
    slot = duration / layers
    out = []
    for i in range(layers):
        at = start + i * slot
        out += [(at + share * slot, at + share * slot + length) for share, length in pieces]
    return out


def alltoall_intervals(trace: Trace, costs: CostTable) -> list[list[Interval]]:
    """Per rank, the intervals its passes spend in expert-parallel all-to-alls (see the module
    docstring), in time order; empty lists where the costs have none."""
    out: list[list[Interval]] = [[] for _ in range(trace.num_ranks)]
    stages = costs.stages
    for s in trace.spans:
        a = s.action
        if isinstance(a, Overlap):
            f, b = stages[a.forward.stage], stages[a.backward.stage]
            layers = max(f.moe_layers, b.moe_layers)
            if not layers or not (f.forward_overlap_ms or b.backward_overlap_ms):
                continue
            fw, bw = f.forward_overlap_ms / (2 * layers), (b.backward_overlap_ms + b.self_hidden_ms) / (2 * layers)
            pieces = [(0.0, fw), (0.25, bw), (0.5, fw), (0.75, bw)]
            out[s.rank] += [iv for iv in _spread(s.start, s.duration, layers, pieces) if iv[1] > iv[0]]
            continue
        if a.kind not in (Kind.F, Kind.B, Kind.I):
            continue
        c = stages[a.stage]
        total = c.forward_overlap_ms if a.kind is Kind.F else c.backward_overlap_ms + c.self_hidden_ms
        if not c.moe_layers or total <= 0:
            continue
        one = total / (2 * c.moe_layers)  # a dispatch or a combine
        slot = s.duration / c.moe_layers
        compute = max(slot - 2 * one, 0.0) / 2 / slot if slot else 0.0  # the share before the middle one
        if a.kind is Kind.F:  # attention, dispatch, experts, combine
            pieces = [(compute, one), (1 - one / slot if slot else 0.0, one)]
        else:  # the combine's gradient, the experts', the dispatch's gradient, the attention's
            pieces = [(0.0, one), (one / slot + compute if slot else 0.0, one)]
        out[s.rank] += _spread(s.start, s.duration, c.moe_layers, pieces)
    return [sorted(r) for r in out]
