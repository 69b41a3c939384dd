"""Where the experts' all-to-alls fall in a predicted step (``meta["alltoall_spans"]``,
ppsim.prediction.alltoall), and how the timeline page and the Chrome trace show them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import SCENARIOS
from ppsim.inputs.scenario import load
from ppsim.plan import Kind, Overlap
from ppsim.prediction import predict
from ppsim.trace.chrome import from_chrome_trace, to_chrome_trace, validate_chrome_trace
from ppsim.views.render.gantt import gantt_figure

MIXTRAL = SCENARIOS / "mixtral-8x7b.yaml"


def _predict(**plan: Any) -> Any:
    return predict(load(MIXTRAL).with_overrides(**plan))


def _inside(t0: float, t1: float, spans: list[Any]) -> Any:
    return next((s for s in spans if s.start - 1e-5 <= t0 <= t1 <= s.end + 1e-5), None)


def test_each_pass_of_a_moe_stage_dispatches_and_combines_once_per_layer() -> None:
    """1F1B, 2 stages of 16 MoE layers: every forward and backward holds 2 x 16 all-to-alls, each
    1 / 32 of the pass's priced all-to-all time, in the pass, none overlapping another; a rank's
    add up to its meta.alltoall_ms (nothing is hidden without an overlapped schedule)."""
    p = _predict(stages=2, chunks=1, schedule="1f1b", microbatches=4)
    costs = p.workload.costs
    per_rank = p.trace.meta["alltoall_spans"]
    assert costs.stages[0].moe_layers == 16
    for rank, intervals in enumerate(per_rank):
        passes = [s for s in p.trace.spans if s.rank == rank and s.action.kind in (Kind.F, Kind.B)]
        assert len(intervals) == 2 * 16 * len(passes)
        held: dict[Any, list[tuple[float, float]]] = {}
        for t0, t1 in intervals:
            span = _inside(t0, t1, passes)
            assert span is not None
            held.setdefault(span, []).append((t0, t1))
        for span, mine in held.items():
            c = costs.stages[span.action.stage]
            total = c.forward_overlap_ms if span.action.kind is Kind.F else c.backward_overlap_ms
            assert [t1 - t0 for t0, t1 in mine] == pytest.approx([total / 32] * 32, abs=2e-6)  # ns rounding
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(intervals, intervals[1:]))
        assert sum(t1 - t0 for t0, t1 in intervals) == pytest.approx(p.trace.meta["alltoall_ms"][rank])


def test_an_overlapped_pass_runs_both_micro_batches_all_to_alls_beside_the_other_compute() -> None:
    """Combined 1F1B: an overlapped action holds the forward's dispatch and combine and the
    backward's two per layer, each its whole priced time; the exposed total (meta.alltoall_ms) is
    less than what they take."""
    p = _predict(schedule="combined-1f1b")
    costs = p.workload.costs
    for rank, intervals in enumerate(p.trace.meta["alltoall_spans"]):
        overlapped = [s for s in p.trace.spans if s.rank == rank and isinstance(s.action, Overlap)]
        assert overlapped
        for span in overlapped:
            mine = [(t0, t1) for t0, t1 in intervals if _inside(t0, t1, [span])]
            f, b = costs.stages[span.action.forward.stage], costs.stages[span.action.backward.stage]
            assert len(mine) == 4 * f.moe_layers
            assert sum(t1 - t0 for t0, t1 in mine) == pytest.approx(f.forward_overlap_ms + b.backward_overlap_ms,
                                                                    abs=1e-4)
        assert sum(t1 - t0 for t0, t1 in intervals) > p.trace.meta["alltoall_ms"][rank]


def test_a_dense_model_and_the_tuner_record_none() -> None:
    assert "alltoall_spans" not in predict(load(SCENARIOS / "gpt.yaml")).trace.meta
    assert "alltoall_spans" not in predict(load(MIXTRAL), placements=False).trace.meta


def test_the_page_draws_them_on_the_collective_rows() -> None:
    p = _predict(stages=2, chunks=1, schedule="1f1b", microbatches=4)
    fig = gantt_figure(p.trace)
    bars = [d for d in fig.data if d.name == "all-to-all"]
    assert len(bars) == 1 and len(bars[0].x) == sum(map(len, p.trace.meta["alltoall_spans"]))
    assert "coll." in fig.layout.yaxis2.ticktext


def test_the_chrome_trace_gives_them_a_thread_and_reads_back_unchanged(tmp_path: Path) -> None:
    trace = _predict(stages=2, chunks=1, schedule="1f1b", microbatches=4).trace
    doc = json.loads(json.dumps(to_chrome_trace(trace)))
    assert validate_chrome_trace(doc) == []
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    slices = [e for e in doc["traceEvents"] if e.get("cat") == "alltoall"]
    assert len(slices) == sum(map(len, trace.meta["alltoall_spans"]))
    assert {names[(e["pid"], e["tid"])] for e in slices} == {"all-to-all"}
    back = from_chrome_trace(doc)
    assert back.spans == trace.spans and back.meta["alltoall_spans"] == trace.meta["alltoall_spans"]
