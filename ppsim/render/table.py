"""Terminal rendering of a Summary (rich) and the step x rank grid of a plan."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ppsim.metrics import Summary


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def summary_renderable(s: Summary) -> Group:
    """Headline figures and a per-stage table."""
    meta = s.meta
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    name = meta.get("scenario") or "-"
    head.add_row("scenario", f"{name}  ({s.source})")
    plan = f"{s.schedule}, {s.stages} stages"
    if s.chunks > 1:
        plan += f" x {s.chunks} chunks"
    plan += f", {s.microbatches} micro-batches"
    if meta.get("micro_batch"):
        plan += f" of {meta['micro_batch']}"
    plan += f", data parallel {s.data_parallel}"
    head.add_row("plan", plan)
    if meta.get("partition"):
        head.add_row("partition", " ".join(str(c) for c in meta["partition"]) + " layers per stage")
    if meta.get("comm"):
        head.add_row("communication", str(meta["comm"]))
    head.add_row("step time", f"{s.step_time_ms:,.3f} ms")
    head.add_row(
        "throughput",
        f"{_fmt(s.throughput_samples_per_s, ',.2f')} samples/s   {_fmt(s.tokens_per_s, ',.0f')} tokens/s",
    )
    head.add_row("MFU", _fmt(None if s.mfu is None else 100 * s.mfu, ".1f", " %"))
    head.add_row("bubble", f"{100 * s.bubble_fraction:.2f} %  (idle / total over all stages)")
    memory = memory_line(s)
    if memory:
        head.add_row("memory", memory)

    table = Table(title="per stage", title_justify="left")
    table.add_column("stage", justify="right")
    if meta.get("partition"):
        table.add_column("layers", justify="right")
    with_memory = any(st.peak_memory_bytes is not None for st in s.per_stage)
    for col in ("busy ms", "bubble", "peak act. mb", "comm wait ms") + (("peak mem GiB",) if with_memory else ()):
        table.add_column(col, justify="right")
    chunks = max(1, s.chunks)
    for st in s.per_stage:
        row = [str(st.stage)]
        if meta.get("partition"):
            counts = meta["partition"]
            per_chunk = [str(counts[c * s.stages + st.stage]) for c in range(chunks)] if len(counts) == s.stages * chunks else []
            row.append("+".join(per_chunk) or "-")
        row += [
            f"{st.busy_ms:,.3f}",
            f"{100 * st.bubble_fraction:.2f} %",
            f"{st.peak_activation_microbatches:g}",
            f"{st.comm_wait_ms:,.3f}",
        ]
        if with_memory:
            over = s.memory_capacity_bytes and (st.peak_memory_bytes or 0) > s.memory_capacity_bytes
            row.append(f"{'[red]' if over else ''}{_fmt(_gib(st.peak_memory_bytes), ',.2f')}")
        table.add_row(*row)
    return Group(head, Text(""), table)


def _gib(x: float | None) -> float | None:
    return None if x is None else x / 2**30


def memory_line(s: Summary) -> str | None:
    """Peak memory against the device's, naming every stage that does not fit, by how much and where."""
    peaks = [st for st in s.per_stage if st.peak_memory_bytes is not None]
    if not peaks or not s.memory_capacity_bytes:
        return None
    cap = s.memory_capacity_bytes
    top = max(peaks, key=lambda st: st.peak_memory_bytes or 0.0)
    line = f"peak {_gib(top.peak_memory_bytes):,.2f} GiB on stage {top.stage} of {cap / 2**30:,.0f} GiB per device"
    over = s.over_capacity()
    if not over:
        return line + ": fits"
    parts = [f"stage {st.stage} needs {_gib(st.peak_memory_bytes):,.2f} GiB, "
             f"{_gib((st.peak_memory_bytes or 0.0) - cap):,.2f} GiB too many, at {st.peak_memory_at}" for st in over]
    return "[bold red]DOES NOT FIT[/]: " + "; ".join(parts)


def print_summary(s: Summary, console: Console | None = None) -> None:
    (console or Console()).print(summary_renderable(s))
