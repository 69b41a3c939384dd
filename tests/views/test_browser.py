"""The HTML pages in a real headless Chromium with the network cut off: they load, Plotly draws them,
every span is one drawn bar, zooming the time axis moves the plots that share it (on the timeline,
a drag on the overview zooms the plots under it), and labels show only where they fit.

Chromium comes from the test set-up (`make test` installs Debian's chromium); without one these
tests are skipped with that reason.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from browser import ZOOM, find_chromium, probe
from typer.testing import CliRunner

from conftest import GPT_YAML, ROOT, SCENARIOS, gpt
from ppsim.cli import app
from ppsim.inputs.scenario import load
from ppsim.prediction import predict
from ppsim.search.sweep import schedule_variants
from ppsim.trace import Trace
from ppsim.trace.compare import compare_traces
from ppsim.views.palette import MEMORY_PART_COLORS
from ppsim.views.render.bars import LABEL_SIZE
from ppsim.views.render.compare_html import write_compare_html
from ppsim.views.render.gantt import write_html

CHROMIUM = find_chromium()
pytestmark = [
    pytest.mark.slow,  # starts a browser for each page
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine: `make test` installs it "
                                                "(apt-get install chromium), or set PPSIM_CHROMIUM"),
]
DATA = ROOT / "tests" / "data"


def kinds(spans: list) -> dict[str, int]:
    return dict(Counter(s.action.kind.value for s in spans))


def span_bars(found: dict) -> dict[str, int]:
    """The bars drawn per kind, the critical path's outlines and the hatching of waits (drawn over
    some of them) and the parts of each rank's peak left out."""
    return {k: v for k, v in found["bars"].items() if k not in ("critical path", "waiting") and k not in MEMORY_PART_COLORS}


def assert_loaded(found: dict) -> None:
    assert found["errors"] == []
    assert found["plotly"] and found["rendered"]
    assert not [r for r in found["resources"] if r.startswith(("http:", "https:"))]


def test_timeline_page_draws_one_bar_per_span_and_zooms_from_the_overview(tmp_path: Path) -> None:
    trace = predict(gpt().with_overrides(stages=4, microbatches=8)).trace
    found = probe(write_html(trace, tmp_path / "run.html"), CHROMIUM)
    assert_loaded(found)
    assert span_bars(found) == kinds(trace.spans)
    assert sum(span_bars(found).values()) == len(trace.spans)
    # a drag on the overview zooms the Gantt and the memory plot; the overview keeps the step, framing the window
    step = [min(s.start for s in trace.spans), max(s.end for s in trace.spans)]
    assert found["ranges"] == {"xaxis": pytest.approx(step), "xaxis2": list(ZOOM), "xaxis3": list(ZOOM),
                               "xaxis4": [-0.6, 3.6]}  # each rank's peak: ranks, not time
    assert found["frame"] == list(ZOOM)
    # the hover, built from the bar's arrays: action, rank, lane, start, end, duration
    assert re.fullmatch(r"0F0rank 0 · computestart 0\.000 msend [\d.]+ msduration [\d.]+ ms"
                        r"slack [\d.]+ ms \(it could end that much later: the same step\)", found["hover"]), found["hover"]


def test_make_run_page_is_small_and_labels_only_what_fits(tmp_path: Path) -> None:
    """gpt.yaml as `make run` draws it (8 ranks x 128 micro-batches): <= 1 MB beyond plotly.js; no label
    squeezed at the whole step; zoomed in, labels appear, all at one size, each inside its bar."""
    from plotly.offline.offline import get_plotlyjs

    trace = predict(gpt()).trace
    page = write_html(trace, tmp_path / "gpt.html")
    assert len(page.read_bytes()) - len(get_plotlyjs().encode()) <= 1_000_000
    window = (0.0, max(s.end for s in trace.spans) / 8)
    found = probe(page, CHROMIUM, detail=("xaxis2", window))
    assert_loaded(found)
    assert sum(span_bars(found).values()) == len(trace.spans)
    assert found["labels"]["outside"] == [] and set(found["labels"]["sizes"]) <= {LABEL_SIZE}
    zoomed = found["labels_zoomed"]
    assert zoomed["shown"] > found["labels"]["shown"] and zoomed["sizes"] == [LABEL_SIZE]
    assert zoomed["outside"] == []


def test_the_network_is_really_cut_off(tmp_path: Path) -> None:
    """A page that loads plotly.js from the CDN must not render: proof the probe runs offline."""
    from ppsim.formats import HTML_MARKER
    from ppsim.views.render.gantt import gantt_figure

    trace = Trace.load(DATA / "tiny-1f1b.predicted.trace.json")
    page = tmp_path / "cdn.html"
    page.write_text(HTML_MARKER + "\n" + gantt_figure(trace).to_html(include_plotlyjs="cdn", full_html=True))
    found = probe(page, CHROMIUM)
    assert not found["plotly"]


def test_measured_timeline_without_memory_draws_every_span(tmp_path: Path) -> None:
    trace = Trace.load(DATA / "tiny-gpipe.measured.trace.json")
    found = probe(write_html(trace, tmp_path / "measured.html"), CHROMIUM)
    assert_loaded(found)
    assert sum(span_bars(found).values()) == len(trace.spans)
    assert set(found["ranges"]) == {"xaxis", "xaxis2"} and found["ranges"]["xaxis2"] == list(ZOOM)


def test_predicted_vs_measured_page_draws_both_traces(tmp_path: Path) -> None:
    pred = Trace.load(DATA / "tiny-1f1b.predicted.trace.json")
    meas = Trace.load(DATA / "tiny-1f1b.measured.trace.json")
    page = write_compare_html(pred, meas, compare_traces(pred, meas, 5), tmp_path / "compare.html")
    found = probe(page, CHROMIUM)
    assert_loaded(found)
    assert span_bars(found) == kinds(pred.spans + meas.spans)


def test_compare_schedules_page_puts_small_timelines_on_one_time_axis(tmp_path: Path) -> None:
    names = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1"]
    page = tmp_path / "schedules.html"
    result = CliRunner().invoke(app, ["compare-schedules", str(SCENARIOS / "gpt-interleaved.yaml"), "--microbatches",
                                      "8", "--schedules", ",".join(names), "--html", str(page)])
    assert result.exit_code == 0, result.output
    found = probe(page, CHROMIUM)
    assert_loaded(found)
    variants = schedule_variants(load(SCENARIOS / "gpt-interleaved.yaml").with_overrides(microbatches=8), names)
    compute = [s for v in variants for s in v.trace.spans if s.lane == "compute"]
    summary = {name: len(names) for name in ("step time", "bubble", "peak memory")}
    assert span_bars(found) == kinds(compute)
    assert found["points"] == summary  # a dot per schedule in each plot under the timelines
    timelines = ["xaxis"] + [f"xaxis{i}" for i in range(2, len(names) + 1)]
    assert {k: found["ranges"][k] for k in timelines} == {k: list(ZOOM) for k in timelines}
    dot_plots = set(found["ranges"]) - set(timelines)
    assert len(dot_plots) == 3 and all(found["ranges"][k] != list(ZOOM) for k in dot_plots)


def test_sweep_page_renders(tmp_path: Path) -> None:
    page = tmp_path / "sweep.html"
    result = CliRunner().invoke(app, ["sweep", str(GPT_YAML), "--microbatches", "4,8,16",
                                      "--stages", "4,8", "--html", str(page)])
    assert result.exit_code == 0, result.output
    found = probe(page, CHROMIUM)
    assert_loaded(found)
    assert span_bars(found) == {}
    assert set(found["ranges"]) == {"xaxis", "xaxis2", "xaxis3"}  # throughput, bubble, memory
