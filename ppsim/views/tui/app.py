"""The Textual app of ``ppsim tui``: the timeline(s), the plan, the figures and the selected block,
redrawn from :class:`~ppsim.views.tui.state.TuiState` after every key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from rich.console import Group
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Footer, Static

from ppsim.errors import PpsimError
from ppsim.trace import Span
from ppsim.views.tui import panels
from ppsim.views.tui.legend import help_legend, legend
from ppsim.views.tui.state import PAN_FRACTION, ZOOM_FACTOR, Shown, TuiState
from ppsim.views.tui.timeline import (
    LABEL_WIDTH,
    Drawn,
    Measured,
    axis,
    measure_rows,
    memory_rows,
    render_rows,
    rows_of,
)

WIDE = 150  #: from this many columns the figures sit right of the timeline
TIMELINE_SHARE = 0.7  #: of the body's height, the most the timeline takes under 150 columns (app.tcss)
HELP_WIDTH = 76  #: the help's legend is packed to this width at most
PLAN_ACTIONS = frozenset({"schedule", "microbatches", "stages", "chunks"})  #: off (and hidden) for saved traces


def timeline_rows(shown: Shown, lanes: bool, memory: bool, several: bool = True) -> int:
    """Screen rows one timeline takes: its title (when several), its rows, its axis, and with
    ``memory`` a title and a row per rank when it records memory."""
    has_memory = any(c.name == "memory_bytes" and c.points for c in shown.trace.counters)
    return (len(rows_of(shown.index, lanes)) + 1 + several
            + ((shown.trace.num_ranks + 1) if memory and has_memory else 0))


def fill_room(state: TuiState, room: int) -> None:
    """Use the timeline's ``room`` (screen rows): the send / recv / collective lanes when they fit
    (unless ``l`` chose), then memory per rank over the window when that fits too."""
    several = len(state.shown) > 1

    def need(lanes: bool, memory: bool) -> int:
        return sum(timeline_rows(sh, lanes, memory, several) for sh in state.shown)

    if not state.lanes_chosen:
        state.lanes = need(True, False) <= room
    state.memory = need(state.lanes, True) <= room


def _same(shown: list[Shown], before: list[Shown]) -> bool:
    """The same timelines (the same objects: a rerun makes new ones) as before."""
    return len(shown) == len(before) and all(a is b for a, b in zip(shown, before))


class TimelineView(Widget):
    """Every shown trace's rows over the state's window, one time axis under each."""

    DEFAULT_CSS = "TimelineView { height: auto; }"

    def __init__(self, state: TuiState, **kwargs: Any) -> None:  # Widget's own: name, id, classes, disabled
        super().__init__(**kwargs)
        self.state = state
        self.drawn: list[tuple[int, Drawn]] = []  #: (first line, drawing) per shown trace
        self._key: tuple[object, ...] | None = None  #: the window, width and lanes last measured
        self._shown: list[Shown] = []  #: the timelines last measured
        self._measured: list[Measured] = []
        self._drawn_selection: tuple[int, Span] | None = None
        self._lines: list[Text] = []

    def _time_columns(self) -> int:
        return max(10, self.size.width - LABEL_WIDTH)

    def render(self) -> Group:
        """The rows of every shown trace: measured again only when the window, width, lanes or
        timelines change, drawn again only when the selection changes too."""
        st, width = self.state, self._time_columns()
        key = (st.window.start, st.window.end, width, st.lanes, st.critical, st.memory)
        if not (_same(st.shown, self._shown) and key == self._key):
            self._key, self._shown, self._drawn_selection = key, list(st.shown), None
            self._measured = [measure_rows(sh.index, st.window.start, st.window.end, width, st.lanes)
                              for sh in st.shown]
            self._lines = []
        if not self._lines or st.selected != self._drawn_selection:
            self._drawn_selection, self._lines = st.selected, self._draw(width)
        return Group(*self._lines)

    def _draw(self, width: int) -> list[Text]:
        st = self.state
        lines: list[Text] = []
        self.drawn = []
        for k, (shown, measured) in enumerate(zip(st.shown, self._measured)):
            if len(st.shown) > 1:
                lines.append(Text(f"{shown.label}", style="bold underline"))
            d = render_rows(shown.index, measured, st.selected[1] if st.selected and st.selected[0] == k else None,
                            shown.path.on_path() if st.critical else frozenset())
            self.drawn.append((len(lines), d))
            lines.extend(d.lines)
            lines.append(axis(st.window.start, st.window.end, width))
            if st.memory:
                lines.extend(memory_rows(shown.trace, st.window.start, st.window.end, width))
        return lines

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        st = self.state
        return sum(timeline_rows(sh, st.lanes, st.memory, len(st.shown) > 1) for sh in st.shown)

    def on_click(self, event: events.Click) -> None:
        column = event.x - LABEL_WIDTH
        for k, (first, d) in enumerate(self.drawn):
            span = d.span_at(event.y - first, column)
            if span is not None:
                self.state.select(k, span)
                cast("PpsimTui", self.app).refresh_all()  # the one app that mounts this widget
                return


class HelpScreen(ModalScreen[None]):
    """The keys (those that apply) and the colours; any key closes it."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Static { width: auto; max-width: 90%; height: auto; border: round $accent; padding: 0 1;
                          background: $surface; }
    """

    def __init__(self, editable: bool) -> None:
        super().__init__()
        self.editable = editable

    def compose(self) -> ComposeResult:
        width = min(HELP_WIDTH, int(self.app.size.width * 0.9) - 4)  # inside the box's border and padding
        box = Static(Group(panels.keys_table(self.editable), help_legend(width)))
        box.border_title = "keys and colours"
        yield box

    def on_key(self, event: events.Key) -> None:
        event.stop()
        self.dismiss()

    def on_click(self, event: events.Click) -> None:
        self.dismiss()


class PpsimTui(App[None]):
    """``ppsim tui``: see a predicted step, change the plan with keys, export what is shown."""

    CSS_PATH = "app.tcss"
    TITLE = "ppsim"
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "keys"),
        Binding("plus,equals_sign", "zoom(2)", "zoom", key_display="+/-"),
        Binding("minus", "zoom(0.5)", "zoom out", show=False),
        Binding("left", "pan(-1)", "pan", show=False),
        Binding("right", "pan(1)", "pan", show=False),
        Binding("home", "home", "start", show=False),
        Binding("end", "end", "end", show=False),
        Binding("0", "fit", "all", show=False),
        Binding("s", "schedule", "schedule"),
        Binding("m", "microbatches(0.5)", "micro-batches", key_display="m/M"),
        Binding("M", "microbatches(2)", "double micro-batches", show=False),
        Binding("p", "stages(-1)", "stages", key_display="p/P"),
        Binding("P", "stages(1)", "more stages", show=False),
        Binding("c", "chunks", "chunks"),
        Binding("left_square_bracket", "select(-1)", "previous block", show=False),
        Binding("right_square_bracket", "select(1)", "next block", show=False),
        Binding("up", "rank(-1)", "rank above", show=False),
        Binding("down", "rank(1)", "rank below", show=False),
        Binding("l", "lanes", "lanes", show=False),  # in the ? list; the footer keeps to 80 columns
        Binding("k", "critical", "critical path", show=False),
        Binding("e", "export", "export"),
    ]

    def __init__(self, state: TuiState, export_dir: Path | None = None, show_timing: bool = True) -> None:
        super().__init__()
        self.state = state
        self.export_dir = export_dir or Path.cwd()
        self.show_timing = show_timing
        self._shown_text: dict[str, Text] = {}  #: what each panel shows
        self._figures_of: list[Shown] = []  #: the timelines the figures are of
        self._timeline_height = -1

    # ----- layout ------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="plan")
        with Vertical(id="body"):
            with VerticalScroll(id="timeline-box"):
                yield TimelineView(self.state, id="timeline")
            yield VerticalScroll(Static(id="figures"), id="figures-box")
        yield Static(id="legend")
        yield Static(id="detail")
        yield Static(id="message")
        yield Footer(compact=True, show_command_palette=False)  # every plan key fits in 80 columns

    def on_mount(self) -> None:
        self.refresh_all()

    def on_resize(self, event: events.Resize) -> None:
        self.query_one("#body").set_class(event.size.width >= WIDE, "wide")
        self.call_after_refresh(self.refresh_all)  # the body's new height: the room the timeline has

    def _update_legend(self) -> None:
        st = self.state
        kinds = set().union(*(sh.index.kinds(st.lanes) for sh in st.shown))
        self._show("#legend", legend(kinds, max(20, self.size.width - 2), st.critical))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Plan keys do not apply to saved traces: off, and out of the footer."""
        return self.state.editable or action not in PLAN_ACTIONS

    def _room(self) -> int:
        """Screen rows the timeline may take: all of the body beside the figures (wide), else the
        most its box may take under them (its max-height)."""
        body = self.query_one("#body")
        return body.size.height if body.has_class("wide") else int(body.size.height * TIMELINE_SHARE)

    def refresh_all(self) -> None:
        """Show the state: each panel updated only when its text changed, the timeline redrawn
        (laid out again only when its height changed); the room it has filled first."""
        st = self.state
        fill_room(st, self._room())
        self._show("#plan", panels.plan_text(st, self.show_timing))
        many = len(st.shown) > 1
        if not _same(st.shown, self._figures_of):
            self._figures_of = list(st.shown)
            self.query_one("#figures", Static).update(Group(*(panels.figures(sh, many) for sh in st.shown)))
        origin = st.origin(st.selected[0])[0] if st.selected else 0.0
        trace = st.shown[st.selected[0]].label if st.selected and many else None
        path = st.shown[st.selected[0]].path if st.selected else None
        self._show("#detail", panels.detail_text(st.selected_span(), origin, trace, path))
        self._show("#message", Text(st.message, style="bold yellow") if st.message else Text(""))
        self._update_legend()
        timeline = self.query_one("#timeline", TimelineView)
        height = timeline.get_content_height(None, None, 0)
        timeline.refresh(layout=height != self._timeline_height)
        self._timeline_height = height

    def _show(self, selector: str, text: Text) -> None:
        """Update a panel when its text differs from what it shows."""
        if self._shown_text.get(selector) != text:
            self._shown_text[selector] = text
            self.query_one(selector, Static).update(text)

    # ----- actions -----------------------------------------------------------------------------
    def _run(self, change: Callable[..., object], *args: object) -> None:
        self.state.message = ""
        try:
            change(*args)
        except PpsimError as exc:
            self.state.message = str(exc)
        self.refresh_all()

    def action_zoom(self, factor: float) -> None:
        self._run(self.state.window.zoom, factor if factor > 1 else 1 / ZOOM_FACTOR)

    def action_pan(self, direction: int) -> None:
        self._run(self.state.window.pan, direction * PAN_FRACTION)

    def action_home(self) -> None:
        self._run(self.state.window.to_start)

    def action_end(self) -> None:
        self._run(self.state.window.to_end)

    def action_fit(self) -> None:
        self._run(self.state.window.fit)

    def action_schedule(self) -> None:
        self._run(self.state.cycle_schedule)

    def action_microbatches(self, factor: float) -> None:
        self._run(self.state.scale_microbatches, factor)

    def action_stages(self, delta: int) -> None:
        self._run(self.state.change_stages, delta)

    def action_chunks(self) -> None:
        self._run(self.state.cycle_chunks)

    def action_select(self, delta: int) -> None:
        self._run(self.state.step_selection, delta)

    def action_rank(self, delta: int) -> None:
        self._run(self.state.move_rank, delta)

    def action_lanes(self) -> None:
        self.state.lanes = not self.state.lanes
        self.state.lanes_chosen = True
        self.refresh_all()

    def action_critical(self) -> None:
        self.state.critical = not self.state.critical
        self.state.message = ("the critical path is underlined: the chain of actions, each waiting for the one "
                              "before, that sets the step time" if self.state.critical else "critical path not marked")
        self.refresh_all()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.state.editable))

    def action_export(self) -> None:
        from ppsim.views.tui.export import export_view

        try:
            path = export_view(self.state, self.export_dir)
            self.state.message = f"wrote {path}"
        except PpsimError as exc:
            self.state.message = str(exc)
        self.refresh_all()
