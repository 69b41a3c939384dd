"""Terminal table of several predictions side by side (``ppsim compare-schedules`` and ``ppsim sweep``)."""

from __future__ import annotations

from rich.table import Table

from ppsim.sweep import Variant


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else f"{value:{spec}}"


def variants_table(variants: list[Variant], keys: list[str], title: str) -> Table:
    """One row per variant: its ``keys`` (override names, e.g. schedule or stages), then the figures.

    A variant that could not run says so in place of the figures (the caller prints its error).
    """
    table = Table(title=title, title_justify="left")
    for key in keys:
        table.add_column(key, justify="left" if key == "schedule" else "right")
    for col in ("step ms", "bubble", "samples/s", "tokens/s", "MFU", "peak mem GiB", "fits"):
        table.add_column(col, justify="right")
    for v in variants:
        row = [str(v.overrides.get(k, "-")) for k in keys]
        if v.summary is None:
            table.add_row(*row, "[red]cannot run[/]", *[""] * 6)  # the CLI prints the reason above
            continue
        s = v.summary
        peak = v.peak_memory_bytes()
        row += [
            f"{s.step_time_ms:,.2f}",
            f"{100 * s.bubble_fraction:.1f} %",
            _cell(s.throughput_samples_per_s, ",.2f"),
            _cell(s.tokens_per_s, ",.0f"),
            _cell(None if s.mfu is None else 100 * s.mfu, ".1f"),
            _cell(None if peak is None else peak / 2**30, ",.1f"),
            "-" if s.fits is None else ("yes" if s.fits else "[red]no[/]"),
        ]
        table.add_row(*row)
    return table
