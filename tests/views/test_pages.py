"""The side-by-side pages at real sizes (issue 20): compare-schedules as small timelines on one time
axis that fit a screen, and the device's memory on every memory chart (compare-schedules, sweep,
tune) with what does not fit marked."""

from __future__ import annotations

import pytest

from conftest import gpt
from ppsim.search.sweep import grid_variants, schedule_variants
from ppsim.search.tune.evaluate import Evaluation
from ppsim.search.tune.report import TuneResult, figure
from ppsim.search.tune.space import Candidate
from ppsim.views.palette import LIMIT_COLOR
from ppsim.views.render.schedules_html import schedules_figure
from ppsim.views.render.sweep_html import sweep_figure

GIB = 2**30
NAMES = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1"]


@pytest.fixture(scope="module")
def schedules():
    """gpt.yaml as it is (8 ranks x 128 micro-batches): GPipe holds every micro-batch, ~790 GiB."""
    variants = schedule_variants(gpt(), NAMES)
    return variants, schedules_figure(variants, "gpt")


def limit_lines(fig) -> list:
    return [s for s in fig.layout.shapes if s.name == "device memory"]


def test_compare_schedules_fits_one_screen_on_one_time_axis(schedules) -> None:
    variants, fig = schedules
    assert fig.layout.height <= 1150  # was about 3,400 px of full Gantt charts
    timelines = [f"xaxis{i if i > 1 else ''}" for i in range(1, len(NAMES) + 1)]
    assert [fig.layout[k].matches for k in timelines] == [None] + ["x"] * (len(NAMES) - 1)
    ends = [max(s.end for s in v.trace.spans) for v in variants]
    assert list(fig.layout.xaxis.range) == [0, max(ends)]  # every schedule at the same scale
    for k in timelines:
        assert fig.layout[k].showticklabels  # each small timeline keeps its time axis
    # compute rows only, one per rank
    for i, v in enumerate(variants, start=1):
        axis = fig.layout[f"yaxis{i if i > 1 else ''}"]
        assert list(axis.ticktext) == [f"rank {r}" for r in range(v.trace.num_ranks)]
    horizontal = [d for d in fig.data if d.type == "bar" and d.orientation == "h"]
    assert {d.name for d in horizontal} <= {"F", "B", "I", "W", "OPT"}


def test_compare_schedules_figure_is_valid_plotly(schedules) -> None:
    import plotly.graph_objects as go

    go.Figure(schedules[1].to_dict())


def test_compare_schedules_draws_the_device_and_marks_what_does_not_fit(schedules) -> None:
    variants, fig = schedules
    memory = next(d for d in fig.data if d.name == "peak memory")
    peaks = [v.peak_memory_bytes() / GIB for v in variants]
    assert list(memory.x) == pytest.approx(peaks) and list(memory.y) == NAMES
    capacity = variants[0].summary.memory_capacity_bytes / GIB
    (line,) = limit_lines(fig)
    assert (line.x0, line.xref) == (capacity, memory.xaxis)
    axis = fig.layout[memory.xaxis.replace("x", "xaxis")]
    assert axis.type == "log" and 10 ** axis.range[1] > max(peaks)  # GPipe's 790 GiB beside 72: a log axis
    over = [p > capacity for p in peaks]
    assert over[0] and not over[1]  # GPipe's ~790 GiB against 1F1B's ~72 GiB on 80 GiB devices
    assert [w > 0 and c == LIMIT_COLOR for w, c in zip(memory.marker.line.width, [memory.marker.line.color] * 4)] \
        == over
    assert [c == LIMIT_COLOR for c in memory.textfont.color] == over
    titles = [a.text for a in fig.layout.annotations]
    for name, o in zip(NAMES, over):
        title = next(t for t in titles if f"<b>{name}</b>" in t)
        assert ("DOES NOT FIT" in title) == o


def test_compare_schedules_step_times_read_at_their_spread(schedules) -> None:
    """The step-time axis spans the values, not 0 to the slowest (their spread is a few per cent),
    and each dot says how far it is from the fastest."""
    variants, fig = schedules
    steps = next(d for d in fig.data if d.name == "step time")
    times = [v.summary.step_time_ms for v in variants]
    assert list(steps.x) == pytest.approx(times)
    low, high = fig.layout[steps.xaxis.replace("x", "xaxis")].range
    assert min(times) - low < (max(times) - min(times)) and low > 0.9 * min(times) and high > max(times)
    fastest = times.index(min(times))
    for i, (t, text) in enumerate(zip(times, steps.text)):
        assert text.endswith("(least)") if i == fastest else f"(+{t / min(times) - 1:.1%})" in text


def test_compare_schedules_at_every_schedule_labels_each_rank() -> None:
    """Twelve and more schedules of 8 ranks: rows tall enough to read, each rank labelled."""
    from ppsim.views.render.schedules_html import LABEL_PX

    variants = [v for v in schedule_variants(gpt(), ["gpipe", "1f1b", "interleaved-1f1b", "combined-1f1b", "looped-bfs",
                                                     "zb-h1", "zb-h2", "zb-v", "v-half", "v-min", "dualpipev",
                                                     "interleaved-zb"]) if v.ok]
    assert len(variants) == 12
    fig = schedules_figure(variants, "gpt")
    for i in range(1, len(variants) + 1):
        axis = fig.layout[f"yaxis{i if i > 1 else ''}"]
        assert list(axis.ticktext) == [f"rank {r}" for r in range(8)]
        domain = axis.domain[1] - axis.domain[0]
        plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
        assert domain * plot_px / 8 >= LABEL_PX  # pixels per rank


def test_sweep_draws_the_device_and_marks_what_does_not_fit() -> None:
    variants = grid_variants(gpt(), [8], [8, 32, 128])
    fig = sweep_figure(variants, "microbatches", None, "gpt")
    memory = [d for d in fig.data if d.yaxis == "y3"]
    assert len(memory) == 1 and list(memory[0].y) == pytest.approx([v.peak_memory_bytes() / GIB for v in variants])
    capacity = variants[0].summary.memory_capacity_bytes / GIB
    (line,) = limit_lines(fig)
    assert (line.y0, line.yref) == (capacity, "y3")
    over = [v.peak_memory_bytes() / GIB > capacity for v in variants]
    assert over == [True, True, False]
    for d in fig.data:  # on every plot, a point that does not fit is an open marker
        assert [s == "circle-open" for s in d.marker.symbol] == over
    assert "does not fit" in fig.layout.title.text


def _evaluation(p: int, peak_gib: float, fits: bool, throughput: float | None) -> Evaluation:
    return Evaluation(Candidate(p, 8 // p, 1, 1, 16, "1f1b", 1, "none", 0), fits=fits, simulated=fits,
                      peak_memory_bytes=peak_gib * GIB, memory_capacity_bytes=80 * GIB,
                      step_time_ms=1000.0 if fits else None, throughput_samples_per_s=throughput,
                      bubble_fraction=0.1 if fits else None)


def test_tune_page_draws_the_device_memory() -> None:
    evals = [_evaluation(2, 60.0, True, 10.0), _evaluation(4, 30.0, True, 9.0), _evaluation(1, 120.0, False, None)]
    fig = figure(TuneResult("small", 8, evals, 1.0, 1, "local"))
    (line,) = limit_lines(fig)
    assert (line.xref, line.x0, line.x1) == ("x3", 80.0, 80.0)
    assert fig.layout.xaxis3.range[1] > 80
    assert "1 plan over the device's memory" in fig.layout.annotations[2].text
