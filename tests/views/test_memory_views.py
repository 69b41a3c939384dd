"""Memory on the timeline page (issue 34): each rank's peak broken down into what it holds (the parts
add up to the peak), and memory over time readable at 16-128 ranks (a heat map with the highest peak
picked out, not 16 overlapping lines in a palette of 8)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import gpt, invoke
from ppsim.cli import app
from ppsim.prediction import predict
from ppsim.trace import Trace
from ppsim.trace.metrics import STATIC_PARTS, summarize
from ppsim.views.render.gantt import gantt_figure
from ppsim.views.render.memory import HEAT_BINS, RANK_LINES, binned_peaks

GIB = 2**30


@pytest.fixture(scope="module")
def wide() -> Trace:
    """gpt.yaml's 40 layers on 20 stages: more ranks than the palette has line colours."""
    return predict(gpt().with_overrides(stages=20, microbatches=40)).trace


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 50)), min_size=1, max_size=30),
       st.integers(1, 25))
def test_each_bin_holds_the_highest_value_the_counter_takes_in_it(points: list[tuple[float, float]], bins: int) -> None:
    points.sort(key=lambda p: p[0])
    times, values = np.array([t for t, _ in points]), np.array([v for _, v in points])
    edges = np.linspace(0.0, 100.0, bins + 1)
    got = binned_peaks(times, values, edges)
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        at_start = [v for t, v in points if t <= lo]  # the last point at or before the bin's start holds there
        inside = [v for t, v in points if lo < t < hi or (t == lo)]
        if i == bins - 1:
            inside += [v for t, v in points if t == hi]  # the last bin closes on the step's end
        expected = max(([at_start[-1]] if at_start else [0.0]) + inside)
        assert got[i] == pytest.approx(expected), (i, lo, hi)


def test_the_parts_of_every_peak_add_up_to_it() -> None:
    s = summarize(predict(gpt().with_overrides(stages=4, microbatches=8)).trace)
    for r in s.per_rank:
        parts = r.peak_parts()
        assert parts is not None and list(parts) == [*STATIC_PARTS, "activations"]
        assert sum(parts.values()) == pytest.approx(r.peak_memory_bytes)
        assert parts["activations"] > 0 and all(v >= 0 for v in parts.values())


def test_json_gives_each_ranks_peak_broken_down() -> None:
    from conftest import GPT_YAML

    res = invoke(app, "run", GPT_YAML, "--stages", "4", "--microbatches", "8", "--json")
    assert res.exit_code == 0, res.output
    for rank in json.loads(res.stdout)["ranks"]:
        parts = rank["peak_memory_parts"]
        assert sum(parts.values()) == pytest.approx(rank["peak_memory_bytes"])
        assert {k: parts[k] for k in STATIC_PARTS} == {k: rank["static_memory_bytes"][k] for k in STATIC_PARTS}


def test_the_page_stacks_each_ranks_peak_against_the_device() -> None:
    trace = predict(gpt().with_overrides(stages=4, microbatches=8)).trace
    fig = gantt_figure(trace)
    per_rank = summarize(trace, waits=False).per_rank
    shapes = [d for d in fig.data if d.xaxis == "x4" and d.fill == "toself"]
    assert [d.name for d in shapes] == [*STATIC_PARTS, "activations"] and {d.legend for d in shapes} == {"legend3"}
    tops = next(d for d in fig.data if d.xaxis == "x4" and d.mode == "markers")
    assert list(tops.y) == pytest.approx([r.peak_memory_bytes / GIB for r in per_rank], abs=1e-3)
    for r, hover in zip(per_rank, tops.hovertext):
        assert f"total {r.peak_memory_bytes / GIB:,.2f} GiB" in hover and f"({r.peak_memory_at})" in hover
    # each part's rectangle on rank r spans [sum of the parts under it, plus its own]
    for r in per_rank:
        parts = r.peak_parts()
        below = 0.0
        for shape, (name, b) in zip(shapes, parts.items()):
            corners = [y for x, y in zip(shape.x, shape.y) if x is not None and abs(x - r.rank) < 0.5]
            assert (min(corners), max(corners)) == pytest.approx((below / GIB, (below + b) / GIB), abs=1e-3), name
            below += b
    line = next(s for s in fig.layout.shapes if s.name == "device memory" and s.yref == "y4")
    assert line.y0 == trace.meta["device_memory_bytes"] / GIB
    top = max(range(4), key=lambda i: per_rank[i].peak_memory_bytes)
    assert any(a.text.startswith(f"rank {top}: ") for a in fig.layout.annotations)


def test_many_ranks_get_a_heat_map_with_the_highest_peak_picked_out(wide: Trace) -> None:
    assert wide.num_ranks > RANK_LINES
    fig = gantt_figure(wide)
    assert not [d for d in fig.data if d.type == "scatter" and d.xaxis == "x3" and d.mode == "lines"]
    heat = next(d for d in fig.data if d.type == "heatmap" and d.xaxis == "x3")
    z = np.asarray(heat.z)
    assert z.shape == (wide.num_ranks, HEAT_BINS)
    peaks = [r.peak_memory_bytes / GIB for r in summarize(wide, waits=False).per_rank]
    assert z.max(axis=1) == pytest.approx(peaks, abs=0.01)  # no peak lost in the binning
    highest = next(d for d in fig.data if d.name == "highest peak")
    assert highest.y[0] == int(np.argmax(peaks)) and fig.layout.yaxis3.autorange == "reversed"
    assert heat.zmax >= max(peaks)
    ticks = list(fig.layout.yaxis3.ticktext)
    assert ticks[0] == "rank 0" and 1 < len(ticks) <= wide.num_ranks
    assert f"(rank {int(np.argmax(peaks))})" in fig.layout.title.text  # the header names the highest rank


def test_a_plan_over_the_device_turns_red_on_the_heat_map() -> None:
    trace = predict(gpt().with_overrides(stages=10, microbatches=20, schedule="gpipe")).trace
    capacity = trace.meta["device_memory_bytes"] / GIB
    heat = next(d for d in gantt_figure(trace).data if d.type == "heatmap" and d.xaxis == "x3")
    assert heat.zmax > capacity  # GPipe holds every micro-batch: over the device
    k = capacity / heat.zmax
    below = [c for at, c in heat.colorscale if at <= k]
    beyond = [c for at, c in heat.colorscale if at > k]
    assert beyond and beyond[-1] == "#c00" and "#c00" not in below


def test_a_peak_a_hair_over_the_device_still_draws() -> None:
    import dataclasses

    from ppsim.views.render.memory import memory_heatmap

    trace = predict(gpt().with_overrides(stages=10, microbatches=20)).trace
    top = max(v for c in trace.counters if c.name == "memory_bytes" for _, v in c.points)
    hair = dataclasses.replace(trace, meta={**trace.meta, "device_memory_bytes": top * (1 - 1e-8)})
    heat, _ = memory_heatmap(hair, hair.meta["device_memory_bytes"])
    import plotly.graph_objects as go

    go.Figure(data=[heat])  # a valid colour scale
    assert [at for at, _ in heat.colorscale] == sorted(at for at, _ in heat.colorscale)
