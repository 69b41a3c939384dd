"""Load a ppsim HTML page in headless Chromium with the network cut off, and report what it drew.

A small probe script is injected into a copy of the page. Once the page has loaded it records the
script errors, whether Plotly drew the figure, how many bars each bar trace drew (SVG ``path``
elements under ``g.trace.bars``), the resources the page fetched, and the range of every x axis
after zooming the first one, then writes all that as JSON into the DOM, which ``--dump-dom`` prints.
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
  try {
    const gd = document.querySelector('.js-plotly-plot');
    out.rendered = !!(gd && gd.querySelector('svg.main-svg') && gd._fullLayout);
    gd.querySelectorAll('g.trace.bars').forEach(g => {
      const cd = g.__data__;
      const name = cd && cd[0] && cd[0].trace ? cd[0].trace.name : '?';
      out.bars[name] = (out.bars[name] || 0) + g.querySelectorAll('g.point > path').length;
    });
    out.resources = performance.getEntriesByType('resource').map(r => r.name);
    await Plotly.relayout(gd, {'xaxis.range': [ZOOM0, ZOOM1]});
    for (const k of Object.keys(gd._fullLayout).filter(k => /^xaxis\\d*$/.test(k))) {
      out.ranges[k] = gd._fullLayout[k].range;
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


def probe(page: Path, chromium: str, timeout: float = 120.0) -> dict[str, Any]:
    """Load ``page`` offline in headless ``chromium``; return the probe's findings (see module docstring)."""
    text = page.read_text(encoding="utf-8")
    head = text.lower().index("<head>") + len("<head>")
    with tempfile.TemporaryDirectory(prefix="ppsim-browser-") as tmp:
        copy = Path(tmp) / page.name
        copy.write_text(text[:head] + _PROBE + text[head:], encoding="utf-8")
        cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
               "--disable-extensions", "--mute-audio", f"--user-data-dir={tmp}/profile", *_OFFLINE,
               "--virtual-time-budget=60000", "--dump-dom", copy.as_uri()]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    m = re.search(r'<pre id="ppsim-probe">(.*?)</pre>', done.stdout, re.S)
    if m is None:
        raise AssertionError(f"the probe did not report (exit {done.returncode}); stderr:\n{done.stderr[-3000:]}")
    return json.loads(html.unescape(m.group(1)))
