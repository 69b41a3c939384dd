"""Load a ppsim HTML page in headless Chromium with the network cut off, and report what it drew.

A small probe script is injected into a copy of the page. Once the page has loaded it records the
script errors, whether Plotly drew the figure, how many bars each bar trace drew (SVG ``path``
elements under ``g.trace.bars``), the bar labels it shows (``labels``: how many, their font sizes,
how many stick out of their bar), the hover text of the first bar, the resources the page fetched,
and the range of every x axis (and the first shape's x0, x1) after zooming the first x axis; with
``detail`` it then zooms that axis to that range and records the labels again
(``labels_zoomed``). It writes all that as JSON into the DOM, which ``--dump-dom`` prints.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

ZOOM = (1.0, 2.0)  #: the range the probe sets on the first x axis

_PROBE = """<script>
window.__ppsimErrors = [];
window.addEventListener('error', e => window.__ppsimErrors.push(String(e.message)));
window.addEventListener('load', async () => {
  const out = {errors: window.__ppsimErrors, plotly: typeof Plotly !== 'undefined', bars: {}, ranges: {}};
  const detail = DETAIL;
  const settle = () => new Promise(r => setTimeout(r, 500));
  const labels = gd => {
    const shown = [...gd.querySelectorAll('g.trace.bars g.point')].filter(p => {
      const t = p.querySelector('text');
      return t && t.style.display !== 'none' && !/scale\\(0\\)/.test(t.getAttribute('transform') || '');
    });
    const sizes = new Set(), outside = [];
    for (const p of shown) {
      const t = p.querySelector('text').getBoundingClientRect(), b = p.querySelector('path').getBoundingClientRect();
      const k = /scale\\(([\\d.]+)/.exec(p.querySelector('text').getAttribute('transform') || '');
      sizes.add(parseFloat(getComputedStyle(p.querySelector('text')).fontSize) * (k ? parseFloat(k[1]) : 1));
      if (t.left < b.left - 0.5 || t.right > b.right + 0.5 || t.top < b.top - 0.5 || t.bottom > b.bottom + 0.5) {
        outside.push(p.querySelector('text').textContent);
      }
    }
    return {shown: shown.length, sizes: [...sizes], outside: outside};
  };
  try {
    const gd = document.querySelector('.js-plotly-plot');
    out.rendered = !!(gd && gd.querySelector('svg.main-svg') && gd._fullLayout);
    gd.querySelectorAll('g.trace.bars').forEach(g => {
      const cd = g.__data__;
      const name = cd && cd[0] && cd[0].trace ? cd[0].trace.name : '?';
      out.bars[name] = (out.bars[name] || 0) + g.querySelectorAll('g.point > path').length;
    });
    out.points = {};
    gd.querySelectorAll('g.trace.scatter').forEach(g => {
      const cd = g.__data__;
      const name = cd && cd[0] && cd[0].trace ? cd[0].trace.name : '?';
      out.points[name] = (out.points[name] || 0) + g.querySelectorAll('path.point').length;
    });
    out.labels = labels(gd);
    const first = gd.data.findIndex(t => t.type === 'bar');
    if (first >= 0) {
      const t = gd.data[first];
      Plotly.Fx.hover(gd, [{curveNumber: first, pointNumber: 0}], (t.xaxis || 'x') + (t.yaxis || 'y'));
      await settle();
      out.hover = [...gd.querySelectorAll('.hoverlayer .hovertext text')].map(e => e.textContent).join(' ');
      Plotly.Fx.unhover(gd);
    }
    out.resources = performance.getEntriesByType('resource').map(r => r.name);
    await Plotly.relayout(gd, {'xaxis.range': [ZOOM0, ZOOM1]});
    await settle();  // the page's own script answers the zoom with a relayout of its own
    for (const k of Object.keys(gd._fullLayout).filter(k => /^xaxis\\d*$/.test(k))) {
      out.ranges[k] = gd._fullLayout[k].range;
    }
    const shape = (gd.layout.shapes || [])[0];
    out.frame = shape ? [shape.x0, shape.x1] : null;
    if (detail) {
      await Plotly.relayout(gd, {[detail.axis + '.range']: detail.range});
      await settle();
      out.labels_zoomed = labels(gd);
    }
  } catch (e) { out.errors.push(String(e)); }
  const pre = document.createElement('pre');
  pre.id = 'ppsim-probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>""".replace("ZOOM0", str(ZOOM[0])).replace("ZOOM1", str(ZOOM[1]))

_OFFLINE = ["--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]


def find_chromium() -> str | None:
    """The Chromium (or Chrome) executable: $PPSIM_CHROMIUM, else the first of the usual names on PATH."""
    env = os.environ.get("PPSIM_CHROMIUM")
    if env:
        return env if Path(env).is_file() else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def probe(page: Path, chromium: str, timeout: float = 120.0,
          detail: tuple[str, tuple[float, float]] | None = None) -> dict[str, Any]:
    """Load ``page`` offline in headless ``chromium``; return the probe's findings (see module docstring).
    ``detail`` = (x axis, range) to zoom last, for the labels a closer look shows."""
    text = page.read_text(encoding="utf-8")
    head = text.lower().index("<head>") + len("<head>")
    script = _PROBE.replace("DETAIL", json.dumps({"axis": detail[0], "range": list(detail[1])} if detail else None))
    with tempfile.TemporaryDirectory(prefix="ppsim-browser-") as tmp:
        copy = Path(tmp) / page.name
        copy.write_text(text[:head] + script + text[head:], encoding="utf-8")
        cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
               "--disable-extensions", "--mute-audio", f"--user-data-dir={tmp}/profile", *_OFFLINE,
               "--virtual-time-budget=60000", "--dump-dom", copy.as_uri()]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    m = re.search(r'<pre id="ppsim-probe">(.*?)</pre>', done.stdout, re.S)
    if m is None:
        raise AssertionError(f"the probe did not report (exit {done.returncode}); stderr:\n{done.stderr[-3000:]}")
    return json.loads(html.unescape(m.group(1)))
