"""Schedule registry: a schedule is a pure function of integers that returns a compute-only Plan,
registered with the capabilities every consumer reads (chunks, placement, split backward,
micro-batch rule, memory); no module outside this package names a schedule.

To add a schedule, write a builder ``(ranks, microbatches, chunks) -> Plan`` in a module here and
register it in ``SCHEDULES`` with its capabilities; ``file:PATH`` reads a plan from a file. ``auto``
is not a schedule but a search (:data:`SEARCHED`): :func:`describe` gives what it declares.
"""

from __future__ import annotations

from ppsim.errors import ScheduleError
from ppsim.plan.plan import Plan
from ppsim.plan.schedules.base import Capabilities, Chunks, Microbatches, Placement, ScheduleInfo
from ppsim.plan.schedules.controllable import v_half, v_min
from ppsim.plan.schedules.dualpipe import dualpipe, dualpipev
from ppsim.plan.schedules.fill_drain import gpipe, inference, looped_bfs
from ppsim.plan.schedules.from_file import FILE_PREFIX, from_file
from ppsim.plan.schedules.one_f_one_b import combined_1f1b, interleaved_1f1b, one_f_one_b
from ppsim.plan.schedules.zero_bubble import interleaved_zb, zb_h1, zb_h2, zb_v


def _multiple_of_ranks_when_interleaved(p: int, m: int, v: int) -> int | None:
    return None if v == 1 or m % p == 0 else -(-m // p) * p


def _whole_rounds(p: int, m: int, v: int) -> int | None:
    """torch's interleaved zero bubble runs m in max(1, m // p) equal rounds."""
    fits = lambda n: n % max(1, n // p) == 0  # noqa: E731
    return None if fits(m) else next(n for n in range(m + 1, 2 * m + p) if fits(n))


def _at_least_two_per_stage(p: int, m: int, v: int) -> int | None:
    """DualPipeV needs a micro-batch per virtual stage (m >= 2p)."""
    return None if m >= 2 * p else 2 * p


def _two_per_stage_per_pipe(p: int, m: int, v: int) -> int | None:
    """DualPipe gives each pipe half the micro-batches and needs a micro-batch per stage of it (m even, m >= 2p)."""
    return None if m >= 2 * p and m % 2 == 0 else max(2 * p, m + m % 2)


def _interleaved_peak(p: int, m: int, v: int) -> float:
    return min(p, m) if v == 1 else min((v + 1) * p - 1, m * v) / v


def _interleaved_zb_peak(p: int, m: int, v: int) -> float:
    per_round = m // max(1, m // p)
    return min((v - 1) * per_round + p, m * v) / v


def _combined_peak(p: int, m: int, v: int) -> float:
    """One more forward in flight than interleaved 1F1B (its extra warm-up forward)."""
    return min(_interleaved_peak(p, m, v) + 1 / v, m)


ANY_CHUNKS = Chunks(minimum=1, maximum=None, default=2)
MEGATRON = "megatron"  #: Megatron-Core's schedule functions (megatron/core/pipeline_parallel/schedules.py)
TWO_OR_MORE = Chunks(minimum=2, maximum=None, default=2)
V_SHAPED = Chunks(minimum=2, maximum=2, default=2)

SCHEDULES: dict[str, ScheduleInfo] = {
    info.name: info
    for info in (
        ScheduleInfo("gpipe", "GPipe: all forwards, then all backwards", build_order=gpipe,
                     memory="m", peak_activations=lambda p, m, v: m, native=(("torch", "GPipe"),)),
        ScheduleInfo("1f1b", "1F1B (PipeDream-flush, DeepSpeed TrainSchedule): stage s holds p - s",
                     build_order=one_f_one_b, memory="p", peak_activations=lambda p, m, v: min(p, m),
                     native=((MEGATRON, "forward_backward_pipelining_without_interleaving"), ("torch", "1F1B"),
                             ("deepspeed", "TrainSchedule"))),
        ScheduleInfo("interleaved-1f1b", "Megatron interleaved 1F1B: v chunks per rank, bubble / v, v x more messages",
                     build_order=interleaved_1f1b, chunks=ANY_CHUNKS,
                     microbatches=Microbatches("multiple of p (v > 1)", _multiple_of_ranks_when_interleaved),
                     memory="p + (p - 1) / v", peak_activations=_interleaved_peak,
                     native=((MEGATRON, "forward_backward_pipelining_with_interleaving"), ("torch", "Interleaved1F1B"))),
        ScheduleInfo("combined-1f1b", "Megatron-Core's combined 1F1B (MoE all-to-all overlap): interleaved 1F1B "
                     "with one more warm-up forward, then each forward and an earlier backward as one action",
                     build_order=combined_1f1b, chunks=ANY_CHUNKS, pipeline_chunks=2, overlaps=True,
                     microbatches=Microbatches("multiple of p (v > 1)", _multiple_of_ranks_when_interleaved),
                     memory="p + (p - 1) / v + 1 / v", peak_activations=_combined_peak,
                     native=((MEGATRON, "combined_1f1b_schedule_for_interleaved_pipelining"),)),
        ScheduleInfo("looped-bfs", "Breadth-first over chunks (looped BFS): GPipe chunk by chunk",
                     build_order=looped_bfs, chunks=TWO_OR_MORE, memory="m", peak_activations=lambda p, m, v: m,
                     native=(("torch", "LoopedBFS"),)),
        ScheduleInfo("zb-h1", "Zero bubble H1: split backward, W's fill the drain: 1/3 of 1F1B's bubble",
                     build_order=zb_h1, splits_backward=True, memory="p", peak_activations=lambda p, m, v: min(p, m)),
        ScheduleInfo("zb-h2", "Zero bubble H2: more warm-up forwards; no gap in a rank's span for m >= 2p - 1",
                     build_order=zb_h2, splits_backward=True, memory="2p - 1",
                     peak_activations=lambda p, m, v: min(2 * p - 1, m)),
        ScheduleInfo("zb-v", "ZB-V: V placement, split backward; no gap in a span for m >= 2p - 1",
                     build_order=zb_v, chunks=V_SHAPED, placement=Placement.V, splits_backward=True,
                     memory="p", peak_activations=lambda p, m, v: min(p, m), native=(("torch", "ZBVZeroBubble"),)),
        ScheduleInfo("v-half", "V-Half: V placement, split backward, half of 1F1B's activations",
                     build_order=v_half, chunks=V_SHAPED, placement=Placement.V, splits_backward=True,
                     memory="(p + 2) // 2", peak_activations=lambda p, m, v: min((p + 2) // 2, m)),
        ScheduleInfo("v-min", "V-Min: V placement, split backward, a third of 1F1B's activations",
                     build_order=v_min, chunks=V_SHAPED, placement=Placement.V, splits_backward=True,
                     memory="(p + 4) // 3", peak_activations=lambda p, m, v: min((p + 4) // 3, m)),
        ScheduleInfo("dualpipev", "DualPipeV (DeepSeek): V placement, a forward and a backward overlapped as one action",
                     build_order=dualpipev, chunks=V_SHAPED, placement=Placement.V, splits_backward=True, overlaps=True,
                     microbatches=Microbatches("at least 2p", _at_least_two_per_stage),
                     memory="p + 1/2", peak_activations=lambda p, m, v: p + 0.5, native=(("torch", "DualPipeV"),)),
        ScheduleInfo("dualpipe", "DualPipe (DeepSeek): two copies of the model fed from both ends, a forward and a "
                     "backward overlapped as one action", build_order=dualpipe, chunks=V_SHAPED, placement=Placement.V,
                     splits_backward=True, overlaps=True, pipes=2, folded="dualpipev",
                     microbatches=Microbatches("even, at least 2p", _two_per_stage_per_pipe),
                     memory="(p + 1) / 2", peak_activations=lambda p, m, v: (p + 1) / 2),
        ScheduleInfo("interleaved-zb", "Interleaved zero bubble: Megatron's interleaving with split backward",
                     build_order=interleaved_zb, chunks=TWO_OR_MORE, splits_backward=True,
                     microbatches=Microbatches("max(1, m // p) equal rounds", _whole_rounds),
                     memory="p (m multiple of p)", peak_activations=_interleaved_zb_peak,
                     native=(("torch", "InterleavedZeroBubble"),)),
        ScheduleInfo("inference", "Forward only, pipelined (no backward, no optimizer)", build_order=inference, training=False),
    )
}



def native(framework: str) -> tuple[ScheduleInfo, ...]:
    """The registered schedules a framework (``megatron``, ``torch``, ``deepspeed``) runs as its own,
    in the registry's order."""
    return tuple(info for info in SCHEDULES.values() if info.native_name(framework) is not None)


def native_schedule(framework: str, name: str) -> str | None:
    """The registered schedule the framework calls ``name``, compared without case (torch looks its
    classes up in any case), or None."""
    return next((info.name for info in native(framework) if (info.native_name(framework) or "").lower() == name.lower()),
                None)


#: the name that asks for a search instead of a schedule: the fastest plan that fits, found on the
#: stage costs by :func:`ppsim.prediction.auto.auto_build` (its orders: :mod:`ppsim.plan.order_search`)
SEARCHED = "auto"
#: what the search declares before it has picked: it starts from one chunk per rank, on the loop
#: placement, with split backwards (and may pick a schedule of several chunks)
SEARCH = Capabilities(SEARCHED, "Searched on the stage costs: the fastest plan that fits each rank's memory",
                      splits_backward=True, memory="memory_budget")
#: every name ``pipeline.schedule`` takes (besides file:PATH)
NAMES: tuple[str, ...] = (*SCHEDULES, SEARCHED)

#: what a scenario runs when it names no schedule, and what one stage (gradient accumulation, where
#: every schedule is the same) is searched with: DeepSpeed's TrainSchedule order
DEFAULT = "1f1b"
#: what ``ppexec profile`` runs: every forward before any backward, on one chunk and whole
#: backwards, so each pass is timed on its own and both runtimes run it
PROFILING = "gpipe"


def describe(name: str) -> Capabilities:
    """What a name ``pipeline.schedule`` takes declares (a schedule, ``file:PATH`` or ``auto``);
    an unknown name lists the known ones."""
    return SEARCH if name == SEARCHED else get(name)


def get(name: str) -> ScheduleInfo:
    """Look a schedule up by name (or ``file:PATH``) to build it; an unknown name lists the known
    ones, and ``auto`` says it is a search."""
    if name.startswith(FILE_PREFIX):
        return from_file(name[len(FILE_PREFIX):])
    try:
        return SCHEDULES[name]
    except KeyError:
        if name == SEARCHED:
            raise ScheduleError("auto is a search on the stage costs, not a schedule with its own order: predict "
                                "the scenario (ppsim run), or call ppsim.prediction.auto.auto_build",
                                field="pipeline.schedule") from None
        raise ScheduleError(
            f"unknown schedule {name!r}; choose one of: {', '.join(NAMES)}, or file:PATH (a plan file)",
            field="pipeline.schedule",
        ) from None


def build(name: str, num_ranks: int, num_microbatches: int, chunks: int | None = None) -> Plan:
    """Build the compute-only plan of schedule ``name`` (chunks: the schedule's default when None)."""
    return get(name).build(num_ranks, num_microbatches, chunks)


__all__ = ["DEFAULT", "FILE_PREFIX", "NAMES", "PROFILING", "SCHEDULES", "SEARCH", "SEARCHED", "Capabilities", "Chunks",
           "Microbatches", "Placement", "ScheduleInfo", "build", "describe", "get", "native", "native_schedule"]
