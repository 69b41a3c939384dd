"""Writing a Plotly figure as one self-contained, offline HTML page that ppsim recognises as its own.

A figure whose ``layout.meta.overview`` names an overview axis gets a small script: dragging on the
overview zooms the detail axes (the overview itself stays whole), and a frame on the overview
shows the window the detail axes show.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ppsim.formats import HTML_MARKER

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

#: runs after Plotly drew the figure (``{plot_id}`` is the figure's div); idle without an overview
OVERVIEW_SCRIPT = """
(function () {
  var gd = document.getElementById('{plot_id}');
  var m = gd && gd.layout && gd.layout.meta && gd.layout.meta.overview;
  if (!m) return;
  var busy = false;
  function zoomed(ev) {
    if (ev[m.axis + '.range']) return ev[m.axis + '.range'];
    if (ev[m.axis + '.range[0]'] !== undefined) return [ev[m.axis + '.range[0]'], ev[m.axis + '.range[1]']];
    return null;
  }
  gd.on('plotly_relayout', function (ev) {
    if (busy) return;
    var upd = {}, win = zoomed(ev);
    if (win) { upd[m.detail + '.range'] = win; upd[m.axis + '.range'] = m.range.slice(); }
    else if (ev[m.axis + '.autorange']) { upd[m.detail + '.autorange'] = true; upd[m.axis + '.range'] = m.range.slice(); }
    busy = true;
    Plotly.relayout(gd, upd).then(function () {
      var r = gd._fullLayout[m.detail].range, frame = {};
      frame['shapes[' + m.shape + '].x0'] = r[0];
      frame['shapes[' + m.shape + '].x1'] = r[1];
      return Plotly.relayout(gd, frame);
    }).then(function () { busy = false; }, function () { busy = false; });
  });
})();
"""


def overview_meta(axis: str, detail: str, time_range: tuple[float, float], shape: int) -> dict[str, object]:
    """``layout.meta`` that links the overview ``axis`` (``xaxis``) to the ``detail`` axis (``xaxis2``):
    the overview keeps ``time_range``; ``shape`` is the index of the frame drawn on it."""
    return {"overview": {"axis": axis, "detail": detail, "range": list(time_range), "shape": shape}}


def write_figure(fig: go.Figure, path: str | Path) -> Path:
    """Write ``fig`` as one self-contained HTML page that starts with :data:`HTML_MARKER`; returns the path."""
    p = Path(path)
    html = fig.to_html(include_plotlyjs=True, full_html=True, post_script=OVERVIEW_SCRIPT,
                       config={"displaylogo": False})
    # the marker lets ppsim recognise its own pages, which it may overwrite without --force
    p.write_text(HTML_MARKER + "\n" + html, encoding="utf-8")
    return p
