"""``e`` in the TUI: the shown view as the HTML page of ``ppsim run --html``, zoomed to the window."""

from __future__ import annotations

import re
from pathlib import Path

from ppsim import outputs
from ppsim.errors import PpsimError
from ppsim.views.tui.state import TuiState

MAX_TRIES = 100


def export_name(state: TuiState, directory: Path) -> Path:
    """``<name>.tui.html`` in ``directory``, or ``<name>.tui-2.html`` ... when a file ppsim did not
    write has the name already: nothing the user wrote is overwritten."""
    k = state.selected[0] if state.selected else 0
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", state.shown[k].label).strip("-.") or "ppsim"
    for i in range(1, MAX_TRIES + 1):
        path = directory / (f"{stem}.tui.html" if i == 1 else f"{stem}.tui-{i}.html")
        try:
            return outputs.check_output(path, "export")
        except PpsimError:
            if not path.parent.is_dir():
                raise
    raise PpsimError(f"{directory}: {MAX_TRIES} names for the export are taken by other files; clean up or "
                     "start ppsim tui from another folder")


def export_view(state: TuiState, directory: Path) -> Path:
    """Write the selected (else the first) timeline's page with its x axis on the window; the path."""
    from ppsim.views.render.gantt import gantt_figure, write_figure

    k = state.selected[0] if state.selected else 0
    trace = state.shown[k].trace
    origin, _ = state.origin(k)
    fig = gantt_figure(trace)
    fig.update_xaxes(range=[origin + state.window.start, origin + state.window.end])
    path = export_name(state, directory)
    outputs.atomic_write(path, lambda p: write_figure(fig, p))
    return path
