"""Write a Plotly figure as a PNG with kaleido, which drives a Chrome or Chromium found on the machine.

kaleido and choreographer (how kaleido finds the browser) are core dependencies; the browser is the
machine's. :func:`check_png` fails early, with the fix, when no browser is found, so a command does
not simulate first and fail at the end. The drawing runs in a child process, ended with its browser
after :data:`DRAW_TIMEOUT_S`: a browser that never answers (seen once under a busy test run) makes
an error, not a hang (kaleido's own thread waits on it forever and keeps its process from exiting).
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from ppsim.errors import PpsimError
from ppsim.formats import PNG_MARKER

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
WIDTH = 1500  #: pixels; timelines need the width to show micro-batch labels

_INSTALL = ("install Chromium (Debian/Ubuntu: apt-get install chromium) or Chrome, or set BROWSER_PATH "
            "to its executable")
DRAW_TIMEOUT_S = 180.0  #: how long one drawing may take before it is ended (a browser starts in seconds)
#: the child's program: the figure's JSON on stdin, then path, width and height as arguments
_DRAW = ("import sys, plotly.io as pio; fig = pio.from_json(sys.stdin.read(), skip_invalid=True); "
         "fig.write_image(sys.argv[1], format='png', width=int(sys.argv[2]), height=int(sys.argv[3]), scale=1)")


def find_browser() -> str | None:
    """The Chrome / Chromium kaleido will use ($BROWSER_PATH, PATH, the usual places), or None."""
    from choreographer.browsers.chromium import Chromium

    return Chromium.find_browser(skip_local=False)


def check_png(option: str = "--png") -> None:
    """Raise a PpsimError naming ``option`` and the fix unless a browser is available for kaleido."""
    browser = find_browser()
    if browser is None:
        raise PpsimError(f"needs Chrome or Chromium and none was found; {_INSTALL}", field=option)
    if not (os.path.isfile(browser) and os.access(browser, os.X_OK)):
        raise PpsimError(f"the browser {browser!r} (from BROWSER_PATH) is not an executable file; {_INSTALL}",
                         field=option)


def write_png(fig: go.Figure, path: str | Path, option: str = "--png") -> None:
    """Write ``fig`` as a PNG of :data:`WIDTH` pixels and the figure's own height."""
    check_png(option)
    height = fig.layout.height or 600
    figure = fig.to_json()
    for attempt in range(2):  # a browser that starts slowly (a busy machine) fails kaleido's first call now and then
        failed = draw(figure, Path(path), WIDTH, height, DRAW_TIMEOUT_S)
        if failed is None:
            break
        if attempt:
            raise PpsimError(f"the browser could not draw the PNG ({failed}); {_INSTALL}", field=option)
    mark_png(Path(path))


def draw(figure_json: str, path: Path, width: int, height: int, timeout_s: float,
         program: tuple[str, ...] = (sys.executable, "-c", _DRAW)) -> str | None:
    """Draw the figure (its JSON) into ``path`` in a child process (``program`` with the path, width
    and height as arguments, the JSON on stdin); None when it did, else why not. A child still
    drawing after ``timeout_s`` is ended with everything it started (its browser)."""
    child = subprocess.Popen([*program, str(path), str(width), str(height)], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = child.communicate(figure_json.encode(), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # its session: the child and the browser it started
        child.communicate()
        return f"no answer in {timeout_s:.0f} s"
    if child.returncode:
        lines = err.decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"exit status {child.returncode}"
    return None


def mark_png(path: Path) -> None:
    """Insert the :data:`PNG_MARKER` text chunk right after the PNG's header chunk (IHDR)."""
    data = path.read_bytes()
    if not data.startswith(_PNG_SIGNATURE) or data[12:16] != b"IHDR":
        raise PpsimError(f"{path} is not a PNG file")
    ihdr_end = 8 + 8 + struct.unpack(">I", data[8:12])[0] + 4
    body = PNG_MARKER[4:]
    chunk = struct.pack(">I", len(body)) + PNG_MARKER + struct.pack(">I", zlib.crc32(PNG_MARKER) & 0xFFFFFFFF)
    path.write_bytes(data[:ihdr_end] + chunk + data[ihdr_end:])
