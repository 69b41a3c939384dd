"""``ppsim run`` in the terminal: a Summary's headline figures and a table per rank (rich)."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ppsim.trace.meta import PartitionBalance, SearchRecord
from ppsim.trace.metrics import RankMetrics, Summary
from ppsim.views.render.console import stdout_console
from ppsim.views.text import gib, or_dash


def search_line(search: SearchRecord) -> str:
    """What schedule ``auto`` chose, against the next best plan it simulated and (for a plan of one
    stage per rank) against a bound no such plan can beat."""
    others = sorted((ms, how) for how, ms in search.get("simulated", {}).items() if how != search["chosen"])
    line = f"picked {search['chosen']}, the best of {search['considered']} plans ({search['step_ms']:,.1f} ms"
    line += f"; next {others[0][1]}: {others[0][0]:,.1f} ms)" if others else ")"
    shortest, bound = search.get("shortest_ms", 0.0), search.get("bound_ms", 0.0)  # older traces lack them
    if shortest > 0 or bound > 0:
        gap = max(0.0, search["passes_ms"] / max(shortest, bound) - 1)
        where = "at" if gap < 5e-4 else f"{100 * gap:.1f} % above"
        if shortest > bound * (1 + 1e-9):
            line += (f"; its passes end {where} the shortest any plan of one stage per rank can have, "
                     f"proven by exhaustive search ({shortest:,.1f} ms with messages at their latency)")
        else:
            line += f"; its passes end {where} a bound no plan of one stage per rank can beat ({bound:,.1f} ms)"
    return line


def summary_renderable(s: Summary, to_fit: str | None = None) -> Group:
    """Headline figures and a per-rank table (``to_fit``: the changes that would make a plan that
    does not fit fit, in words: :func:`ppsim.prediction.fixes.fixes_line`)."""
    meta = s.meta
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    name = meta.get("scenario") or "-"
    head.add_row("scenario", f"{name}  ({s.source})")
    plan = f"{s.schedule}, {s.num_ranks} ranks"
    if s.chunks > 1:
        plan += f" x {s.chunks} chunks ({s.num_stages} stages)"
    plan += f", {s.microbatches} micro-batches"
    if meta.get("micro_batch"):
        plan += f" of {meta['micro_batch']}"
    plan += f", data parallel {s.data_parallel}"
    if (meta.get("tensor_parallel") or 1) > 1:
        plan += f", tensor parallel {meta['tensor_parallel']}"
    if (meta.get("context_parallel") or 1) > 1:
        plan += f", context parallel {meta['context_parallel']}"
    if meta.get("num_devices"):
        plan += f" ({meta['num_devices']:,} devices)"
    if (meta.get("expert_parallel") or 1) > 1:
        plan += f", expert parallel {meta['expert_parallel']}"
        skew = meta.get("routing_skew")
        if skew is not None:
            measured = ", as the profile measured it" if meta.get("routing_from_profile") else ""
            unmeasured = (f": the profile measured none at expert parallelism {meta['expert_parallel']}; profile "
                          "again with ppexec, or give model.moe.skew" if meta.get("routing_unmeasured") else "")
            plan += (f" (routing balanced{unmeasured})" if skew == 1
                     else f" (busiest rank's tokens {skew:.2f}x the mean{measured})")
        if meta.get("moe_dispatcher"):
            share = meta.get("moe_dispatch_share")
            of = (f"the datasheet's NVLink ({meta['moe_dispatch_gb_s']:,.0f} GB/s)" if meta.get("moe_dispatch_gb_s")
                  else "the given link")
            rate = (f"its kernels at their measured {share:.2f} of {of}" if share is not None
                    else "at the links' own rates: no measured share for this device")
            plan += f", {meta['moe_dispatcher']}'s dispatch ({rate})"
        if meta.get("moe_comm_sms") and meta.get("overlap_sm_share"):
            plan += (f", its all-to-alls' kernels holding {meta['moe_comm_sms']} SMs"
                     f" ({100 * meta['overlap_sm_share']:.0f} %) beside the compute they overlap")
    if meta.get("recompute") not in (None, "none"):
        plan += f", recompute {meta['recompute']}"
        if meta.get("recompute_layers"):
            plan += f" (the first {meta['recompute_layers']} blocks of each stage)"
    if meta.get("fp8"):
        plan += f", FP8 ({meta['fp8']} scaling)"
    if meta.get("fp4"):
        plan += f", FP4 ({meta['fp4']})"
    if meta.get("zero_stage"):
        plan += f", ZeRO-{meta['zero_stage']}"
    head.add_row("plan", plan)
    if meta.get("search"):
        head.add_row("search", search_line(meta["search"]))
    if partition := meta.get("partition"):
        head.add_row("partition", partition_line(partition, meta.get("partition_balance")))
    if meta.get("comm"):
        head.add_row("communication", str(meta["comm"]))
    if meta.get("costs_source") and s.source == "simulated":
        head.add_row("costs", str(meta["costs_source"]))
    head.add_row("step time", f"{s.step_time_ms:,.3f} ms")
    head.add_row("throughput", f"{or_dash(s.throughput_samples_per_s, ',.2f')} samples/s   "
                               f"{or_dash(s.tokens_per_s, ',.0f')} tokens/s")
    mfu = or_dash(None if s.mfu is None else 100 * s.mfu, ".1f", " %")
    if s.mfu_above_peak:
        head.add_row("MFU", Text.assemble(mfu, ("  above 100 %: ", "bold yellow"), s.mfu_above_peak))
    else:
        head.add_row("MFU", mfu)
    head.add_row("bubble", f"{100 * s.bubble_fraction:.2f} %  (idle / total over all ranks)")
    if s.ideal_bubble_fraction is not None:
        head.add_row("ideal bubble", f"{100 * s.ideal_bubble_fraction:.2f} %  (the same order, communication free)")
    if s.bottleneck is not None:
        head.add_row("critical path", s.bottleneck.line())
    memory = memory_line(s)
    if memory:
        head.add_row("memory", memory)
        breakdown = peak_breakdown(s)
        if breakdown:
            head.add_row("at the peak", breakdown)
        if to_fit is not None:
            head.add_row("to fit", to_fit)
    return Group(head, Text(""), rank_table(s))


def partition_line(counts: list[int], even: PartitionBalance | None) -> str:
    """The layers per stage and, for one stage per rank, why the slowest stage is as heavy as it is:
    its share of the work, a layer's, and what moving one layer would do (or what the balanced split
    would reach, when it is better)."""
    line = " ".join(str(c) for c in counts) + " layers per stage"
    if not even or even["slowest_share"] < 1.005:
        return line + ("" if not even else ": the work is even")
    b = even["slowest"]
    holds = f" and {even['holds']}" if even["holds"] else ""
    line += (f"; the slowest, stage {b} ({counts[b]} layers{holds}), has {even['slowest_share']:.2f}x the even share"
             f" of the work, a layer {even['layer_share']:.2f}x")
    if even["best_share"] < even["slowest_share"] - 0.005:
        return line + f": the balanced partition reaches {even['best_share']:.2f}x (pipeline.partition: balanced)"
    if even["moved"] is not None:
        line += f"; moving one layer away makes stage {even['moved']['stage']} {even['moved']['share']:.2f}x"
    return line + ": no split of whole layers is faster"


def rank_table(s: Summary) -> Table:
    """One row per rank: its stages (when it holds several) and their layers, busy time, bubble,
    activations, waiting, memory."""
    counts = s.meta.get("partition")
    several = any(len(r.stages) > 1 for r in s.per_rank)
    table = Table(title="per rank", title_justify="left")
    table.add_column("rank", justify="right")
    if several:
        table.add_column("stages", justify="right")
    if counts:
        table.add_column("layers", justify="right")
    with_memory = any(r.peak_memory_bytes is not None for r in s.per_rank)
    waits = ("exposed comm ms", "peer wait ms")
    # a mixture of experts: each rank's time in its all-to-alls (inside its passes, not hidden)
    alltoall = s.meta.get("alltoall_ms")
    for col in (("busy ms", "bubble", "micro-batches held", *waits) + (("all-to-all ms",) if alltoall else ())
                + (("peak mem GiB",) if with_memory else ())):
        table.add_column(col, justify="right")
    for r in s.per_rank:
        row: list[str | Text] = [str(r.rank), *([",".join(map(str, r.stages)) or "-"] if several else [])]
        if counts:
            row.append("+".join(str(counts[k]) for k in r.stages if k < len(counts)) or "-")
        row += [f"{r.busy_ms:,.3f}", f"{100 * r.bubble_fraction:.2f} %", f"{r.peak_activation_microbatches:g}",
                or_dash(r.exposed_comm_ms, ",.3f"), or_dash(r.peer_wait_ms, ",.3f")]
        if alltoall:
            row.append(f"{alltoall[r.rank]:,.3f}" if r.rank < len(alltoall) else "-")
        if with_memory:
            over = bool(s.memory_capacity_bytes) and (r.peak_memory_bytes or 0) > (s.memory_capacity_bytes or 0)
            row.append(Text(or_dash(gib(r.peak_memory_bytes), ",.2f"), style="red" if over else ""))
        table.add_row(*row)
    return table


def memory_line(s: Summary) -> Text | None:
    """Peak memory against the device's, naming every rank that does not fit, by how much and where."""
    peaks = [r for r in s.per_rank if r.peak_memory_bytes is not None]
    if not peaks or not s.memory_capacity_bytes:
        return None
    cap = s.memory_capacity_bytes
    top = max(peaks, key=lambda r: r.peak_memory_bytes or 0.0)
    line = f"peak {gib(top.peak_memory_bytes):,.2f} GiB on rank {top.rank} of {cap / 2**30:,.0f} GiB per device"
    over = s.over_capacity()
    if not over:
        return Text(line + ": fits")
    shown = sorted(over, key=lambda r: -(r.peak_memory_bytes or 0.0))[:_NAMED]
    rest = sorted(r.rank for r in over if r not in shown)
    more = f"; and {len(rest)} more rank{'s' * (len(rest) > 1)} over ({_ranges(rest)})" if rest else ""
    return Text.assemble(("DOES NOT FIT", "bold red"), ": " + "; ".join(_over(r, cap) for r in shown) + more)


_NAMED = 2  #: the ranks over the device's memory named in full, the worst first (the rest counted)


def _ranges(ranks: list[int]) -> str:
    """``2-7, 9, 11-15``: sorted ranks as runs."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


def peak_breakdown(s: Summary) -> str | None:
    """What the rank of the highest peak holds then: its model states and buffers, and the
    activations of the micro-batches in flight (None without the static part)."""
    ranks = [r for r in s.per_rank if r.peak_parts() is not None]
    if not ranks:
        return None
    top = max(ranks, key=lambda r: r.peak_memory_bytes or 0.0)
    parts = top.peak_parts()
    assert parts is not None  # as filtered
    return (f"rank {top.rank}: " + " + ".join(f"{name} {gib(b):,.2f}" for name, b in parts.items() if b > 0)
            + f" GiB ({top.peak_activation_microbatches:g} micro-batch{'' if top.peak_activation_microbatches == 1 else 'es'}"
            " in flight at most)")


def _over(r: RankMetrics, cap: float) -> str:
    return (f"rank {r.rank} needs {gib(r.peak_memory_bytes):,.2f} GiB, "
            f"{gib((r.peak_memory_bytes or 0.0) - cap):,.2f} GiB too many, at {r.peak_memory_at}")


def print_summary(s: Summary, console: Console | None = None, to_fit: str | None = None) -> None:
    (console or stdout_console()).print(summary_renderable(s, to_fit))
