"""The Plotly Gantt: numeric ms axis, one bar trace per kind, offline HTML."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter

import pytest

from conftest import gpt
from ppsim.errors import TraceError
from ppsim.plan import Kind
from ppsim.prediction import predict
from ppsim.trace import Trace
from ppsim.trace.metrics import summarize
from ppsim.views.render.gantt import gantt_figure, write_html


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


def bars(fig) -> list:
    """The Gantt's bar traces (the memory plot's lines left out)."""
    return [d for d in fig.data if d.type == "bar"]


def _kinds(t: Trace) -> set[str]:
    return {s.action.kind.value for s in t.spans}


def test_html_is_self_contained(trace: Trace, tmp_path) -> None:
    path = write_html(trace, tmp_path / "g.html")
    html = path.read_text()
    assert "<html" in html[:300].lower() and html.rstrip().lower().endswith("</html>")
    assert re.search(r"plotly\.js v\d", html), "plotly.js bundle not inlined"
    assert len(html) > 1_000_000
    srcs = re.findall(r"<script[^>]*\bsrc\s*=\s*[\"']([^\"']*)", html)
    assert not [s for s in srcs if "cdn.plot.ly" in s or s.startswith("http")], srcs
    assert '"type":"date"' not in html.replace(" ", "")


def test_time_axis_is_numeric(trace: Trace) -> None:
    fig = gantt_figure(trace)
    assert fig.layout.xaxis.type in (None, "linear")
    for bar in bars(fig):
        assert bar.type == "bar" and bar.orientation == "h"
        assert all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bar.base)
        assert all(isinstance(x, (int, float)) and x >= 0 for x in bar.x)
    starts = sorted(b for bar in bars(fig) for b in bar.base)
    assert starts == sorted(s.start for s in trace.spans)
    assert fig.layout.barmode == "overlay"


def test_one_bar_per_span_and_one_trace_per_kind(trace: Trace) -> None:
    fig = gantt_figure(trace)
    assert sum(len(bar.base) for bar in bars(fig)) == len(trace.spans)
    names = [bar.name for bar in bars(fig)]
    assert len(names) == len(set(names))
    assert set(names) == _kinds(trace)
    per_kind = Counter(s.action.kind.value for s in trace.spans)
    assert {bar.name: len(bar.base) for bar in bars(fig)} == dict(per_kind)
    # each bar sits where its span is: end - start as its length
    f = next(bar for bar in bars(fig) if bar.name == "F")
    f_spans = [s for s in trace.spans if s.action.kind is Kind.F]
    got = [v for pair in sorted(zip(f.base, f.x, strict=True)) for v in pair]
    want = [v for pair in sorted((s.start, s.duration) for s in f_spans) for v in pair]
    assert got == pytest.approx(want)


def test_colours_are_distinct_per_kind(zb: Trace) -> None:
    fig = gantt_figure(zb)
    colours = [bar.marker.color for bar in bars(fig)]
    assert all(isinstance(c, str) for c in colours)
    assert len(set(colours)) == len(colours) == len(_kinds(zb))
    assert bars(gantt_figure(zb))[0].marker.color == colours[0]  # fixed, not cycled


def test_rows_ranks_top_to_bottom_with_thinner_comm_rows(trace: Trace) -> None:
    fig = gantt_figure(trace)
    rows = list(fig.layout.yaxis.categoryarray)
    assert fig.layout.yaxis.autorange == "reversed"
    compute_rows = [r for r in rows if re.fullmatch(r"rank \d+", r)]
    assert compute_rows == [f"rank {r}" for r in range(trace.num_ranks)]
    assert "rank 0 send" in rows and "rank 0 recv" in rows
    assert rows.index("rank 0") < rows.index("rank 0 send") < rows.index("rank 1")
    for bar in bars(fig):
        assert set(bar.y) <= set(rows)
    f = next(bar for bar in bars(fig) if bar.name == "F")
    send = next(bar for bar in bars(fig) if bar.name == "SEND_F")
    assert set(f.y) <= set(compute_rows)
    assert all(y.endswith(" send") for y in send.y)
    assert max(send.width) < min(f.width)


def test_hover_has_start_end_bytes_peer(trace: Trace) -> None:
    fig = gantt_figure(trace)
    for bar in bars(fig):
        assert "start" in bar.hovertemplate and "end" in bar.hovertemplate
        assert "customdata" in bar.hovertemplate
    send = next(bar for bar in bars(fig) if bar.name == "SEND_F")
    spans = {str(s.action): s for s in trace.spans if s.action.kind is Kind.SEND_F and s.rank == 0}
    row = next(c for c in send.customdata if c[1] == 0)
    span = spans[row[0]]
    assert (row[3], row[4]) == pytest.approx((span.start, span.end))
    assert f"peer rank {span.peer}" in row[6] and f"{span.bytes:,}" in row[6]
    f = next(bar for bar in bars(fig) if bar.name == "F")
    assert all("peer" not in c[6] for c in f.customdata)


def test_labels_are_microbatch_numbers(trace: Trace) -> None:
    fig = gantt_figure(trace)
    assert bars(fig)[0].textposition == "inside"
    assert fig.layout.uniformtext.mode == "hide"
    f = next(bar for bar in bars(fig) if bar.name == "F")
    mbs = {s.action.microbatch for s in trace.spans if s.action.kind is Kind.F}
    assert set(f.text) == {str(m) for m in mbs}
    assert len(mbs) == trace.meta["num_microbatches"]


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
    assert sum(len(bar.base) for bar in bars(fig)) == len(interleaved.spans)
    f = next(bar for bar in bars(fig) if bar.name == "F")
    assert {t.split(":")[0] for t in f.text} == {"c0", "c1"}
    assert "2 chunks" in fig.layout.title.text


def test_zero_bubble_has_i_and_w(zb: Trace) -> None:
    fig = gantt_figure(zb)
    names = {bar.name for bar in bars(fig)}
    assert {"I", "W"} <= names and "B" not in names
    assert sum(len(bar.base) for bar in bars(fig)) == len(zb.spans)
    assert "zb-h1" in fig.layout.title.text


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
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_title_shows_peak_memory_per_rank() -> None:
    from ppsim.prediction import predict

    fits = gantt_figure(predict(gpt().with_overrides(microbatches=16)).trace).layout.title.text
    assert "peak memory per rank" in fits and "of 80 GiB: fits" in fits
    over = predict(gpt().with_overrides(microbatches=16, stages=2, partition="uniform")).trace
    assert "DOES NOT FIT" in gantt_figure(over).layout.title.text


# ----- memory per stage under the Gantt -----------------------------------------------------------
def test_memory_plot_shares_the_time_axis(trace: Trace) -> None:
    fig = gantt_figure(trace)
    lines = [d for d in fig.data if d.type == "scatter"]
    memory = sorted((c for c in trace.counters if c.name == "memory_bytes"), key=lambda c: c.rank)
    assert len(lines) == len(memory) == trace.num_ranks
    # bars on the top plot, memory lines under it, and the two x axes move together
    assert {b.xaxis for b in bars(fig)} == {"x"} and {ln.xaxis for ln in lines} == {"x2"}
    assert fig.layout.xaxis.matches == "x2" or fig.layout.xaxis2.matches == "x"
    assert fig.layout.xaxis2.title.text == "time (ms)"
    assert fig.layout.yaxis2.title.text == "memory (GiB)"
    end = max(s.end for s in trace.spans)
    for line, counter in zip(lines, memory):
        assert line.line.shape == "hv"  # the value holds until the next point
        assert max(line.y) == pytest.approx(max(v for _, v in counter.points) / 2**30)
        assert list(line.x[: len(counter.points)]) == [t for t, _ in counter.points]
        assert line.x[-1] == pytest.approx(end)  # held to the end of the step
    peaks = [st.peak_memory_bytes / 2**30 for st in summarize(trace).per_rank]
    assert [max(ln.y) for ln in lines] == pytest.approx(peaks)


def test_trace_without_memory_gets_the_gantt_alone() -> None:
    from conftest import ROOT

    measured = Trace.load(ROOT / "tests" / "data" / "tiny-1f1b.measured.trace.json")
    fig = gantt_figure(measured)
    assert all(d.type == "bar" for d in fig.data) and "xaxis2" not in fig.layout
    assert "measured" in fig.layout.title.text and "peak memory" not in fig.layout.title.text


def test_header_has_throughput_and_mfu(trace: Trace) -> None:
    s = summarize(trace)
    text = gantt_figure(trace).layout.title.text
    assert f"throughput {s.throughput_samples_per_s:,.1f} samples/s" in text
    assert f"{s.tokens_per_s:,.0f} tokens/s" in text and f"MFU {s.mfu:.1%}" in text
