"""The names of the file formats ppsim writes, and the bytes that mark a file as ppsim's.

Each writer takes its format name from here and :mod:`ppsim.outputs` recognises the files by the
same constants, so a format is named in one place. Imports nothing of ppsim.
"""

from __future__ import annotations

from typing import Final

TRACE_FORMAT = "ppsim-trace"
PLAN_FORMAT = "ppsim-plan"
PROFILE_FORMAT: Final = "ppsim-profile"  #: Final: the literal type of Profile.format
CHROME_FORMAT = "ppsim-chrome-trace"
#: the first line of every HTML page ppsim writes
HTML_MARKER = "<!-- ppsim -->"
#: a PNG text chunk naming ppsim as the writer (type and body, without its length and CRC)
PNG_MARKER = b"tEXtSoftware\x00ppsim"
#: the first line of every scenario file ``ppsim tune --write`` writes
TUNED_SCENARIO_MARKER = "# written by ppsim tune"
#: the first line of every scenario ``ppsim import`` writes
IMPORTED_SCENARIO_MARKER = "# written by ppsim import"
#: the first line of every device file (and its GEMM timings) ``ppexec device`` writes
DEVICE_FILE_MARKER = "# written by ppexec device"


#: the first line of the files ``ppsim export`` writes that can hold a comment, or the value of a JSON
#: file's first key (a schedule CSV holds neither: it counts as ppsim's when the TOML beside it is)
EXPORT_MARKER = "# written by ppsim export"
EXPORT_JSON_KEY = "written_by"


def written_markers() -> tuple[bytes, ...]:
    """Byte strings, one of which lies in the first 4 KiB of every file ppsim writes."""
    return (
        f'"format":"{TRACE_FORMAT}"'.encode(),  # Trace.save (compact JSON)
        f'"format": "{PLAN_FORMAT}"'.encode(),  # ppsim plan --save (indented JSON)
        b'"traceEvents"',  # Chrome trace
        HTML_MARKER.encode(),
        f"format: {PROFILE_FORMAT}".encode(),  # Profile.to_yaml
        PNG_MARKER,
        TUNED_SCENARIO_MARKER.encode(),
        IMPORTED_SCENARIO_MARKER.encode(),
        DEVICE_FILE_MARKER.encode(),
        EXPORT_MARKER.encode(),
        f'"{EXPORT_JSON_KEY}": "ppsim export'.encode(),
    )
