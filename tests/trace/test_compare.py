"""ppsim compare: matching, the figures, refusals, the CLI and the overlay page (stored traces only, no torch)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, SCENARIOS, invoke
from ppsim.cli import app
from ppsim.errors import TraceError
from ppsim.formats import HTML_MARKER
from ppsim.plan import Action
from ppsim.trace import Span, Trace
from ppsim.trace.compare import compare_traces, percentile
from ppsim.trace.metrics import rank_metrics, step_time_ms, summarize
from ppsim.views.render.compare_html import compare_figure

DATA = ROOT / "tests" / "data"
PAIRS = {
    "1f1b": (DATA / "tiny-1f1b.predicted.trace.json", DATA / "tiny-1f1b.measured.trace.json"),
    "gpipe": (DATA / "tiny-gpipe.predicted.trace.json", DATA / "tiny-gpipe.measured.trace.json"),
}
PRED, MEAS = (str(p) for p in PAIRS["1f1b"])
PRED_M8 = str(DATA / "tiny-1f1b-m8.predicted.trace.json")
run_compare = partial(invoke, app, "compare")  #: `ppsim compare ARGS`


def _span(rank: int, lane: str, action: str, start: float, end: float) -> Span:
    return Span(rank, lane, Action.parse(action), start, end)


def _synthetic() -> Trace:
    """Two ranks, one micro-batch: F, send, B, receive, OPT; the step lasts 8 ms."""
    spans = [
        _span(0, "compute", "0F0", 0, 1), _span(0, "send", "0SEND_F0", 1, 1.5), _span(0, "recv", "0RECV_B0", 1.5, 5),
        _span(0, "compute", "0B0", 5, 7), _span(0, "compute", "0OPT", 7, 8),
        _span(1, "recv", "1RECV_F0", 0, 1.5), _span(1, "compute", "1F0", 1.5, 2.5), _span(1, "compute", "1B0", 2.5, 4.5),
        _span(1, "send", "1SEND_B0", 4.5, 5), _span(1, "compute", "1OPT", 5, 6),
    ]
    return Trace(spans=spans, meta={"schedule": "1f1b", "num_ranks": 2, "num_microbatches": 1, "scenario": "toy"})


def _transform(trace: Trace, fn) -> Trace:
    return Trace(spans=[fn(s) for s in trace.spans], meta=dict(trace.meta))


# ----- the figures -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_a_trace_against_itself_has_no_error(name: str) -> None:
    t = Trace.load(PAIRS[name][1])
    c = compare_traces(t, t)
    assert c.step_time_error == 0 and c.max_abs_bubble_error_pp == 0
    assert c.matched == len(t.spans) and not c.unmatched and not c.meta_differences
    assert all(s.bubble_error_pp == 0 and s.predicted_busy_ms == s.measured_busy_ms for s in c.ranks)
    for k in c.by_kind.values():
        assert (k.start_error_ms_median, k.start_error_ms_p90, k.duration_error_ms_median, k.duration_error_ms_p90) == (0,) * 4
        assert k.relative_duration_error_median == 0
    assert c.start_error_ms_p90 == c.duration_error_ms_p90 == 0
    assert len(c.worst) == 10
    assert all(d.description.endswith("starts on time and lasts as long as predicted") for d in c.worst)


def test_a_shift_and_a_stretch_give_the_expected_errors() -> None:
    pred = _synthetic()

    def measured_span(s: Span) -> Span:  # another clock (+100 ms); 0B0 takes 1 ms longer, delaying 0OPT
        start, end = s.start, s.end
        if str(s.action) == "0B0":
            end += 1
        if str(s.action) == "0OPT":
            start, end = start + 1, end + 1
        return s._replace(start=start + 100, end=end + 100)

    meas = _transform(pred, measured_span)
    c = compare_traces(pred, meas, top=3)
    assert (c.predicted_step_time_ms, c.measured_step_time_ms) == (8, 9)
    assert c.step_time_error == pytest.approx(-1 / 9)
    assert [(s.predicted_busy_ms, s.measured_busy_ms) for s in c.ranks] == [(4, 5), (4, 4)]
    assert [s.bubble_error_pp for s in c.ranks] == pytest.approx([100 * (1 / 2 - 4 / 9), 100 * (1 / 2 - 5 / 9)])
    assert c.max_abs_bubble_error_pp == pytest.approx(100 / 18)
    assert [d.description for d in c.worst[:2]] == [
        "rank 0 0B0 starts on time and lasts 1.00 ms longer than predicted",
        "rank 0 0OPT starts 1.00 ms late and lasts as long as predicted",
    ]
    b0 = c.worst[0]
    assert (b0.predicted_start_ms, b0.predicted_end_ms, b0.measured_start_ms, b0.measured_end_ms) == (5, 7, 5, 8)
    assert (b0.start_delta_ms, b0.duration_delta_ms) == (0, 1)
    assert c.worst[2].start_delta_ms == c.worst[2].duration_delta_ms == 0
    b, opt, f = c.by_kind["B"], c.by_kind["OPT"], c.by_kind["F"]
    assert (b.count, b.duration_error_ms_median, b.duration_error_ms_p90, b.start_error_ms_p90) == (2, 0.5, pytest.approx(0.9), 0)
    assert b.relative_duration_error_median == pytest.approx((0 + (2 - 3) / 3) / 2)
    assert (opt.start_error_ms_median, opt.duration_error_ms_median) == (0.5, 0)
    assert f.start_error_ms_p90 == f.duration_error_ms_p90 == 0
    assert list(c.by_kind) == ["F", "B", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "OPT"]
    assert c.matched == 10
    assert c.start_error_ms_median == 0 and c.duration_error_ms_p90 == pytest.approx(0.1)


@settings(max_examples=30, deadline=None)
@given(k=st.floats(min_value=0.05, max_value=20), offset=st.floats(min_value=-1e3, max_value=1e3))
def test_uniform_scaling_is_a_pure_step_time_error(k: float, offset: float) -> None:
    measured = Trace.load(PAIRS["1f1b"][1])
    predicted = _transform(measured, lambda s: s._replace(start=s.start * k + offset, end=s.end * k + offset))
    c = compare_traces(predicted, measured)
    assert c.step_time_error == pytest.approx(k - 1, rel=1e-9, abs=1e-9)
    assert c.max_abs_bubble_error_pp == pytest.approx(0, abs=1e-7)
    for kind in c.by_kind.values():
        assert kind.relative_duration_error_median == pytest.approx(k - 1, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_stored_pairs_give_the_metrics_of_their_files(name: str) -> None:
    pred, meas = (Trace.load(p) for p in PAIRS[name])
    c = compare_traces(pred, meas)
    p_step, m_step = step_time_ms(pred), step_time_ms(meas)
    assert (c.predicted_step_time_ms, c.measured_step_time_ms) == (p_step, m_step)
    assert c.step_time_error == (p_step - m_step) / m_step
    assert -1 < c.step_time_error < 1
    assert (c.predicted_bubble_fraction, c.measured_bubble_fraction) == (
        summarize(pred).bubble_fraction, summarize(meas).bubble_fraction)
    for s, p, m in zip(c.ranks, rank_metrics(pred), rank_metrics(meas), strict=True):
        assert (s.predicted_bubble_fraction, s.measured_bubble_fraction) == (p.bubble_fraction, m.bubble_fraction)
        assert (s.predicted_busy_ms, s.measured_busy_ms) == (p.busy_ms, m.busy_ms)
        assert s.bubble_error_pp == pytest.approx(100 * (p.bubble_fraction - m.bubble_fraction))
    assert c.matched == len(pred.spans) == len(meas.spans)
    assert sum(k.count for k in c.by_kind.values()) == c.matched
    for k in c.by_kind.values():
        assert 0 <= k.start_error_ms_median <= k.start_error_ms_p90
        assert 0 <= k.duration_error_ms_median <= k.duration_error_ms_p90
    scores = [abs(d.start_delta_ms) + abs(d.duration_delta_ms) for d in c.worst]
    assert scores == sorted(scores, reverse=True) and len(c.worst) == 10


def test_percentile_interpolates() -> None:
    assert percentile([3, 1, 2], 50) == 2 and percentile([0, 1], 90) == pytest.approx(0.9)
    assert percentile([5], 90) == 5


def test_communication_on_one_side_only_is_a_note() -> None:
    pred = _synthetic()
    meas = Trace(spans=[s for s in pred.spans if s.lane != "send"], meta=dict(pred.meta))
    c = compare_traces(pred, meas)
    assert c.matched == len(meas.spans)
    assert c.unmatched == ("2 communication or end-of-step actions only in the predicted trace: rank 0 0SEND_F0, "
                           "rank 1 1SEND_B0",)


# ----- refusals ----------------------------------------------------------------------------------


def test_different_compute_actions_name_the_difference() -> None:
    with pytest.raises(TraceError) as info:
        compare_traces(Trace.load(PRED_M8), Trace.load(MEAS))
    msg = str(info.value)
    assert "predicted has 32, measured has 16" in msg  # F and B of every (stage, micro-batch); OPT apart
    assert "only in predicted: rank 0 0F4, " in msg and "(+12 more)" in msg and "only in measured" not in msg
    assert "micro-batch count differs (predicted 8, measured 4)" in msg


def test_other_refusals() -> None:
    t = _synthetic()
    one_rank = Trace(spans=[s for s in t.spans if s.rank == 0], meta={"num_ranks": 1})
    with pytest.raises(TraceError, match="different numbers of ranks: predicted 2, measured 1"):
        compare_traces(t, one_rank)
    with pytest.raises(TraceError, match="measured trace has no spans"):
        compare_traces(t, Trace(spans=[], meta={"num_ranks": 2}))
    twice = Trace(spans=[*t.spans, t.spans[0]], meta=t.meta)
    with pytest.raises(TraceError, match="action 0F0 twice on rank 0"):
        compare_traces(twice, t)
    no_b = Trace(spans=[s for s in t.spans if str(s.action) != "1B0"], meta=dict(t.meta))
    with pytest.raises(TraceError, match="only in predicted: rank 1 1B0; likely cause: they come from different"):
        compare_traces(t, no_b)


# ----- the command -------------------------------------------------------------------------------


def test_cli_prints_the_report() -> None:
    res = run_compare(PRED, MEAS, "--top", "2")
    assert res.exit_code == 0, res.output
    for words in ("step time", "error", "per rank", "per kind", "largest disagreements (top 2;", "SEND_F", "OPT"):
        assert words in res.output
    assert " 2. rank " in res.output and " 3. rank " not in res.output


def test_cli_json_has_the_documented_keys(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(MEAS, run_dir / "trace.json")  # a ppexec run folder works as MEASURED
    res = run_compare(PRED, str(run_dir), "--json", "--top", "3")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    for key in ("predicted_step_time_ms", "measured_step_time_ms", "step_time_error", "ranks", "by_kind", "worst",
                "max_abs_bubble_error_pp", "unmatched", "start_error_ms_median", "duration_error_ms_p90"):
        assert key in doc
    assert doc == compare_traces(Trace.load(PRED), Trace.load(MEAS), top=3).to_json_dict()
    assert len(doc["worst"]) == 3 and {"rank", "action", "description"} <= set(doc["worst"][0])
    assert {"bubble_error_pp", "predicted_busy_ms"} <= set(doc["ranks"][0])
    assert doc["by_kind"]["F"]["count"] == 8


@pytest.mark.parametrize(
    "args,words",
    [
        ([PRED_M8, MEAS], "micro-batch count differs"),
        ([PRED, "missing.trace.json"], "measured: missing.trace.json does not exist"),
        ([str(ROOT / "scenarios" / "tiny-cpu.yaml"), MEAS], "predicted: "),
        ([PRED, MEAS, "--html", MEAS], "is an input of this command"),
        ([PRED, MEAS, "--html", str(ROOT / "nowhere" / "c.html")], "does not exist"),
    ],
)
def test_cli_bad_input_is_one_error_line(args: list[str], words: str) -> None:
    res = run_compare(*args)
    assert res.exit_code == 1, res.output
    assert res.output.startswith("error: ") and words in res.output
    assert "Traceback" not in res.output


def test_cli_bad_usage_is_exit_2() -> None:
    assert run_compare(PRED, MEAS, "--bogus").exit_code == 2
    assert run_compare(PRED, MEAS, "--top", "-1").exit_code == 2


def test_not_a_trace_file_is_one_clear_line(tmp_path: Path) -> None:
    odd = tmp_path / "odd.json"
    for text in ('{"format": "ppsim-trace", "version": 1, "spans": [[0, "compute", 5, 0, 1, null, null]], "meta": []}',
                 '["a list"]', "\x00\xff binary"):
        odd.write_bytes(text.encode("latin-1"))
        proc = subprocess.run([sys.executable, "-m", "ppsim.cli", "compare", PRED, str(odd)], capture_output=True, text=True)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.startswith("error: measured:") and "Traceback" not in proc.stderr


# ----- the overlay page --------------------------------------------------------------------------


def test_html_overlay(tmp_path: Path) -> None:
    out = tmp_path / "c.html"
    res = run_compare(PRED, MEAS, "--html", str(out))
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert html.startswith(HTML_MARKER) and html.rstrip().endswith("</html>")
    assert "rank 0 predicted" in html and "rank 0 measured" in html and "rank 1 measured" in html
    assert re.search(r"plotly\.js v\d", html), "plotly.js bundle not inlined"
    assert not re.findall(r"<script[^>]*\bsrc\s*=", html)
    assert run_compare(PRED, MEAS, "--html", str(out)).exit_code == 0  # its own page is overwritten without --force


def test_overlay_figure_draws_every_span_once_on_a_numeric_axis() -> None:
    pred, meas = Trace.load(PRED), Trace.load(MEAS)
    c = compare_traces(pred, meas)
    fig = compare_figure(pred, meas, c)
    assert sum(len(bar.x) for bar in fig.data) == len(pred.spans) + len(meas.spans)
    assert len({bar.name for bar in fig.data}) == len(fig.data)
    rows = list(fig.layout.yaxis.categoryarray)
    assert rows == [f"rank {r} {side}{comm}" for r in (0, 1) for side in ("predicted", "measured") for comm in ("", " · comm")]
    assert fig.layout.xaxis.type == "linear" and fig.layout.barmode == "overlay"
    for bar in fig.data:
        assert bar.type == "bar" and bar.orientation == "h" and set(bar.y) <= set(rows)
    ys = [y for bar in fig.data for y in bar.y]
    # compute on the rank's row, sends, receives and collectives on its comm row under it
    assert ys.count("rank 0 predicted") == sum(s.rank == 0 and s.lane == "compute" for s in pred.spans)
    assert ys.count("rank 0 predicted · comm") == sum(s.rank == 0 and s.lane != "compute" for s in pred.spans)
    assert ys.count("rank 1 measured") + ys.count("rank 1 measured · comm") == sum(s.rank == 1 for s in meas.spans)
    measured_starts = sorted(b for bar in fig.data for b, y in zip(bar.base, bar.y) if "measured" in y)
    lo = min(s.start for s in meas.spans)
    assert measured_starts == pytest.approx(sorted(s.start - lo for s in meas.spans))
    f = next(bar for bar in fig.data if bar.name == "F")
    hovers = [cd[6] for cd, y in zip(f.customdata, f.y) if y.endswith("measured")]
    assert all("vs predicted:" in h and "than predicted" in h for h in hovers)
    assert f"{c.predicted_step_time_ms:.2f} ms" in fig.layout.title.text and f"{c.step_time_error:+.1%}" in fig.layout.title.text


def _measured_like(pred: Trace, memory: str | None) -> Trace:
    """``pred`` as a measured run would record it: the same spans, its memory as ``memory`` says."""
    meta = {**pred.meta, "source": "measured"}
    if memory:
        meta["memory_measured"] = memory
    return dataclasses.replace(pred, meta=meta)


def test_the_page_puts_memory_under_the_timelines_predicted_dashed_measured_solid() -> None:
    from ppsim.inputs.scenario import load
    from ppsim.prediction import predict

    pred = predict(load(SCENARIOS / "tiny-cpu.yaml")).trace
    meas = _measured_like(pred, "device")
    fig = compare_figure(pred, meas, compare_traces(pred, meas))
    lines = [d for d in fig.data if d.type == "scatter"]
    assert {d.name for d in lines} == {f"rank {r} {side}" for r in (0, 1) for side in ("predicted", "measured")}
    assert {d.xaxis for d in lines} == {"x2"} and fig.layout.xaxis2.matches == "x"  # the timelines' time axis
    for d in lines:
        assert d.line.dash == ("dash" if d.name.endswith("predicted") else "solid")
        counter = next(c for c in pred.counters if c.name == "memory_bytes" and c.rank == int(d.name.split()[1]))
        assert max(d.y) == pytest.approx(max(v for _, v in counter.points) / 2**30, abs=1e-4)
        assert min(d.x) == pytest.approx(counter.points[0][0] - min(s.start for s in pred.spans), abs=1e-3)
    assert any(s.name == "device memory" and s.yref == "y2" for s in fig.layout.shapes)
    # a CPU run's resident memory is not the device's: its own panel, no device line on it
    rss = compare_figure(pred, _measured_like(pred, "rss"), compare_traces(pred, meas))
    axes = {d.name: d.yaxis for d in rss.data if d.type == "scatter"}
    assert axes["rank 0 predicted"] == "y2" and axes["rank 0 measured"] == "y3"
    assert "RSS" in rss.layout.yaxis3.title.text
    assert not any(s.name == "device memory" and s.yref == "y3" for s in rss.layout.shapes)


def test_beyond_eight_ranks_the_page_draws_the_highest_ranks_memory() -> None:
    from ppsim.inputs.scenario import load
    from ppsim.prediction import predict
    from ppsim.trace.metrics import summarize

    pred = predict(load(SCENARIOS / "gpt.yaml").with_overrides(stages=10, microbatches=20)).trace
    meas = _measured_like(pred, "device")
    fig = compare_figure(pred, meas, compare_traces(pred, meas))
    lines = [d for d in fig.data if d.type == "scatter"]
    top = max(summarize(pred, waits=False).per_rank, key=lambda r: r.peak_memory_bytes).rank
    assert sorted(d.name for d in lines) == [f"rank {top} measured", f"rank {top} predicted"]


def test_html_never_overwrites_a_users_file(tmp_path: Path) -> None:
    mine = tmp_path / "notes.html"
    mine.write_text("<html>my notes</html>")
    res = run_compare(PRED, MEAS, "--html", str(mine))
    assert res.exit_code == 1 and "not written by ppsim" in res.output and "--force" in res.output
    assert mine.read_text() == "<html>my notes</html>"
    assert run_compare(PRED, MEAS, "--html", str(mine), "--force").exit_code == 0
    assert mine.read_text().startswith(HTML_MARKER)


def test_plotly_is_not_imported_by_the_library() -> None:
    code = "import sys, ppsim.trace.compare\nassert 'plotly' not in sys.modules\n"
    subprocess.run([sys.executable, "-c", code], check=True)


# ----- what caused the disagreement, and the calibration hint -------------------------------------


def test_causes_sum_each_kind_on_each_stage_and_name_the_largest_first() -> None:
    pred = _synthetic()

    def measured_span(s: Span) -> Span:  # 1B0 lasts 3 ms longer, 0F0 0.5 ms shorter; the rest shifts along
        if str(s.action) == "1B0":
            return s._replace(end=s.end + 3)
        if str(s.action) == "0F0":
            return s._replace(end=s.end - 0.5)
        return s._replace(start=s.start + 3 * (s.start >= 4.5), end=s.end + 3 * (s.end > 4.5))

    c = compare_traces(pred, _transform(pred, measured_span), top=3)
    first, second = c.causes[0], c.causes[1]
    assert (first.kind, first.stage, first.rank, first.count) == ("B", 1, 1, 1)
    assert first.delta_ms == pytest.approx(3) and first.relative_error == pytest.approx(2 / 5 - 1)
    assert "B on stage 1 (rank 1)" in first.description and "3.00 ms longer than predicted" in first.description
    assert (second.kind, second.stage, second.delta_ms) == ("F", 0, pytest.approx(-0.5))
    assert len(c.causes) == 3
    assert all(x.kind not in ("SEND_F", "RECV_F", "SEND_B", "RECV_B") for x in c.causes)  # waiting, not a cause
    every = compare_traces(pred, _transform(pred, measured_span), top=100).causes
    compute = {(s.rank, str(s.action)): s.duration for s in pred.spans if s.lane == "compute"}
    assert sum(x.count for x in every) == len(compute)
    assert sum(x.predicted_ms for x in every) == pytest.approx(sum(compute.values()))
    assert sum(x.delta_ms for x in every) == pytest.approx(2.5)


def _uncalibrated(tmp_path: Path) -> Path:
    """tiny-cpu predicted from the datasheet (no profile), as the README's first compare does."""
    out = tmp_path / "datasheet.json"
    res = invoke(app, "run", ROOT / "scenarios" / "tiny-cpu.yaml", "--comm", "rendezvous", "--save-trace", out)
    assert res.exit_code == 0, res.output
    assert Trace.load(out).meta["costs_from"] == "model"
    return out


def test_an_uncalibrated_prediction_says_so_and_how_to_calibrate(tmp_path: Path) -> None:
    predicted = _uncalibrated(tmp_path)
    res = run_compare(predicted, MEAS)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    for words in ("hint: the prediction used datasheet costs", "costs_from: model", "ppexec profile SCENARIO --out",
                  "--profile profile.yaml", "ppexec validate", "largest differences by kind and stage"):
        assert words in text, words
    doc = json.loads(run_compare(predicted, MEAS, "--json").stdout)
    assert doc["costs_from"] == "model" and doc["hints"] and "ppexec profile" in doc["hints"][0]
    assert doc["causes"] and {"kind", "stage", "rank", "count", "predicted_ms", "measured_ms", "delta_ms",
                              "relative_error", "description"} <= set(doc["causes"][0])
    deltas = [abs(x["delta_ms"]) for x in doc["causes"]]
    assert deltas == sorted(deltas, reverse=True)


def test_a_calibrated_prediction_gets_no_hint() -> None:
    assert Trace.load(PRED).meta["costs_from"] == "profile"
    res = run_compare(PRED, MEAS)
    assert res.exit_code == 0 and "hint:" not in res.output and "datasheet" not in res.output
    assert "largest differences by kind and stage" in res.output
    assert json.loads(run_compare(PRED, MEAS, "--json").stdout)["hints"] == []


def test_every_signed_error_on_the_screen_is_predicted_minus_measured() -> None:
    data = ROOT / "tests" / "data"
    res = invoke(app, "compare", data / "tiny-1f1b.predicted.trace.json", data / "tiny-1f1b.measured.trace.json")
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())  # titles wrap
    assert "measured - predicted" not in text and text.count("error = predicted - measured, relative: over measured") == 3
    row = next(line for line in res.output.splitlines() if re.match(r"│\s+F\s+│\s+1\s+│", line))
    pred, meas, err, rel = (float(x.strip().rstrip(" %").replace(",", "")) for x in row.split("│")[5:9])
    assert err == pytest.approx(pred - meas, abs=2e-3) and rel == pytest.approx(100 * (pred - meas) / meas, abs=0.06)


@pytest.mark.parametrize(("measured_ms", "skew", "hinted"), [(43.9, 1.09, True), (4.0, 1.09, False), (43.9, 1.0, True)])
def test_all_to_alls_measured_longer_than_predicted_are_named_with_the_skew(measured_ms: float, skew: float,
                                                                            hinted: bool) -> None:
    """A MoE run at EP 2 spent 43.9 ms a step in its all-to-alls against 3.1 predicted: the hint says
    so, and where the run's routing was more skewed than priced, which key prices it."""
    from ppsim.trace.compare import alltoall_hints

    pred, meas = Trace.load(PRED), Trace.load(MEAS)
    pred.meta.update(alltoall_ms=[3.1, 2.9], routing_skew=1.0)  # type: ignore[typeddict-item]
    meas.meta.update(alltoall_ms=[measured_ms, 0.9 * measured_ms], routing_skew=skew)  # type: ignore[typeddict-item]
    hints = alltoall_hints(pred, meas)
    assert bool(hints) == hinted
    if hinted:
        assert f"took {measured_ms:.1f} ms a step on the busiest rank, predicted 3.1 ms" in hints[0]
        assert ("set model.moe.skew: 1.09" in hints[0]) == (skew > 1.0)
    assert compare_traces(pred, meas).hints == hints


def test_a_scenario_given_as_the_predicted_trace_says_how_to_make_one() -> None:
    res = invoke(app, "compare", SCENARIOS / "tiny-cpu.yaml", MEAS)
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "is a scenario, not a trace" in res.output and "--save-trace predicted.json" in res.output
