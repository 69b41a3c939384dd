"""The text of the TUI's panels (plan, figures, selected block, keys): Rich renderables from the
state, no Textual, so they are tested and reused as they are."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ppsim.trace import Span
from ppsim.trace.critical import CriticalPath
from ppsim.trace.metrics import Summary
from ppsim.views.palette import schedule_color
from ppsim.views.render.summary_table import peak_breakdown
from ppsim.views.tui.state import Shown, TuiState

BAR_WIDTH = 12

KEYS: list[tuple[str, str]] = [
    ("+ / -", "zoom in / out"),
    ("← / →", "pan"),
    ("Home / End", "jump to the start / end of the step"),
    ("0", "show the whole step"),
    ("s", "next schedule"),
    ("m / M", "halve / double the micro-batches"),
    ("p / P", "one stage fewer / more"),
    ("c", "next chunk count (interleaved schedules)"),
    ("[ / ]", "select the previous / next block of the row"),
    ("↑ / ↓", "select a block of the rank above / below"),
    ("click", "select the block under the mouse"),
    ("l", "show or hide the send / recv / collective rows"),
    ("e", "export the view as an HTML page"),
    ("k", "underline the critical path, or not"),
    ("?", "this help"),
    ("q", "quit"),
]
PLAN_KEYS = frozenset({"s", "m / M", "p / P", "c"})  #: keys that change the plan: none for saved traces


def plan_text(state: TuiState, show_timing: bool = True) -> Text:
    """The plan line(s): what the keys change, or which traces are shown."""
    text = Text(no_wrap=False)
    if state.scenario is not None:
        s = state.scenario
        part = s.pipeline.partition
        parts = "explicit" if isinstance(part, list) else part
        text.append(f"{s.name}  ", style="bold")
        for key, label, value in (("s", "schedule", s.pipeline.schedule), ("p", "stages", s.pipeline.stages),
                                  ("m", "micro-batches", s.microbatches), ("c", "chunks", s.pipeline.chunks)):
            text.append(f"[{key}] ", style="dim")
            text.append(f"{label} ")
            text.append(f"{value}", style=f"bold {schedule_color(str(value))}" if key == "s" else "bold cyan")
            text.append("  ")
        text.append(f"partition {parts}", style="dim")
        counts = state.shown[0].trace.meta.get("partition")
        if counts and len(counts) <= 16:
            text.append(f" {' '.join(map(str, counts))}", style="dim")
        if show_timing and state.rerun_ms is not None:
            text.append(f"  sim {state.rerun_ms:.0f} ms", style="dim")
    else:
        text.append("saved trace" + ("s" if len(state.shown) > 1 else "") + ": ", style="bold")
        for i, sh in enumerate(state.shown):
            text.append("  |  " if i else "")
            text.append(f"{sh.label} ({sh.summary.source}, ")
            text.append(sh.summary.schedule, style=schedule_color(sh.summary.schedule))
            text.append(")")
        text.append("  (a saved plan cannot change: open a scenario for the plan keys)", style="dim")
    return text


def _bar(fraction: float, width: int = BAR_WIDTH) -> str:
    full = max(0, min(width, round(fraction * width)))
    return "█" * full + "░" * (width - full)


def figures(shown: Shown, with_label: bool = False) -> Group:
    """Step time, throughput, MFU, bubble; the highest peak broken down; per rank its bubble and peak
    memory against the device's."""
    s = shown.summary
    head = Text()
    if with_label:
        head.append(f"{shown.label}  ", style="bold")
    head.append(f"step {s.step_time_ms:,.1f} ms", style="bold")
    if s.throughput_samples_per_s:
        head.append(f"  {s.throughput_samples_per_s:,.2f} samples/s")
    if s.mfu is not None:
        head.append(f"  MFU {s.mfu * 100:.1f} %")
    head.append(f"  bubble {s.bubble_fraction * 100:.1f} %")
    lines: list[Text] = [head]
    fit = fit_text(s)
    if fit is not None:
        lines.append(fit)
    breakdown = peak_breakdown(s)
    if breakdown is not None:
        lines.append(Text(f"at the peak: {breakdown}", style="dim"))
    cap = s.memory_capacity_bytes
    for st in s.per_rank:
        line = Text(f"r{st.rank:<3}bubble {_bar(st.bubble_fraction)} {st.bubble_fraction * 100:5.1f} %", no_wrap=True)
        if st.peak_memory_bytes is not None:
            over = bool(cap and st.peak_memory_bytes > cap)
            share = st.peak_memory_bytes / cap if cap else 0.0
            line.append("   mem ")
            line.append(_bar(min(share, 1.0), 8), style="red" if over else "green")
            line.append(f" {st.peak_memory_bytes / 2**30:,.1f}" + (f"/{cap / 2**30:,.0f} GiB" if cap else " GiB"),
                        style="bold red" if over else "")
        lines.append(line)
    return Group(*lines)


def fit_text(s: Summary) -> Text | None:
    """'fits' or 'DOES NOT FIT: ...' naming the ranks over the device's memory; None without memory."""
    if s.fits is None:
        return None
    if s.fits:
        return Text("memory: fits", style="green")
    cap = s.memory_capacity_bytes or 0
    over = ", ".join(f"rank {st.rank} +{((st.peak_memory_bytes or 0) - cap) / 2**30:,.1f} GiB"
                     for st in s.over_capacity())
    return Text(f"memory: DOES NOT FIT ({over})", style="bold red")


def detail_text(span: Span | None, origin: float = 0.0, trace: str | None = None,
                path: CriticalPath | None = None) -> Text:
    """The selected block: the trace it belongs to (when two are shown), action, rank, lane, start,
    end, duration, bytes and peer; with the trace's critical ``path``, whether the block is on it
    and what it waited for, or its slack."""
    if span is None:
        return Text("select a block: click it, or [ ] and ↑ ↓", style="dim")
    text = Text()
    if trace is not None:
        text.append(f"{trace}: ", style="bold underline")
    text.append(str(span.action), style="bold")
    text.append(f"  rank {span.rank} {span.lane}  start {span.start - origin:,.3f} ms  end {span.end - origin:,.3f} ms"
                f"  duration {span.end - span.start:,.3f} ms")
    if span.bytes is not None:
        text.append(f"  {span.bytes:,} bytes")
    if span.peer is not None:
        text.append(f"  peer rank {span.peer}")
    if path is not None:
        if id(span) in path.on_path():
            text.append("  ")
            text.append("on the critical path", style="bold underline")
            text.append(f": {path.waited_for(span)}")
        else:
            text.append(f"  slack {path.slack(span):,.3f} ms", style="bold")
            text.append(" (it could end that much later: the same step)", style="dim")
    return text


def keys_table(editable: bool = True) -> Table:
    """The keys; without the plan keys when the plan cannot change (saved traces)."""
    table = Table(show_header=False, box=None, padding=(0, 2))
    for key, what in KEYS:
        if editable or key not in PLAN_KEYS:
            table.add_row(Text(key, style="bold cyan"), what)
    return table
