"""The colours every view shares: one per action kind (HTML pages and the TUI alike), one per rank
for memory lines, one per series (schedule, stage count) in line and bar plots."""

from __future__ import annotations

from ppsim.plan import Kind

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

#: one colour per series of a line or bar plot, in order
SERIES_COLORS = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#9D755D", "#EECA3B")

#: the capacity line of a memory plot
LIMIT_COLOR = "#c00"


def series_color(i: int) -> str:
    return SERIES_COLORS[i % len(SERIES_COLORS)]
