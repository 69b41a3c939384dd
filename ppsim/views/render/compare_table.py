"""``ppsim compare`` in the terminal: the comparison of two traces as rich tables."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ppsim.trace.compare import Comparison
from ppsim.views.render.console import stdout_console
from ppsim.views.text import or_dash

#: the one sign every error on the screen takes: a prediction too high is positive
CONVENTION = "error = predicted - measured, relative: over measured"

def comparison_renderable(c: Comparison) -> Group:
    """Headline, per-rank and per-kind tables and the largest disagreements (rich)."""
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("scenario", f"{c.scenario or '-'}  (predicted {c.predicted_schedule}, measured {c.measured_schedule})")
    head.add_row(
        "step time",
        f"predicted {c.predicted_step_time_ms:,.3f} ms   measured {c.measured_step_time_ms:,.3f} ms   "
        f"error {100 * c.step_time_error:+.2f} %",
    )
    head.add_row(
        "bubble",
        f"predicted {100 * c.predicted_bubble_fraction:.2f} %   measured {100 * c.measured_bubble_fraction:.2f} %   "
        f"largest stage error {c.max_abs_bubble_error_pp:.2f} pp",
    )
    head.add_row("actions", f"{c.matched} matched")
    head.add_row("start error", f"median {c.start_error_ms_median:.3f} ms   p90 {c.start_error_ms_p90:.3f} ms")
    head.add_row("duration error", f"median {c.duration_error_ms_median:.3f} ms   p90 {c.duration_error_ms_p90:.3f} ms")
    parts: list[Any] = [head]
    for note in (*c.meta_differences, *c.unmatched):
        parts.append(Text(f"note: {note}", style="yellow"))
    for hint in c.hints:
        parts.append(Text(f"hint: {hint}", style="yellow"))

    ranks = Table(title=f"per rank ({CONVENTION})", title_justify="left")
    for col in ("rank", "busy pred ms", "busy meas ms", "bubble pred", "bubble meas", "error pp"):
        ranks.add_column(col, justify="right")
    for s in c.ranks:
        ranks.add_row(
            str(s.rank), f"{s.predicted_busy_ms:,.3f}", f"{s.measured_busy_ms:,.3f}",
            f"{100 * s.predicted_bubble_fraction:.2f} %", f"{100 * s.measured_bubble_fraction:.2f} %",
            f"{s.bubble_error_pp:+.2f}",
        )

    kinds = Table(title=f"per kind (starts and durations: how far apart, in ms; rel dur: {CONVENTION})",
                  title_justify="left")
    for col in ("kind", "count", "start med", "start p90", "dur med", "dur p90", "rel dur"):
        kinds.add_column(col, justify="right")
    for k in c.by_kind.values():
        kinds.add_row(
            k.kind, str(k.count), f"{k.start_error_ms_median:.3f}", f"{k.start_error_ms_p90:.3f}",
            f"{k.duration_error_ms_median:.3f}", f"{k.duration_error_ms_p90:.3f}",
            or_dash(None if k.relative_duration_error_median is None else 100 * k.relative_duration_error_median, "+.1f", " %"),
        )
    parts += [Text(""), ranks, Text(""), kinds]

    if c.causes:
        causes = Table(title=f"largest differences by kind and stage (durations summed; {CONVENTION})",
                       title_justify="left")
        for col in ("kind", "stage", "rank", "count", "pred ms", "meas ms", "error ms", "rel dur"):
            causes.add_column(col, justify="right")
        for x in c.causes:
            causes.add_row(x.kind, str(x.stage), str(x.rank), str(x.count), f"{x.predicted_ms:,.3f}",
                           f"{x.measured_ms:,.3f}", f"{-x.delta_ms:+,.3f}",  # delta_ms: measured - predicted
                           or_dash(None if x.relative_error is None else 100 * x.relative_error, "+.1f", " %"))
        parts += [Text(""), causes]

    if c.worst:
        parts += [Text(""), Text(f"largest disagreements (top {len(c.worst)}; start delays add up along the step)",
                                 style="italic")]
        for i, d in enumerate(c.worst, 1):
            parts.append(Text(f"{i:>3}. {d.description}"))
            parts.append(Text(
                f"     predicted {d.predicted_start_ms:.3f} - {d.predicted_end_ms:.3f} ms, "
                f"measured {d.measured_start_ms:.3f} - {d.measured_end_ms:.3f} ms", style="dim"))
    return Group(*parts)


def print_comparison(c: Comparison, console: Console | None = None) -> None:
    (console or stdout_console()).print(comparison_renderable(c))
