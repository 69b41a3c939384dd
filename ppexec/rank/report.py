"""What ``ppexec rank`` prints: per rank, compute per action kind and the peak, predicted against
measured, the model states, and the verdict; with several ranks, the heaviest as measured."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ppexec.rank.check import RankCheck

MIB = 2**20


def _ratio(predicted: float, measured: float) -> str:
    return f"{(predicted - measured) / measured:+.1%}" if measured else "-"


def print_check(c: RankCheck, console: Console) -> None:
    console.print(f"[bold]rank {c.rank}[/] (stages {', '.join(map(str, c.stages))}) run alone on {c.device}, "
                  f"{c.steps} steps; memory by the allocator; actions in the plan's order: "
                  f"{'yes' if c.order_ok else 'NO'}", highlight=False)
    table = Table(show_edge=False, pad_edge=False)
    for col in ("kind", "predicted ms", "measured ms", "error"):
        table.add_column(col, justify="left" if col == "kind" else "right")
    for kind, (p, m) in c.kinds.items():
        table.add_row(kind, f"{p:,.3f}", f"{m:,.3f}", _ratio(p, m))
    console.print(table)
    console.print(f"peak memory  predicted {c.predicted_peak_bytes / MIB:,.1f} MiB at {c.predicted_peak_at}; measured "
                  f"between actions {c.measured_between_bytes / MIB:,.1f} MiB after {c.measured_between_at} (error "
                  f"{_ratio(c.predicted_peak_bytes, c.measured_between_bytes)}), within one "
                  f"{c.measured_peak_bytes / MIB:,.1f} MiB in {c.measured_peak_at} "
                  f"(error {_ratio(c.predicted_peak_bytes, c.measured_peak_bytes)})", highlight=False)
    states = ", ".join(f"{name} {p / MIB:,.2f} / {m / MIB:,.2f} MiB" + (" (exact)" if p == m else "")
                       for name, (p, m) in c.model_states.items())
    console.print(f"model states predicted / measured: {states}", highlight=False)
    beyond = f" + {c.beyond_bytes / MIB:,.0f} MiB the device holds beyond the tensors" if c.beyond_bytes else ""
    console.print(f"verdict      {c.verdict}: {c.measured_peak_bytes / MIB:,.1f} MiB{beyond} of "
                  f"{c.device_bytes / MIB:,.0f} MiB ({c.headroom:.1%} left)", highlight=False)


def print_heaviest(checks: list[RankCheck], console: Console) -> None:
    measured = max(checks, key=lambda c: c.measured_peak_bytes)
    predicted = max(checks, key=lambda c: c.predicted_peak_bytes)
    same = "as predicted" if measured.rank == predicted.rank else f"ppsim predicted rank {predicted.rank}"
    console.print(f"[bold]heaviest[/]: rank {measured.rank} ({measured.measured_peak_bytes / MIB:,.1f} MiB measured "
                  f"at {measured.measured_peak_at}); {same}", highlight=False)
