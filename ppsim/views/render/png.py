"""Write a Plotly figure as a PNG with kaleido, which drives a Chrome or Chromium found on the machine.

kaleido and choreographer (how kaleido finds the browser) are core dependencies; the browser is the
machine's. :func:`check_png` fails early, with the fix, when no browser is found, so a command does
not simulate first and fail at the end.
"""

from __future__ import annotations

import os
import struct
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
    for attempt in range(2):  # a browser that starts slowly (a busy machine) fails kaleido's first call now and then
        try:
            fig.write_image(str(path), format="png", width=WIDTH, height=height, scale=1)
            break
        except Exception as exc:  # kaleido / choreographer raise their own types when the browser fails
            if attempt:
                raise PpsimError(f"the browser could not draw the PNG ({type(exc).__name__}: {exc}); {_INSTALL}",
                                 field=option) from None
    mark_png(Path(path))


def mark_png(path: Path) -> None:
    """Insert the :data:`PNG_MARKER` text chunk right after the PNG's header chunk (IHDR)."""
    data = path.read_bytes()
    if not data.startswith(_PNG_SIGNATURE) or data[12:16] != b"IHDR":
        raise PpsimError(f"{path} is not a PNG file")
    ihdr_end = 8 + 8 + struct.unpack(">I", data[8:12])[0] + 4
    body = PNG_MARKER[4:]
    chunk = struct.pack(">I", len(body)) + PNG_MARKER + struct.pack(">I", zlib.crc32(PNG_MARKER) & 0xFFFFFFFF)
    path.write_bytes(data[:ihdr_end] + chunk + data[ihdr_end:])
