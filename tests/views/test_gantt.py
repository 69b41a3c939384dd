"""The timeline page: overview strip of idle time, the Gantt (numeric ms axis, one bar trace per kind
and lane, typed arrays), memory per rank with the device's memory, separate legends, a small page."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from conftest import gpt
from ppsim.errors import TraceError
from ppsim.plan import Kind
from ppsim.prediction import predict
from ppsim.trace import Trace
from ppsim.trace.critical import critical_path
from ppsim.trace.metrics import summarize
from ppsim.views.render.bars import LABEL_SIZE
from ppsim.views.render.gantt import gantt_figure, write_html
from ppsim.views.render.memory import MEMORY_LEGEND
from ppsim.views.render.overview import busy_until, idle_fractions


def _trace(**overrides: object) -> Trace:
    return predict(gpt().with_overrides(**overrides)).trace


@pytest.fixture(scope="module")
def trace() -> Trace:
    return _trace(microbatches=8, stages=4)


@pytest.fixture(scope="module")
def interleaved() -> Trace:
    return _trace(schedule="interleaved-1f1b", chunks=2, microbatches=8, stages=4)


@pytest.fixture(scope="module")
def zb() -> Trace:
    return _trace(schedule="zb-h1", microbatches=16, stages=4)


@pytest.fixture(scope="module")
def big() -> Trace:
    """gpt.yaml as it is: 8 ranks x 128 micro-batches, `make run`'s page."""
    return predict(gpt()).trace


def bars(fig) -> list:
    """The Gantt's bar traces of the spans (the overview, the memory plots, the critical path's
    outlines and the hatching of waits left out)."""
    return [d for d in fig.data if d.type == "bar" and d.xaxis == "x2" and d.name not in ("critical path", "waiting")]


def bar(fig, name: str):
    return next(b for b in fig.data if b.type == "bar" and b.name == name)


def _kinds(t: Trace) -> set[str]:
    return {s.action.kind.value for s in t.spans}


def test_html_is_self_contained(trace: Trace, tmp_path) -> None:
    import re

    path = write_html(trace, tmp_path / "g.html")
    html = path.read_text()
    assert "<html" in html[:300].lower() and html.rstrip().lower().endswith("</html>")
    assert re.search(r"plotly\.js v\d", html), "plotly.js bundle not inlined"
    srcs = re.findall(r"<script[^>]*\bsrc\s*=\s*[\"']([^\"']*)", html)
    assert not [s for s in srcs if "cdn.plot.ly" in s or s.startswith("http")], srcs
    assert '"type":"date"' not in html.replace(" ", "")


def test_page_at_gpt_size_is_small(big: Trace, tmp_path) -> None:
    """Issue 20: at gpt.yaml's size (8 ranks x 128 micro-batches) the page holds <= 1 MB beyond plotly.js."""
    from plotly.offline.offline import get_plotlyjs

    page = write_html(big, tmp_path / "gpt.html")
    beyond = len(page.read_bytes()) - len(get_plotlyjs().encode())
    assert 0 < beyond <= 1_000_000, beyond
    # the bulk is typed arrays, not a string per bar (but for the few on the critical path)
    fig = gantt_figure(big)
    for b in bars(fig):
        assert isinstance(b.customdata, np.ndarray) and b.customdata.dtype == np.float32
        assert isinstance(b.x, np.ndarray) and isinstance(b.y, np.ndarray)
        assert b.hovertext is None
    assert len(bar(fig, "critical path").hovertext) < len(big.spans) / 10


def test_the_figure_is_valid_plotly(trace: Trace) -> None:
    """The bars skip Plotly's validation while the page is built (write time); the whole figure passes it."""
    import plotly.graph_objects as go

    go.Figure(gantt_figure(trace).to_dict())


def test_time_axis_is_numeric_and_on_the_timeline(trace: Trace) -> None:
    fig = gantt_figure(trace)
    for b in bars(fig):
        assert b.type == "bar" and b.orientation == "h" and b.xaxis == "x2"
        assert all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in b.base)
        assert all(x >= 0 for x in b.x)
    starts = sorted(x for b in bars(fig) for x in b.base)
    assert starts == pytest.approx(sorted(s.start for s in trace.spans), abs=1e-3)
    assert fig.layout.barmode == "overlay"
    # the Gantt's own axis is a labelled time axis, not only the memory plot's
    axis = fig.layout.xaxis2
    assert axis.type == "linear" and axis.title.text == "time (ms)" and axis.showticklabels is not False


def test_one_bar_per_span_and_one_trace_per_kind(trace: Trace) -> None:
    fig = gantt_figure(trace)
    assert sum(len(b.base) for b in bars(fig)) == len(trace.spans)
    names = [b.name for b in bars(fig)]
    assert len(names) == len(set(names)) and set(names) == _kinds(trace)
    per_kind = Counter(s.action.kind.value for s in trace.spans)
    assert {b.name: len(b.base) for b in bars(fig)} == dict(per_kind)
    f = bar(fig, "F")
    got = sorted(zip(f.base, f.x))
    want = sorted((s.start, s.duration) for s in trace.spans if s.action.kind is Kind.F)
    assert np.array(got) == pytest.approx(np.array(want), abs=1e-3)


def test_colours_are_distinct_per_kind(zb: Trace) -> None:
    fig = gantt_figure(zb)
    colours = [b.marker.color for b in bars(fig)]
    assert all(isinstance(c, str) for c in colours)
    assert len(set(colours)) == len(colours) == len(_kinds(zb))
    assert bars(gantt_figure(zb))[0].marker.color == colours[0]  # fixed, not cycled


def test_rows_ranks_top_to_bottom_with_thinner_comm_rows(trace: Trace) -> None:
    fig = gantt_figure(trace)
    axis = fig.layout.yaxis2
    rows = dict(zip(axis.tickvals, axis.ticktext))
    assert list(axis.range) == [max(axis.tickvals) + 0.25, 0]  # top to bottom
    compute = sorted((y, t) for y, t in rows.items() if t.startswith("rank "))
    assert [t for _, t in compute] == [f"rank {r}" for r in range(trace.num_ranks)]
    assert {"send", "recv"} <= set(rows.values())
    f, send = bar(fig, "F"), bar(fig, "SEND_F")
    rank_of = {y: int(t.split()[1]) for y, t in compute}
    assert {rank_of[y] for y in f.y} == set(range(trace.num_ranks))  # compute on the compute rows
    assert {rows[y] for y in send.y} == {"send"}
    assert send.width < f.width
    rank0, rank1 = compute[0][0], compute[1][0]
    assert rank0 < min(y for y, t in rows.items() if t == "send") < rank1


def test_hover_built_from_arrays(trace: Trace) -> None:
    fig = gantt_figure(trace)
    for b in bars(fig):
        assert "start %{base:.3f} ms" in b.hovertemplate and "end %{x:.3f} ms" in b.hovertemplate
        assert "rank %{customdata[0]}" in b.hovertemplate
    send = bar(fig, "SEND_F")
    assert "<b>%{customdata[1]}SEND_F%{customdata[2]}</b>" in send.hovertemplate
    assert "MiB" in send.hovertemplate and "peer rank %{customdata[5]}" in send.hovertemplate
    spans = sorted((s for s in trace.spans if s.action.kind is Kind.SEND_F), key=lambda s: s.start)
    rows = sorted(zip(send.base, send.customdata.tolist()))
    path = critical_path(trace)
    for s, (base, (rank, stage, mb, duration, mib, peer, slack)) in zip(spans, rows):
        assert (base, rank, stage, mb, peer) == pytest.approx((s.start, s.rank, s.action.stage, s.action.microbatch,
                                                                s.peer), abs=1e-3)
        assert (duration, mib) == pytest.approx((s.duration, s.bytes / 2**20), rel=1e-5)
        assert slack == pytest.approx(path.slack(s), abs=1e-3)
    f = bar(fig, "F")
    assert "peer" not in f.hovertemplate and f.customdata.shape == (len(f.base), 5)
    assert "slack %{customdata[4]:,.3f} ms" in f.hovertemplate
    assert "<b>%{customdata[1]}OPT</b>" in bar(fig, "OPT").hovertemplate


def test_labels_only_on_compute_bars_at_one_size(trace: Trace) -> None:
    fig = gantt_figure(trace)
    # one size or none: Plotly hides a label that does not fit its bar rather than shrinking it
    assert fig.layout.uniformtext.mode == "hide" and fig.layout.uniformtext.minsize == LABEL_SIZE
    f = bar(fig, "F")
    assert f.textposition == "inside" and f.textfont.size == LABEL_SIZE
    mbs = {s.action.microbatch for s in trace.spans if s.action.kind is Kind.F}
    assert set(f.text) == {str(m) for m in mbs} and len(mbs) == trace.meta["num_microbatches"]
    for name in ("SEND_F", "RECV_B", "REDUCE_GRAD"):  # thin message rows carry no labels
        assert bar(fig, name).text is None


def memory_lines_of(fig) -> list:
    """The memory-over-time plot's lines (the breakdown of the peaks under it left out)."""
    return [d for d in fig.data if d.type == "scatter" and d.xaxis == "x3"]


def test_separate_legends_for_kinds_and_memory(trace: Trace) -> None:
    fig = gantt_figure(trace)
    lines = memory_lines_of(fig)
    assert lines and all(ln.legend == MEMORY_LEGEND for ln in lines)
    assert all(b.legend in (None, "legend") for b in bars(fig))
    assert fig.layout.legend.title.text == "action kind" and fig.layout.legend2.title.text == "memory"
    # each legend sits beside its own plot
    assert fig.layout.legend.y == fig.layout.yaxis2.domain[1] and fig.layout.legend2.y == fig.layout.yaxis3.domain[1]
    assert [ln.name for ln in lines] == [f"rank {r}" for r in range(trace.num_ranks)]


def test_title_has_schedule_and_step_time(trace: Trace) -> None:
    fig = gantt_figure(trace)
    s = summarize(trace)
    text = fig.layout.title.text
    assert s.schedule in text and f"{s.step_time_ms:.2f} ms" in text
    assert f"{s.bubble_fraction:.1%}" in text and str(trace.meta["scenario"]) in text
    assert "simulated" in text
    custom = gantt_figure(trace, title="My run").layout.title.text
    assert custom.startswith("My run") and f"{s.step_time_ms:.2f} ms" in custom


def test_interleaved_labels_show_chunk(interleaved: Trace) -> None:
    fig = gantt_figure(interleaved)
    assert sum(len(b.base) for b in bars(fig)) == len(interleaved.spans)
    assert {t.split(":")[0] for t in bar(fig, "F").text} == {"c0", "c1"}
    assert "2 chunks" in fig.layout.title.text


def test_zero_bubble_has_i_and_w(zb: Trace) -> None:
    fig = gantt_figure(zb)
    names = {b.name for b in bars(fig)}
    assert {"I", "W"} <= names and "B" not in names
    assert sum(len(b.base) for b in bars(fig)) == len(zb.spans)
    assert "zb-h1" in fig.layout.title.text


def test_overlapped_actions_name_themselves_on_hover() -> None:
    t = _trace(schedule="dualpipev", chunks=2, microbatches=8, stages=4)
    o = bar(gantt_figure(t), "OVERLAP_F_B")
    assert "%{hovertext}" in o.hovertemplate
    assert sorted(o.hovertext) == sorted(str(s.action) for s in t.spans if s.action.kind is Kind.OVERLAP_F_B)


def test_empty_trace_is_a_clear_error(tmp_path) -> None:
    empty = Trace(spans=[], meta={"schedule": "1f1b", "num_ranks": 2})
    with pytest.raises(TraceError, match="no spans"):
        gantt_figure(empty)
    with pytest.raises(TraceError):
        write_html(empty, tmp_path / "e.html")
    assert not (tmp_path / "e.html").exists()


def test_plotly_is_not_imported_by_ppsim() -> None:
    code = (
        "import sys, ppsim, ppsim.trace, ppsim.trace.metrics, ppsim.prediction, ppsim.views.render.gantt\n"
        "assert 'plotly' not in sys.modules, 'plotly imported at module import time'\n"
        "assert 'numpy' not in sys.modules or 'ppsim.views.render.overview' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_title_shows_peak_memory_per_rank() -> None:
    fits = gantt_figure(_trace(microbatches=16)).layout.title.text
    assert "peak memory per rank" in fits and "of 80 GiB: fits" in fits
    over = _trace(microbatches=16, stages=2, partition="uniform")
    assert "DOES NOT FIT" in gantt_figure(over).layout.title.text


# ----- the overview strip -------------------------------------------------------------------------
def test_busy_until_is_the_union_of_intervals() -> None:
    rng = random.Random(3)
    starts = np.array([rng.uniform(0, 100) for _ in range(40)])
    ends = starts + np.array([rng.uniform(0, 15) for _ in range(40)])
    times = np.linspace(-5, 120, 60)
    got = busy_until(starts, ends, times)
    grid = np.linspace(-5, 120, 125_001)  # brute force: covered points of a fine grid
    covered = np.zeros_like(grid, dtype=bool)
    for s, e in zip(starts, ends):
        covered |= (grid >= s) & (grid < e)
    step = grid[1] - grid[0]
    want = [covered[grid < t].sum() * step for t in times]
    assert got == pytest.approx(want, abs=0.01)
    assert busy_until(np.array([]), np.array([]), times) == pytest.approx(np.zeros_like(times))


def test_overview_shows_each_ranks_bubble(big: Trace) -> None:
    edges, idle = idle_fractions(big)
    s = summarize(big)
    assert edges[0] == pytest.approx(min(x.start for x in big.spans)) and edges[-1] == pytest.approx(s.step_time_ms)
    assert idle.shape == (big.num_ranks, len(edges) - 1)
    # averaged over the step, a rank's idle time is its bubble
    assert idle.mean(axis=1) == pytest.approx([r.bubble_fraction for r in s.per_rank], abs=1e-9)
    # its shape: the warm-up triangle, each rank starting later than the one before
    first_busy = [int(np.argmax(row < 1.0)) for row in idle]
    assert first_busy == sorted(first_busy) and first_busy[0] == 0 < first_busy[-1]


def test_overview_keeps_the_whole_step_and_drives_the_detail(big: Trace) -> None:
    fig = gantt_figure(big)
    heat = fig.data[0]
    assert heat.type == "heatmap" and heat.xaxis == "x" and heat.zmin == 0 and heat.zmax == 1
    start, end = min(s.start for s in big.spans), max(s.end for s in big.spans)
    assert list(fig.layout.xaxis.range) == pytest.approx([start, end])
    assert fig.layout.xaxis.matches is None and fig.layout.yaxis.fixedrange  # not zoomed with the detail
    link = fig.layout.meta["overview"]
    assert link == {"axis": "xaxis", "detail": "xaxis2", "range": pytest.approx([start, end]), "shape": 0}
    frame = fig.layout.shapes[0]
    assert (frame.type, frame.xref, frame.yref) == ("rect", "x", "y domain")
    assert fig.layout.height < 1650  # one screen and a bit, not a wall


# ----- memory per rank under the Gantt ------------------------------------------------------------
def test_memory_plot_shares_the_time_axis(trace: Trace) -> None:
    fig = gantt_figure(trace)
    lines = memory_lines_of(fig)
    memory = sorted((c for c in trace.counters if c.name == "memory_bytes"), key=lambda c: c.rank)
    assert len(lines) == len(memory) == trace.num_ranks
    assert {ln.xaxis for ln in lines} == {"x3"} and fig.layout.xaxis3.matches == "x2"
    assert fig.layout.xaxis3.title.text == "time (ms)" and fig.layout.yaxis3.title.text == "memory (GiB)"
    end = max(s.end for s in trace.spans)
    for line, counter in zip(lines, memory):
        assert line.line.shape == "hv"  # the value holds until the next point
        assert max(line.y) == pytest.approx(max(v for _, v in counter.points) / 2**30, abs=1e-4)
        assert list(line.x[: len(counter.points)]) == pytest.approx([t for t, _ in counter.points], abs=1e-3)
        assert line.x[-1] == pytest.approx(end, abs=1e-3)  # held to the end of the step
    peaks = [st.peak_memory_bytes / 2**30 for st in summarize(trace).per_rank]
    assert [max(ln.y) for ln in lines] == pytest.approx(peaks, abs=1e-4)


@pytest.mark.parametrize("overrides", [{}, {"microbatches": 8, "stages": 4}])
def test_memory_plot_draws_the_device_line(overrides: dict) -> None:
    t = _trace(**overrides)
    fig = gantt_figure(t)
    capacity = t.meta["device_memory_bytes"] / 2**30
    line = next(s for s in fig.layout.shapes if s.name == "device memory")
    assert (line.yref, line.y0, line.y1) == ("y3", capacity, capacity)
    assert any(a.text.startswith("device 80 GiB") for a in fig.layout.annotations)
    top = max(max(d.y) for d in memory_lines_of(fig))
    assert fig.layout.yaxis3.range[1] > max(capacity, top)  # the line and every curve in view


def test_trace_without_memory_gets_overview_and_gantt() -> None:
    from conftest import ROOT

    measured = Trace.load(ROOT / "tests" / "data" / "tiny-1f1b.measured.trace.json")
    fig = gantt_figure(measured)
    assert {d.type for d in fig.data} == {"heatmap", "bar"} and "xaxis3" not in fig.layout
    assert "measured" in fig.layout.title.text and "peak memory" not in fig.layout.title.text
    assert not [s for s in fig.layout.shapes if s.name == "device memory"]


def test_header_has_throughput_and_mfu(trace: Trace) -> None:
    s = summarize(trace)
    text = gantt_figure(trace).layout.title.text
    assert f"throughput {s.throughput_samples_per_s:,.1f} samples/s" in text
    assert f"{s.tokens_per_s:,.0f} tokens/s" in text and f"MFU {s.mfu:.1%}" in text


def test_the_critical_path_is_outlined_and_its_hover_says_what_each_block_waited_for(trace: Trace) -> None:
    from ppsim.trace.critical import critical_path

    fig = gantt_figure(trace)
    path = bar(fig, "critical path")
    on_path = critical_path(trace).spans
    assert list(path.base) == pytest.approx([s.start for s in on_path], abs=1e-3)
    assert path.marker.color == "rgba(0,0,0,0)" and path.marker.line.width > 0  # an outline over the bars
    gantt = [b for b in fig.data if b.type == "bar" and b.xaxis == "x2"]
    assert gantt[-1].name == "critical path"  # drawn last: on top, its hover shown
    waits = [h for h in path.hovertext if "waited" in h]
    assert waits and all("for rank" in h for h in waits)


def test_the_waiting_part_of_a_collective_or_receive_is_hatched_over_it(trace: Trace) -> None:
    """CLIP's all-reduce waits for the last rank to reach it; a receive for its peer to send: the
    hatching covers that wait, inside its block, ending when the other rank got there."""
    fig = gantt_figure(trace)
    waits = next(d for d in fig.data if d.name == "waiting")
    assert waits.marker.pattern.shape == "/"
    path = critical_path(trace)
    expected = sorted((b.after.start - b.waited_ms, b.waited_ms) for s in trace.spans if s.lane != "compute"
                      for b in [path.binding(s)] if b.cause in ("peer", "collective") and b.waited_ms > 0)
    got = sorted(zip(waits.base, waits.x.tolist()))
    assert len(got) == len(expected)
    assert [x for pair in got for x in pair] == pytest.approx([x for pair in expected for x in pair], abs=1e-3)
    clips = [s for s in trace.spans if s.action.kind is Kind.CLIP]
    last = max(clips, key=lambda s: s.start)
    hatched = [h for h in waits.hovertext if "CLIP" in h]
    assert len(hatched) == sum(s.start < last.start - 1e-9 for s in clips)  # every rank but the last in
    assert all("the last rank into the collective" in h for h in hatched)


def test_the_hatching_stays_inside_its_block_on_a_measured_trace() -> None:
    from conftest import DATA
    from ppsim.trace.load import load_trace

    trace = load_trace(DATA / "kineto" / "no-schedule")
    fig = gantt_figure(trace)
    waits = next(d for d in fig.data if d.name == "waiting")  # its receives waited on their peers
    blocks = [(s.start, s.end) for s in trace.spans if s.lane != "compute"]
    for base, width in zip(waits.base, waits.x.tolist()):
        assert width > 0
        assert any(lo - 1e-3 <= base and base + width <= hi + 1e-3 for lo, hi in blocks), (base, width)
