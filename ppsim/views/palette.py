"""The colours every view shares: one per action kind (HTML pages and the TUI alike), one per rank
for memory lines, one colour and marker per schedule (the same on every page and in the TUI), one
per series (stage count, any other value) in line and bar plots."""

from __future__ import annotations

from ppsim.plan import Kind
from ppsim.plan.schedules import SCHEDULES
from ppsim.trace.metrics import OWED_PART

#: fixed colour of each action kind (all distinct)
KIND_COLORS: dict[Kind, str] = {
    Kind.F: "#4C78A8",
    Kind.B: "#F58518",
    Kind.I: "#E45756",
    Kind.W: "#72B7B2",
    Kind.OPT: "#54A24B",
    Kind.SEND_F: "#B279A2",
    Kind.SEND_B: "#FF9DA6",
    Kind.RECV_F: "#9D755D",
    Kind.RECV_B: "#BAB0AC",
    Kind.REDUCE_GRAD: "#EECA3B",
    Kind.CLIP: "#79706E",
    Kind.OVERLAP_F_B: "#8E6BBF",  #: an overlapped forward and backward (DualPipe)
}
UNKNOWN_KIND_COLOR = "#888888"
#: an expert-parallel all-to-all (dispatch or combine) on the collective lane: not an action of the plan
ALLTOALL_COLOR = "#17becf"

#: line colours of the memory plot, one per rank (darker than the kind colours, so they read apart)
RANK_COLORS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#a6761d", "#666666", "#17becf")

#: what a rank holds at its peak, as stacked: model states in blues and purple, activations in amber,
#: what split backwards keep for their weight grads in a darker amber
MEMORY_PART_COLORS = {"weights": "#3b5b92", "gradients": "#7a9cc6", "optimizer": "#9b6ba6", "buffers": "#b8b8b8",
                      "activations": "#f0a830", OWED_PART: "#c9702a"}

#: one colour per series of a line or bar plot, in order
SERIES_COLORS = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#9D755D", "#EECA3B")

#: the (colour, marker symbol) of the registry's schedules, in its order (``ppsim.plan.schedules``),
#: all distinct: the first, GPipe, the baseline, in grey; none the red of the device-memory line. A
#: schedule added to the registry takes the next one (a test keeps the list as long as the registry).
_STYLES = (("#7f7f7f", "circle"), ("#1f77b4", "square"), ("#17becf", "diamond"), ("#5254a3", "cross"),
           ("#bcbd22", "x"), ("#2ca02c", "triangle-up"), ("#1a9850", "triangle-down"), ("#ff7f0e", "star"),
           ("#c7a000", "pentagon"), ("#8c564b", "hexagon"), ("#9467bd", "hourglass"), ("#e377c2", "bowtie"),
           ("#637939", "triangle-left"), ("#5a5a9e", "star-square"), ("#b15928", "diamond-tall"),
           ("#41ab5d", "hexagram"))
#: each schedule's style, on every page and in the TUI
SCHEDULE_STYLES: dict[str, tuple[str, str]] = dict(zip(SCHEDULES, _STYLES))
#: schedules read from a file, or not known here (auto's search), take these by name (none of them a
#: schedule's; each reads on a white page and on a dark terminal)
OTHER_SCHEDULE_STYLES = (("#a0522d", "circle-open"), ("#a55194", "square-open"), ("#6b6ecf", "diamond-open"))

#: the capacity line of a memory plot
LIMIT_COLOR = "#c00"


def series_color(i: int) -> str:
    return SERIES_COLORS[i % len(SERIES_COLORS)]


def schedule_style(name: str) -> tuple[str, str]:
    """The colour and marker symbol of schedule ``name`` (``auto`` and ``file:`` plans: a fixed one of
    :data:`OTHER_SCHEDULE_STYLES` chosen by the name, so it stays the same from page to page)."""
    if name in SCHEDULE_STYLES:
        return SCHEDULE_STYLES[name]
    return OTHER_SCHEDULE_STYLES[sum(name.encode()) % len(OTHER_SCHEDULE_STYLES)]


def schedule_color(name: str) -> str:
    return schedule_style(name)[0]


CHUNK_DARKEST = 0.5  #: the last chunk of a rank's stages: its kind's colour this far towards black


def chunk_shade(colour: str, chunk: int, chunks: int) -> str:
    """``colour`` (#rrggbb) for a block of a rank's ``chunk``-th stage of ``chunks``: chunk 0 as it
    is, each later one darker, up to :data:`CHUNK_DARKEST`, so interleaved chunks read apart."""
    if chunks < 2 or chunk <= 0:
        return colour
    k = 1.0 - CHUNK_DARKEST * min(chunk, chunks - 1) / (chunks - 1)
    r, g, b = (round(int(colour[i:i + 2], 16) * k) for i in (1, 3, 5))
    return f"#{r:02x}{g:02x}{b:02x}"
