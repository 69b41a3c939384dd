"""Interleaved chunks read apart (issue 34: on the 175B page every chunk of a rank shared one
colour): each later chunk of a rank a darker shade of its kind's colour, on the page and in the TUI."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from conftest import run_schedule
from ppsim.plan import Kind
from ppsim.views.labels import chunk_of_stage
from ppsim.views.palette import KIND_COLORS, chunk_shade
from ppsim.views.render.gantt import gantt_figure


def _brightness(colour: str) -> int:
    return sum(int(colour[i:i + 2], 16) for i in (1, 3, 5))


@given(st.sampled_from(list(KIND_COLORS.values())), st.integers(2, 8))
def test_each_later_chunk_is_darker_and_chunk_0_is_the_kinds_colour(colour: str, chunks: int) -> None:
    shades = [chunk_shade(colour, c, chunks) for c in range(chunks)]
    assert shades[0] == colour and chunk_shade(colour, 3, 1) == colour
    assert all(_brightness(a) > _brightness(b) for a, b in zip(shades, shades[1:]))
    assert _brightness(shades[-1]) >= _brightness(colour) // 2 - 3  # never black: the kind still reads


def test_the_page_shades_each_bar_by_its_chunk() -> None:
    trace = run_schedule("interleaved-1f1b", 2, 4, 2)
    chunk_of = chunk_of_stage(trace)
    assert set(chunk_of.values()) == {0, 1}
    fig = gantt_figure(trace)
    f = next(d for d in fig.data if d.type == "bar" and d.name == "F" and d.xaxis == "x2")
    colours = list(f.marker.color)
    assert colours[0] == KIND_COLORS[Kind.F]  # what the legend shows: the kind's own
    spans = sorted((s for s in trace.spans if s.action.kind is Kind.F), key=lambda s: chunk_of[s.action.stage])
    assert colours == [chunk_shade(KIND_COLORS[Kind.F], chunk_of[s.action.stage], 2) for s in spans]
    assert len(set(colours)) == 2 and "darker: later chunks" in fig.layout.legend.title.text


def test_the_tui_shades_a_cell_by_its_blocks_chunk() -> None:
    from ppsim.views.tui.cells import measure
    from ppsim.views.tui.timeline import draw_row

    trace = run_schedule("interleaved-1f1b", 2, 4, 2, forward=4.0, backward=8.0)
    chunk_of = chunk_of_stage(trace)
    end = max(s.end for s in trace.spans)
    seen = set()
    for rank in range(2):
        row = sorted((s for s in trace.spans if s.rank == rank and s.lane == "compute"), key=lambda s: s.start)
        cells = measure(row, 0.0, end, 400)
        line = draw_row(cells, chunk_of)
        for c, span in enumerate(cells.top):
            if span is None or not cells.solid[c] or span.action.kind is not Kind.F:
                continue
            style = next(str(sp.style) for sp in line.spans if sp.start <= c < sp.end)
            chunk = chunk_of[span.action.stage]
            assert style.endswith(f"on {chunk_shade(KIND_COLORS[Kind.F], chunk, 2)}"), (c, chunk, style)
            seen.add(chunk)
    assert seen == {0, 1}
