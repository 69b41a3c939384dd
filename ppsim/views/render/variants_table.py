"""Terminal table of several predictions side by side (``ppsim compare-schedules`` and ``ppsim sweep``)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from ppsim.views.render.labelled import LabelledPrediction
from ppsim.views.text import gib, or_dash


def variants_table(variants: list[LabelledPrediction], keys: list[str], title: str) -> Table:
    """One row per variant: its ``keys`` (override names, e.g. schedule or stages), then the figures.

    A variant that could not run says so in place of the figures (the caller prints its error).
    """
    table = Table(title=title, title_justify="left")
    for key in keys:
        table.add_column(key, justify="left" if key == "schedule" else "right")
    for col in ("step ms", "bubble", "samples/s", "tokens/s", "MFU", "peak mem GiB", "fits"):
        table.add_column(col, justify="right")
    for v in variants:
        row: list[str | Text] = [str(v.overrides.get(k, "-")) for k in keys]
        if v.summary is None:
            table.add_row(*row, Text("cannot run", style="red"), *[""] * 6)  # the CLI prints the reason above
            continue
        s = v.summary
        peak = v.peak_memory_bytes()
        row += [
            f"{s.step_time_ms:,.2f}",
            f"{100 * s.bubble_fraction:.1f} %",
            or_dash(s.throughput_samples_per_s, ",.2f"),
            or_dash(s.tokens_per_s, ",.0f"),
            or_dash(None if s.mfu is None else 100 * s.mfu, ".1f"),
            or_dash(gib(peak), ",.1f"),
            "-" if s.fits is None else ("yes" if s.fits else Text("no", style="red")),
        ]
        table.add_row(*row)
    return table
