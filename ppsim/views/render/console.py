"""Where ppsim's and ppexec's tables go: stdout, as wide as the terminal; when stdout is not a
terminal (a pipe, a file, a CI log, a notebook's captured output) as wide as the tables need, so no
figure is ever cut to fit 80 columns."""

from __future__ import annotations

from rich.console import Console

#: columns when stdout is not a terminal: wider than any table, which keeps its natural width
UNCUT_WIDTH = 10_000


def stdout_console(*, highlight: bool = True) -> Console:
    """A console on stdout that cuts nothing."""
    console = Console(highlight=highlight)
    return console if console.is_terminal else Console(highlight=highlight, width=UNCUT_WIDTH)
