"""`ppsim tui`: the state behind the keys, the character timeline, the app driven by Textual's pilot,
and snapshots of its main screens at fixed terminal sizes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import GPT_YAML
from ppsim.cli import app as cli
from ppsim.errors import PpsimError
from ppsim.inputs.scenario import Scenario, load
from ppsim.plan import Action, Kind
from ppsim.plan.schedules import SCHEDULES
from ppsim.prediction import predict
from ppsim.trace import Span, Trace
from ppsim.trace.load import load_trace
from ppsim.views.tui.state import TuiState, Window, lane_spans
from ppsim.views.tui.timeline import cover, draw

pytest.importorskip("textual")

from textual.binding import Binding  # noqa: E402

from ppsim.views.tui.app import PpsimTui  # noqa: E402

DATA = Path(__file__).parent / "data"
GPT = GPT_YAML


def predicted(s: Scenario) -> Trace:
    """What the CLI hands the TUI: the scenario's predicted trace."""
    return predict(s).trace


def small() -> TuiState:
    """gpt.yaml on 4 stages and 8 micro-batches: rank 0 does not fit an 80 GiB A100."""
    return TuiState.from_scenario(load(GPT).with_overrides(stages=4, microbatches=8), predicted)


def fitting() -> TuiState:
    return TuiState.from_scenario(load(GPT).with_overrides(microbatches=16), predicted)


# ----- the window ----------------------------------------------------------------------------------
@given(ops=st.lists(st.sampled_from(["in", "out", "left", "right", "home", "end", "fit"]), max_size=30))
def test_the_window_stays_inside_the_step_whatever_the_keys(ops: list[str]) -> None:
    w = Window(0.0, 1000.0)
    for op in ops:
        {"in": lambda: w.zoom(2), "out": lambda: w.zoom(0.5), "left": lambda: w.pan(-0.25),
         "right": lambda: w.pan(0.25), "home": w.to_start, "end": w.to_end, "fit": w.fit}[op]()
        assert 0.0 <= w.start < w.end <= 1000.0 + 1e-9
    zooms = ops.count("in") - ops.count("out")
    if "fit" not in ops and all(op in ("in", "left", "right", "home", "end") for op in ops):
        assert w.width == pytest.approx(1000.0 / 2**zooms)


def test_zoom_keeps_the_centre_and_home_end_reach_the_bounds() -> None:
    w = Window(0.0, 100.0)
    w.zoom(4)
    assert (w.start, w.end) == (37.5, 62.5)
    w.to_end()
    assert w.end == 100.0 and w.width == 25.0
    w.to_start()
    assert w.start == 0.0 and w.width == 25.0


# ----- the character timeline ----------------------------------------------------------------------
def _span(start: float, end: float, mb: int = 0) -> Span:
    return Span(0, "compute", Action(0, Kind.F, mb), start, end)


@given(cuts=st.lists(st.floats(0, 100, allow_nan=False), min_size=2, max_size=12, unique=True),
       width=st.integers(1, 80))
def test_a_column_inside_one_block_shows_that_block(cuts: list[float], width: int) -> None:
    cuts = sorted(cuts)
    spans = [_span(a, b, i) for i, (a, b) in enumerate(zip(cuts[::2], cuts[1::2]))]  # gaps between them
    cells = cover(spans, 0.0, 100.0, width)
    dt = 100.0 / width
    for c, cell in enumerate(cells):
        lo, hi = c * dt, (c + 1) * dt
        inside = [s for s in spans if s.start <= lo and hi <= s.end]
        if inside:
            assert cell == inside[0]
        if cell is None:  # idle: no span touches the column
            assert not any(s.start < hi and s.end > lo for s in spans)


def test_blocks_carry_their_micro_batch_where_it_fits_and_idle_is_dotted() -> None:
    spans = [_span(0, 40, 3), _span(60, 100, 12)]
    line = draw_line(spans, 20)
    assert line == "    3   ····    12   "[:20] or line.count("·") == 4
    assert "3" in line and "12" in line and line.count("·") == 4


def draw_line(spans: list[Span], width: int) -> str:
    from ppsim.views.tui.timeline import draw_row

    return draw_row(cover(spans, 0, 100, width), {}, None).plain


def test_the_timeline_has_a_row_per_rank_and_lanes_on_request() -> None:
    state = small()
    trace = state.shown[0].trace
    plain = draw(trace, state.window.start, state.window.end, 60)
    assert [r.rank for r in plain.rows] == [0, 1, 2, 3] and {r.lane for r in plain.rows} == {"compute"}
    with_lanes = draw(trace, state.window.start, state.window.end, 60, lanes=True)
    assert {r.lane for r in with_lanes.rows} == {"compute", "send", "recv", "collective"}
    # 1F1B on 4 stages: rank 3 starts after three forwards, so its row starts idle
    assert plain.lines[3].plain[9:].startswith("·")
    assert not plain.lines[0].plain[9:].startswith("·")


# ----- the plan keys -------------------------------------------------------------------------------
def test_s_cycles_every_schedule_and_interleaving_gets_two_chunks() -> None:
    state = small()
    seen = [state.scenario.pipeline.schedule]
    for _ in range(len(SCHEDULES)):
        state.cycle_schedule()
        seen.append(state.scenario.pipeline.schedule)
        if state.scenario.pipeline.schedule == "interleaved-1f1b":
            assert state.scenario.pipeline.chunks == 2
    assert set(seen) == set(SCHEDULES) and seen[-1] == seen[0]


def test_micro_batch_and_stage_keys_rerun_the_simulation() -> None:
    state = small()
    before = state.shown[0].summary
    state.scale_microbatches(2)
    assert state.scenario.microbatches == 16 and state.shown[0].summary.microbatches == 16
    assert state.shown[0].summary.bubble_fraction < before.bubble_fraction  # more micro-batches, less bubble
    state.scale_microbatches(0.5)
    assert state.scenario.microbatches == 8
    state.change_stages(+4)
    assert state.scenario.pipeline.stages == 8 and state.shown[0].summary.num_ranks == 8
    assert state.rerun_ms is not None and state.rerun_ms < 1000


def test_a_change_that_cannot_run_keeps_the_plan_and_says_why() -> None:
    state = TuiState.from_scenario(load(GPT).with_overrides(stages=40, microbatches=40), predicted)
    shown = state.shown
    state.change_stages(+1)  # 41 stages for 40 layers
    assert state.scenario.pipeline.stages == 40 and state.shown is shown
    assert "pipeline.stages" in state.message
    state.cycle_chunks()  # 1f1b takes one chunk
    assert "one chunk per rank" in state.message


def test_saved_traces_are_shown_but_their_plan_cannot_change() -> None:
    state = TuiState.from_traces([(p, load_trace(DATA / p)) for p in
                                  ("tiny-1f1b.predicted.trace.json", "tiny-1f1b.measured.trace.json")])
    assert [sh.summary.source for sh in state.shown] == ["simulated", "measured"]
    with pytest.raises(PpsimError, match="saved trace"):
        state.cycle_schedule()


def test_a_chrome_trace_ppsim_wrote_opens_as_the_same_trace(tmp_path: Path) -> None:
    import json

    from ppsim.trace import Trace
    from ppsim.trace.chrome import to_chrome_trace

    trace = Trace.load(DATA / "tiny-1f1b.measured.trace.json")
    (tmp_path / "t.json").write_text(json.dumps(to_chrome_trace(trace)))
    assert load_trace(tmp_path / "t.json").spans == trace.spans


def test_selection_steps_through_a_row_and_across_ranks() -> None:
    state = small()
    state.step_selection(1)
    first = state.selected_span()
    assert first == lane_spans(state.shown[0].trace, 0, "compute")[0]
    state.step_selection(1)
    assert state.selected_span() == lane_spans(state.shown[0].trace, 0, "compute")[1]
    state.move_rank(1)
    assert state.selected_span().rank == 1


# ----- the app, driven by keys ---------------------------------------------------------------------
def _text(app: PpsimTui, widget: str) -> str:
    from rich.console import Console
    from textual.widgets import Static

    console = Console(width=200, record=True)
    console.print(app.query_one(widget, Static).content)
    return console.export_text()


def test_keys_change_the_plan_and_the_figures_shown(tmp_path: Path) -> None:
    async def drive() -> None:
        app = PpsimTui(small(), export_dir=tmp_path, show_timing=False)
        async with app.run_test(size=(80, 24)) as pilot:
            assert "micro-batches 8" in _text(app, "#plan") and "DOES NOT FIT" in _text(app, "#figures")
            step_before = app.state.shown[0].summary.step_time_ms
            await pilot.press("M")
            assert "micro-batches 16" in _text(app, "#plan")
            assert app.state.shown[0].summary.step_time_ms > step_before
            await pilot.press("P", "P", "P", "P")
            assert "stages 8" in _text(app, "#plan") and "memory: fits" in _text(app, "#figures")
            await pilot.press("s")
            assert "schedule interleaved-1f1b" in _text(app, "#plan") and "chunks 2" in _text(app, "#plan")
            await pilot.press("right_square_bracket")
            assert _text(app, "#detail").startswith(str(app.state.selected_span().action))
            await pilot.press("plus", "plus", "right")
            assert app.state.window.width == pytest.approx(app.state.window.hi / 4)
            await pilot.press("e")
            assert "wrote" in _text(app, "#message")
            await pilot.press("question_mark")
            assert app.screen.__class__.__name__ == "HelpScreen"
            await pilot.press("x")
            assert app.screen.__class__.__name__ != "HelpScreen"
            await pilot.press("q")

    asyncio.run(drive())
    pages = list(tmp_path.glob("*.html"))
    assert len(pages) == 1 and pages[0].read_text().startswith("<!-- ppsim -->")


def test_export_never_overwrites_a_file_the_user_wrote(tmp_path: Path) -> None:
    from ppsim.views.tui.export import export_view

    state = small()
    mine = tmp_path / f"{state.shown[0].label}.tui.html"
    mine.write_text("my notes")
    path = export_view(state, tmp_path)
    assert mine.read_text() == "my notes" and path.name.endswith(".tui-2.html")
    assert export_view(state, tmp_path) == path  # its own page it may replace


def test_clicking_a_block_selects_it() -> None:
    async def drive() -> None:
        app = PpsimTui(small(), show_timing=False)
        async with app.run_test(size=(80, 24)) as pilot:
            timeline = app.query_one("#timeline")
            await pilot.click(timeline, offset=(10, 0))  # the first column of rank 0: its first forward
            assert app.state.selected_span() == lane_spans(app.state.shown[0].trace, 0, "compute")[0]

    asyncio.run(drive())


# ----- snapshots -----------------------------------------------------------------------------------
def test_snapshot_main_screen_80x24_does_not_fit(snap_compare) -> None:
    assert snap_compare(PpsimTui(small(), show_timing=False), terminal_size=(80, 24))


def test_snapshot_wide_terminal_with_lanes_and_a_selection(snap_compare) -> None:
    assert snap_compare(PpsimTui(fitting(), show_timing=False), terminal_size=(180, 40),
                        press=["l", "right_square_bracket", "right_square_bracket"])


def test_snapshot_help(snap_compare) -> None:
    assert snap_compare(PpsimTui(small(), show_timing=False), terminal_size=(80, 24), press=["question_mark"])


def test_snapshot_two_traces_side_by_side(snap_compare) -> None:
    state = TuiState.from_traces([(p, load_trace(DATA / p)) for p in
                                  ("tiny-1f1b.predicted.trace.json", "tiny-1f1b.measured.trace.json")])
    assert snap_compare(PpsimTui(state, show_timing=False), terminal_size=(100, 30))


# ----- the command ---------------------------------------------------------------------------------
@pytest.mark.parametrize("args, code, says", [
    (["nope.json"], 1, "nope.json does not exist"),
    ([str(GPT), "--stages", "41"], 1, "pipeline.stages"),
    ([str(GPT), str(GPT)], 2, "give one scenario, or one or two traces"),
    ([str(DATA / "tiny-1f1b.measured.trace.json"), "--stages", "2"], 2, "plan options"),
])
def test_bad_input_is_one_line_and_bad_usage_exit_2(args: list[str], code: int, says: str) -> None:
    res = CliRunner().invoke(cli, ["tui", *args])
    assert res.exit_code == code and says in " ".join(res.output.split())
    assert "Traceback" not in res.output


def test_every_footer_key_is_visible_in_80_columns() -> None:
    """The footer's bottom line shows each key it lists, with its description, whole at 80x24."""
    async def drive() -> str:
        app = PpsimTui(small(), show_timing=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            return app.screen._compositor.render_strips()[-1].text  # textual is pinned

    bottom = asyncio.run(drive())
    shown = [b for b in PpsimTui.BINDINGS if isinstance(b, Binding) and b.show]
    assert len(shown) >= 8
    for b in shown:
        key = b.key_display or {"question_mark": "?"}.get(b.key, b.key)
        assert f"{key} {b.description}" in bottom, (key, b.description, bottom)
