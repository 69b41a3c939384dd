"""The timeline's legend: each kind's colour and what it is, and what a cell's glyphs mean. One
line under the timeline for the kinds shown; the full table in the ``?`` help."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from rich.text import Text

from ppsim.plan import Kind
from ppsim.views.palette import KIND_COLORS, UNKNOWN_KIND_COLOR
from ppsim.views.tui.cells import EIGHTHS

IDLE = "·"
IDLE_STYLE = "grey37"

WORDS: dict[Kind, str] = {
    Kind.F: "forward",
    Kind.B: "backward",
    Kind.I: "input grad",
    Kind.W: "weight grad",
    Kind.OVERLAP_F_B: "forward + backward overlapped",
    Kind.SEND_F: "send activations",
    Kind.RECV_F: "receive activations",
    Kind.SEND_B: "send grads",
    Kind.RECV_B: "receive grads",
    Kind.REDUCE_GRAD: "grad all-reduce",
    Kind.CLIP: "grad clipping",
    Kind.OPT: "optimizer step",
}
PART_BUSY = EIGHTHS[2] + EIGHTHS[4] + EIGHTHS[6]


@cache
def text_colour(background: str) -> str:
    """Black or white, whichever reads on ``background`` (#rrggbb)."""
    r, g, b = (int(background[i:i + 2], 16) for i in (1, 3, 5))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "white"


def swatch(kind: Kind) -> Text:
    """The kind's name on its colour, as its blocks are drawn."""
    colour = KIND_COLORS.get(kind, UNKNOWN_KIND_COLOR)
    return Text(f" {kind.value} ", style=f"{text_colour(colour)} on {colour}")


def entries(kinds: Iterable[Kind], critical: bool = False) -> list[Text]:
    """One entry per kind (in the order of :class:`Kind`), then idle and part-busy cells, and with
    ``critical`` the critical path's underline."""
    present = set(kinds)
    out = []
    for kind in (k for k in Kind if k in present):
        out.append(Text.assemble(swatch(kind), f" {WORDS.get(kind, kind.value)}"))
    out.append(Text.assemble((IDLE, IDLE_STYLE), " idle"))
    out.append(Text.assemble((PART_BUSY, KIND_COLORS[Kind.B]), " part busy"))
    if critical:
        colour = KIND_COLORS[Kind.F]
        out.append(Text.assemble((" F ", f"underline {text_colour(colour)} on {colour}"), " underlined: critical path (k)"))
    return out


def legend(kinds: Iterable[Kind], width: int, critical: bool = False) -> Text:
    """The entries of ``kinds`` packed into lines of ``width`` columns, two blanks apart."""
    text, used = Text(no_wrap=True, overflow="crop"), 0
    for entry in entries(kinds, critical):
        if used and used + 2 + entry.cell_len > width:
            text.append("\n")
            used = 0
        elif used:
            text.append("  ")
            used += 2
        text.append_text(entry)
        used += entry.cell_len
    return text


def help_legend(width: int) -> Text:
    """Every kind and glyph, for the ``?`` help."""
    text = legend(Kind, width)
    text.append("\n")
    text.append_text(Text.assemble((" ▏3 ", "black on " + KIND_COLORS[Kind.B]),
                                   " a block and its micro-batch; ▏ parts two blocks of one colour"))
    return text
