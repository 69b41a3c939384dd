"""`ppsim tui`: the state behind the keys, the character timeline, the app driven by Textual's pilot,
and snapshots of its main screens at fixed terminal sizes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import DATA, GPT_YAML, run_schedule
from ppsim.cli import app as cli
from ppsim.errors import PpsimError
from ppsim.inputs.scenario import Scenario, load
from ppsim.plan import Action, Kind
from ppsim.plan.schedules import NAMES
from ppsim.prediction import predict
from ppsim.trace import Span, Trace
from ppsim.trace.load import load_trace
from ppsim.views.palette import KIND_COLORS
from ppsim.views.tui.cells import EIGHTHS, measure
from ppsim.views.tui.state import TuiState, Window
from ppsim.views.tui.timeline import EDGE, LABEL_WIDTH, draw, draw_row

pytest.importorskip("textual")

from textual.binding import Binding  # noqa: E402

from ppsim.views.tui.app import PpsimTui  # noqa: E402

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
    cells = measure(spans, 0.0, 100.0, width).top
    dt = 100.0 / width
    for c, cell in enumerate(cells):
        lo, hi = c * dt, (c + 1) * dt
        inside = [s for s in spans if s.start <= lo and hi <= s.end]
        if inside:
            assert cell == inside[0]
        if cell is None:  # idle: no span reaches into the column beyond rounding
            assert not any(s.start < hi - 1e-9 and s.end > lo + 1e-9 for s in spans)


def test_blocks_carry_their_micro_batch_where_it_fits_and_idle_is_dotted() -> None:
    spans = [_span(0, 40, 3), _span(60, 100, 12)]
    line = draw_line(spans, 20)
    assert line == "    3   ····    12   "[:20] or line.count("·") == 4
    assert "3" in line and "12" in line and line.count("·") == 4


def draw_line(spans: list[Span], width: int) -> str:
    return draw_row(measure(spans, 0, 100, width), {}).plain


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


# ----- zoomed out: the bubble and the mix of kinds in each cell ----------------------------------------
def busy_eighths(line: str) -> list[int]:
    """Each cell's busy share in eighths as drawn: a dot is idle, a bar its height, anything else (a
    block, its label, its edge) a whole cell."""
    return [0 if ch == "·" else EIGHTHS.index(ch) if ch in EIGHTHS[1:8] else 8 for ch in line[LABEL_WIDTH:]]


def true_eighths(trace: Trace, rank: int, width: int) -> list[int]:
    """Each cell's busy share in eighths, straight from the spans: at least one where anything runs,
    an action of no length (the optimizer step when it is free) included."""
    lo = min(s.start for s in trace.spans)
    dt = (max(s.end for s in trace.spans) - lo) / width
    spans = [s for s in trace.spans if s.rank == rank and s.lane == "compute"]
    out = []
    for c in range(width):
        busy = sum(max(0.0, min(s.end, lo + (c + 1) * dt) - max(s.start, lo + c * dt)) for s in spans) / dt
        instant = any(s.start == s.end and c == min(width - 1, round((s.start - lo) / dt, 9) // 1) for s in spans)
        out.append(max(1, round(busy * 8)) if busy > 1e-9 or instant else 0)
    return out


@pytest.mark.parametrize("width", [23, 70, 151])
def test_the_gpipe_bubble_read_off_the_cells_is_the_formula(width: int) -> None:
    """GPipe, p=4, m=4, no communication: the bubble is (p-1)/(m+p-1) = 3/7, and the cells show it,
    each one as high as its busy share."""
    p, m = 4, 4
    trace = run_schedule("gpipe", p, m)
    drawn = draw(trace, 0, max(s.end for s in trace.spans) - min(s.start for s in trace.spans), width)
    shown = [busy_eighths(line.plain) for line in drawn.lines]
    for rank, cells in enumerate(shown):
        assert cells == true_eighths(trace, rank, width), rank
    idle = 1 - sum(map(sum, shown)) / (8 * width * p)
    assert idle == pytest.approx((p - 1) / (m + p - 1), abs=0.02)


def test_a_bubble_spread_over_every_cell_is_seen() -> None:
    """A rank busy 65 % of every cell (short waits between blocks): each cell is a bar 5/8 high, where
    the colour of what fills most of the cell would hide a 35 % bubble."""
    spans = [_span(t, t + 0.65, i) for i, t in enumerate(range(100))]
    line = draw_line(spans, 20)
    assert line == EIGHTHS[5] * 20
    assert 1 - sum(busy_eighths(" " * LABEL_WIDTH + line)) / (8 * 20) == pytest.approx(0.35, abs=1 / 16)


def test_forwards_show_among_backwards_when_zoomed_out() -> None:
    """1F1B's steady state, a forward (1 ms) and a backward (2 ms) by turns, ten pairs a cell: a third
    of the cells are drawn as forwards, not none."""
    spans = []
    for i in range(300):
        t = 3.0 * i
        spans += [Span(0, "compute", Action(0, Kind.F, i), t, t + 1), Span(0, "compute", Action(0, Kind.B, i), t + 1, t + 3)]
    cells = measure(spans, 0, 900, 30)
    assert cells.kinds.count(Kind.F) == 10 and cells.kinds.count(Kind.B) == 20
    text = draw_row(cells, {})
    colours = [str(sp.style) for sp in text.spans]
    assert any(KIND_COLORS[Kind.F] in c for c in colours) and any(KIND_COLORS[Kind.B] in c for c in colours)


def test_gpt_yaml_zoomed_out_shows_its_bubble() -> None:
    """gpt.yaml (8 stages, 128 micro-batches) at 100 columns: the idle share read off each rank's row
    is its bubble, although the waits are spread thinly over the whole step."""
    state = TuiState.from_scenario(load(GPT), predicted)
    shown = state.shown[0]
    drawn = draw(shown.index, state.window.start, state.window.end, 100)
    for rank, line in zip(shown.summary.per_rank, drawn.lines):
        cells = busy_eighths(line.plain)
        assert 1 - sum(cells) / (8 * len(cells)) == pytest.approx(rank.bubble_fraction, abs=0.035)
    assert shown.summary.bubble_fraction > 0.1


# ----- labels --------------------------------------------------------------------------------------
LABEL_CHARS = set("0123456789c:|OPTCLIRDUE_")


def label_tokens(line: str) -> list[tuple[int, str]]:
    """(column, text) of each run of label characters in a row's time area."""
    area, out, c = line[LABEL_WIDTH:], [], 0
    while c < len(area):
        if area[c] in LABEL_CHARS:
            j = c
            while j < len(area) and area[j] in LABEL_CHARS:
                j += 1
            out.append((c, area[c:j]))
            c = j
        else:
            c += 1
    return out


@pytest.mark.parametrize("width, zoom", [(70, 1), (151, 1), (80, 4), (60, 16)])
def test_labels_never_run_together(width: int, zoom: int) -> None:
    """Every label is one block's whole label with a blank (or a block's edge) on each side, inside
    the block; labels of blocks too narrow for that are left out."""
    state = small()
    state.window.zoom(zoom)
    shown = state.shown[0]
    drawn = draw(shown.index, state.window.start, state.window.end, width)
    found = 0
    for line, cells in zip(drawn.lines, drawn.cells):
        plain = line.plain[LABEL_WIDTH:]
        for c, token in label_tokens(line.plain):
            span = cells[c]
            assert span is not None and token == str(span.action.microbatch), (token, plain)
            assert plain[c - 1] in (" ", EDGE) and plain[c + len(token)] == " ", plain
            assert all(cells[k] is span for k in range(c - 1, c + len(token) + 1)), plain
            found += 1
    assert found >= len(drawn.lines)  # the test sees labels


def test_zoomed_out_no_label_is_crushed_into_a_number() -> None:
    state = TuiState.from_scenario(load(GPT), predicted)  # 128 micro-batches: blocks under 3 columns at 100
    drawn = draw(state.shown[0].index, state.window.start, state.window.end, 100)
    assert all(not label_tokens(line.plain) for line in drawn.lines), [ln.plain for ln in drawn.lines]


def test_two_blocks_of_one_colour_that_meet_are_parted() -> None:
    line = draw_line([_span(0, 50, 3), _span(50, 100, 4)], 20)
    assert line == "    3     " + EDGE + "   4     "


# ----- the plan keys -------------------------------------------------------------------------------
def test_s_cycles_every_schedule_and_interleaving_gets_two_chunks() -> None:
    state = small()
    seen = [state.scenario.pipeline.schedule]
    for _ in range(len(NAMES)):
        state.cycle_schedule()
        seen.append(state.scenario.pipeline.schedule)
        if state.scenario.pipeline.schedule == "interleaved-1f1b":
            assert state.scenario.pipeline.chunks == 2
    assert set(seen) == set(NAMES) and seen[-1] == seen[0]


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
    assert first == state.shown[0].index.row(0, "compute").spans[0]
    state.step_selection(1)
    assert state.selected_span() == state.shown[0].index.row(0, "compute").spans[1]
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


def test_a_scenario_without_a_name_is_labelled_and_exported(tmp_path: Path) -> None:
    from ppsim.views.tui.export import export_name

    unnamed = load(GPT).model_copy(update={"name": None}).with_overrides(stages=4, microbatches=8)
    state = TuiState.from_scenario(unnamed, predicted)
    assert state.shown[0].label == "scenario"  # was None: "None" on screen, and a TypeError on export
    assert export_name(state, tmp_path).name == "scenario.tui.html"


def test_clicking_a_block_selects_it() -> None:
    async def drive() -> None:
        app = PpsimTui(small(), show_timing=False)
        async with app.run_test(size=(80, 24)) as pilot:
            timeline = app.query_one("#timeline")
            await pilot.click(timeline, offset=(10, 0))  # the first column of rank 0: its first forward
            assert app.state.selected_span() == app.state.shown[0].index.row(0, "compute").spans[0]

    asyncio.run(drive())


def _two_traces() -> TuiState:
    return TuiState.from_traces([(p, load_trace(DATA / p)) for p in
                                 ("tiny-1f1b.predicted.trace.json", "tiny-1f1b.measured.trace.json")])


def _screen_text(app: PpsimTui) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())  # textual is pinned


def test_the_legend_names_the_colours_shown_on_screen_and_every_one_in_help() -> None:
    async def drive() -> None:
        app = PpsimTui(small(), show_timing=False)
        async with app.run_test(size=(80, 24)) as pilot:
            legend = _text(app, "#legend")
            for words in ("F  forward", "B  backward", "OPT  optimizer step", "· idle", "part busy"):
                assert words in legend, legend
            assert "SEND_F" not in legend  # only what the rows show
            await pilot.press("l")
            assert "SEND_F  send activations" in _text(app, "#legend")
            await pilot.press("question_mark")
            await pilot.pause()
            shown = _screen_text(app)
            for kind, words in (("I", "input grad"), ("W", "weight grad"), ("REDUCE_GRAD", "grad all-reduce"),
                                ("OVERLAP_F_B", "forward + backward overlapped")):
                assert f"{kind}  {words}" in shown, shown
            assert "▂▄▆ part busy" in shown and "next schedule" in shown

    asyncio.run(drive())


def test_two_traces_name_the_selected_blocks_trace_and_offer_no_plan_keys() -> None:
    async def drive() -> None:
        state = _two_traces()
        app = PpsimTui(state, show_timing=False)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("right_square_bracket")
            assert _text(app, "#detail").startswith("tiny-1f1b.predicted.trace.json: 0F0")
            await pilot.press("down", "down")  # predicted rank 1, then the measured trace's rank 0
            assert state.selected[0] == 1
            assert _text(app, "#detail").startswith("tiny-1f1b.measured.trace.json: ")
            footer = app.screen._compositor.render_strips()[-1].text
            assert "export" in footer
            for words in ("schedule", "micro-batches", "stages", "chunks"):
                assert words not in footer, footer
            shown = state.shown
            await pilot.press("s", "m", "M", "p", "P", "c")
            assert state.shown is shown and not state.message
            await pilot.press("question_mark")
            await pilot.pause()
            help_text = _screen_text(app)
            assert "zoom in / out" in help_text
            assert not any(words in help_text for words in ("next schedule", "micro-batches", "stage fewer", "chunk"))

    asyncio.run(drive())


def test_one_trace_names_no_trace_in_the_selection() -> None:
    async def drive() -> None:
        app = PpsimTui(small(), show_timing=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("right_square_bracket")
            assert _text(app, "#detail").startswith(str(app.state.selected_span().action))

    asyncio.run(drive())


def test_keys_measure_the_rows_only_when_the_window_or_the_plan_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A selection redraws from the rows measured before; a zoom measures them again but indexes no
    trace again; only a plan key indexes its new trace."""
    from ppsim.views.tui import app as app_module
    from ppsim.views.tui import index as index_module

    measured, indexed = [], []
    real_measure, real_index = app_module.measure_rows, index_module.TraceIndex.__init__

    def count_measure(*args: object, **kwargs: object) -> object:
        measured.append(1)
        return real_measure(*args, **kwargs)

    def count_index(self: object, trace: Trace) -> None:
        indexed.append(1)
        real_index(self, trace)

    monkeypatch.setattr(app_module, "measure_rows", count_measure)
    monkeypatch.setattr(index_module.TraceIndex, "__init__", count_index)

    async def drive() -> None:
        app = PpsimTui(small(), show_timing=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            start = (len(measured), len(indexed))
            await pilot.press("right_square_bracket", "right_square_bracket", "down")
            await pilot.pause()
            assert (len(measured), len(indexed)) == start
            await pilot.press("plus")
            await pilot.pause()
            assert len(measured) == start[0] + 1 and len(indexed) == start[1]
            await pilot.press("M")
            await pilot.pause()
            assert len(measured) == start[0] + 2 and len(indexed) == start[1] + 1

    asyncio.run(drive())


# ----- snapshots -----------------------------------------------------------------------------------
def test_snapshot_main_screen_80x24_does_not_fit(snap_compare) -> None:
    assert snap_compare(PpsimTui(small(), show_timing=False), terminal_size=(80, 24))


def test_snapshot_wide_terminal_with_lanes_and_a_selection(snap_compare) -> None:
    assert snap_compare(PpsimTui(fitting(), show_timing=False), terminal_size=(180, 40),
                        press=["right_square_bracket", "right_square_bracket"])  # the lanes fit: shown


def test_snapshot_help(snap_compare) -> None:
    assert snap_compare(PpsimTui(small(), show_timing=False), terminal_size=(80, 24), press=["question_mark"])


def test_snapshot_two_traces_side_by_side(snap_compare) -> None:
    """A block of the measured trace selected: the line under the legend names its trace."""
    assert snap_compare(PpsimTui(_two_traces(), show_timing=False), terminal_size=(100, 30),
                        press=["right_square_bracket", "down", "down"])


def test_snapshot_gpipe_bubble_zoomed_out(snap_compare) -> None:
    """gpt.yaml under GPipe with 8 micro-batches (a 50 % bubble): the forwards' and backwards'
    triangles and the part-busy cells between the backwards."""
    state = TuiState.from_scenario(load(GPT).with_overrides(schedule="gpipe", microbatches=8), predicted)
    assert snap_compare(PpsimTui(state, show_timing=False), terminal_size=(100, 30))


def test_snapshot_gpt_yaml_zoomed_out(snap_compare) -> None:
    """gpt.yaml as it opens (8 ranks x 128 micro-batches): bars short of full height where ranks wait."""
    assert snap_compare(PpsimTui(TuiState.from_scenario(load(GPT), predicted), show_timing=False),
                        terminal_size=(100, 30))


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


# ----- the critical path in the terminal (issue 34) ------------------------------------------------
def test_the_critical_path_is_underlined_and_only_it() -> None:
    from ppsim.views.tui.timeline import CRITICAL_STYLE

    trace = run_schedule("1f1b", 2, 2, forward=1.0, backward=3.0, comm="async")
    shown = TuiState.from_traces([("t", trace)]).shown[0]
    on_path = shown.path.on_path()
    assert on_path and len(on_path) < len(trace.spans)
    end = max(s.end for s in trace.spans)
    d = draw(shown.index, 0.0, end, 80, on_path=on_path)
    plain = draw(shown.index, 0.0, end, 80)
    for r, (line, bare) in enumerate(zip(d.lines, plain.lines)):
        assert line.plain == bare.plain  # the same characters, only styled
        for c, span in enumerate(d.cells[r]):
            styles = {str(sp.style) for sp in line.spans if sp.start <= LABEL_WIDTH + c < sp.end}
            marked = any(CRITICAL_STYLE in st.split() for st in styles)
            assert marked == (span is not None and id(span) in on_path), (r, c, span)


def test_the_selected_block_says_what_it_waited_for_or_its_slack() -> None:
    from ppsim.views.tui.panels import detail_text

    trace = run_schedule("1f1b", 2, 2, forward=1.0, backward=3.0, comm="async")
    shown = TuiState.from_traces([("t", trace)]).shown[0]
    path = shown.path
    on = next(s for s in path.spans if s.rank == 0 and s.action.kind is Kind.B)
    text = detail_text(on, 0.0, None, path).plain
    assert "on the critical path: " + path.waited_for(on) in text and "waited" in path.waited_for(on)
    off = next(s for s in trace.spans if s.lane == "compute" and id(s) not in path.on_path() and path.slack(s) > 0)
    assert f"slack {path.slack(off):,.3f} ms" in detail_text(off, 0.0, None, path).plain


def test_k_switches_the_critical_path_marks_off_and_on() -> None:
    async def run() -> None:
        app = PpsimTui(small(), show_timing=False)
        async with app.run_test(size=(120, 40)) as pilot:
            assert app.state.critical and "underlined: critical path (k)" in app._shown_text["#legend"].plain
            await pilot.press("k")
            assert not app.state.critical and "critical path (k)" not in app._shown_text["#legend"].plain
            await pilot.press("k")
            assert app.state.critical and "underlined" in app.state.message

    asyncio.run(run())


def test_plan_keys_say_what_they_changed() -> None:
    """m / M said nothing while the global batch moved with them (issue 34)."""
    state = small()  # gpt.yaml on 4 stages, 8 micro-batches of 1, 8 replicas: a global batch of 64
    state.scale_microbatches(2)
    assert state.scenario.microbatches == 16
    assert state.message == ("micro-batches 8 -> 16: global batch 64 -> 128 (1 x 16 micro-batches x 8 replicas); "
                             "the micro-batch size and the replicas stay")
    before = state.scenario.pipeline.schedule
    state.cycle_schedule()
    after = state.scenario.pipeline.schedule
    assert after != before and state.message.startswith(f"schedule {before} -> {after}")
    while describe_chunks(state.scenario.pipeline.schedule):
        state.cycle_schedule()
    state.cycle_chunks()
    assert state.message.startswith("chunks ") and " per rank" in state.message


def describe_chunks(name: str) -> bool:
    """Whether ``name`` runs a fixed chunk count (``c`` cannot change it)."""
    from ppsim.plan.schedules import describe

    return describe(name).chunks.fixed


# ----- the screen's height used (issue 34: at 200 x 50, 8 rows of timeline and 35 empty) -----------
def test_the_room_goes_to_the_lanes_then_to_memory_over_time() -> None:
    async def run(size: tuple[int, int]) -> tuple[bool, bool, str]:
        app = PpsimTui(TuiState.from_scenario(load(GPT), predicted), show_timing=False)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            return app.state.lanes, app.state.memory, _screen_text(app)

    lanes, memory, screen = asyncio.run(run((200, 50)))
    assert lanes and memory
    assert " send" in screen and "mem 7" in screen and "memory per rank" in screen
    lanes, memory, screen = asyncio.run(run((80, 24)))
    assert not lanes and not memory and "mem 0" not in screen


def test_l_keeps_the_lanes_as_chosen_whatever_the_room() -> None:
    async def run() -> None:
        app = PpsimTui(TuiState.from_scenario(load(GPT), predicted), show_timing=False)
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause()
            assert app.state.lanes
            await pilot.press("l")
            assert not app.state.lanes and app.state.lanes_chosen
            await pilot.resize_terminal(210, 52)
            await pilot.pause()
            assert not app.state.lanes

    asyncio.run(run())


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 50)), min_size=1, max_size=20), st.integers(1, 30),
       st.floats(0, 50), st.floats(1, 50))
def test_a_memory_cell_holds_the_most_its_counter_takes_there(points, width: int, start: float, length: float) -> None:
    from ppsim.views.tui.timeline import memory_peaks

    points.sort(key=lambda p: p[0])
    end = start + length
    edges = [start + c * (end - start) / width for c in range(width + 1)]
    assume(all(abs(t - e) > 1e-6 for t, _ in points for e in edges))  # no point on a cell's edge: no rounding
    got = memory_peaks(points, start, end, width)
    for c, value in enumerate(got):
        lo, hi = edges[c], edges[c + 1]
        before = [v for t, v in points if t <= lo]
        inside = [v for t, v in points if lo < t < hi]
        candidates = ([before[-1]] if before else []) + inside
        if candidates:
            assert value == pytest.approx(max(candidates), rel=1e-9, abs=1e-9)
        else:
            assert value is None


def test_memory_beyond_the_device_is_red() -> None:
    from ppsim.views.tui.timeline import MEMORY_OK, MEMORY_OVER, memory_rows

    trace = predict(load(GPT).with_overrides(stages=4, microbatches=8)).trace  # rank 0 needs 95.6 of 80 GiB
    end = max(s.end for s in trace.spans) - min(s.start for s in trace.spans)
    rows = memory_rows(trace, 0.0, end, 120)
    assert len(rows) == 1 + trace.num_ranks and "device's 80 GiB" in rows[0].plain and "red" in rows[0].plain
    styles = {r: {str(sp.style) for sp in rows[1 + r].spans} for r in range(trace.num_ranks)}
    assert MEMORY_OVER in styles[0] and MEMORY_OK in styles[0]
    assert MEMORY_OVER not in styles[3]  # rank 3's 62 GiB fits


def test_snapshot_tall_terminal_shows_lanes_and_memory(snap_compare) -> None:
    """gpt.yaml at 200 x 50: the lanes and memory per rank fill the room (docs/img/tui-tall.png)."""
    assert snap_compare(PpsimTui(TuiState.from_scenario(load(GPT), predicted), show_timing=False),
                        terminal_size=(200, 50))


def test_the_figures_break_the_highest_peak_down() -> None:
    from ppsim.views.render.summary_table import peak_breakdown
    from ppsim.views.tui.panels import figures

    shown = small().shown[0]
    text = "\n".join(t.plain for t in figures(shown).renderables)
    expected = peak_breakdown(shown.summary)
    assert expected is not None and expected.startswith("rank 0: weights ")
    assert f"at the peak: {expected}" in text
