"""What every schedule shares: its registry entry, which declares what it accepts and what it does
as typed fields (every consumer reads these, never a schedule's name), and the size checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum

from ppsim.errors import ScheduleError
from ppsim.gc_pause import gc_paused
from ppsim.plan.action import Action
from ppsim.plan.plan import Plan, loop_placement, v_placement

Builder = Callable[[int, int, int], Plan]  #: (ranks p, micro-batches m, chunks v) -> compute-only plan
#: (p, m, v) -> the most micro-batches of activations a rank holds, in units of one micro-batch of
#: everything the rank holds (a chunk's micro-batch counts 1/v); None where no bound is published
PeakActivations = Callable[[int, int, int], float]


class Placement(str, Enum):
    """Which rank runs each virtual stage."""

    LOOP = "loop"  #: stage c * p + r on rank r (Megatron's interleaved placement)
    V = "v"  #: two chunks: rank r holds stages r and 2p - 1 - r (ZB-V, DualPipeV)
    PLAN = "plan"  #: the plan's own ``stage_to_rank`` (a plan read from a file)


@dataclass(frozen=True)
class Chunks:
    """The virtual stages per rank (v) a schedule runs."""

    minimum: int = 1
    maximum: int | None = 1  #: None: no upper bound
    default: int = 1  #: what a tool that picks for the user takes (sweep, TUI, tune)

    def allows(self, v: int) -> bool:
        return v >= self.minimum and (self.maximum is None or v <= self.maximum)

    @property
    def fixed(self) -> bool:
        """Exactly one value allowed."""
        return self.maximum == self.minimum

    def words(self) -> str:
        """``one chunk``, ``2 chunks``, ``at least 2 chunks``."""
        if self.fixed:
            return "one chunk" if self.minimum == 1 else f"{self.minimum} chunks"
        return f"at least {self.minimum} chunk" + ("s" if self.minimum > 1 else "") if self.maximum is None else (
            f"{self.minimum} to {self.maximum} chunks")

    def __str__(self) -> str:
        if self.fixed:
            return str(self.minimum)
        return f">= {self.minimum}" if self.maximum is None else f"{self.minimum}-{self.maximum}"


#: (p, m, v) -> None when m is accepted, else the nearest accepted m
MicrobatchRule = Callable[[int, int, int], int | None]


@dataclass(frozen=True)
class Microbatches:
    """The micro-batch counts (m) a schedule accepts, for p ranks."""

    text: str = "any"  #: what the schedule needs, in words (p: the rank count)
    fix: MicrobatchRule | None = None

    def nearest(self, p: int, m: int, v: int) -> int | None:
        """None when ``m`` is accepted, else the nearest accepted count to suggest."""
        return None if self.fix is None else self.fix(p, m, v)


@dataclass(frozen=True)
class Capabilities:
    """What a name ``pipeline.schedule`` takes declares: what it accepts and what its plans do
    (a registered schedule, a plan file, or ``auto``, the search)."""

    name: str
    summary: str
    chunks: Chunks = Chunks()
    placement: Placement = Placement.LOOP
    splits_backward: bool = False  #: runs I and W (input grad, weight grad) instead of one B
    overlaps: bool = False  #: runs a forward and a backward of two micro-batches as one compound action
    training: bool = True  #: False for forward-only schedules
    microbatches: Microbatches = Microbatches()
    memory: str = ""  #: the peak activations per rank in words (1F1B holds p micro-batches)
    peak_activations: PeakActivations | None = None  #: the same as a formula, checked by the tests
    stage_to_rank_of: Callable[[int, int], tuple[int, ...]] | None = None  #: for Placement.PLAN
    ranks: int | None = None  #: the one rank count it runs (a plan file); None: any
    #: the chunks it needs once there is a pipeline (p > 1): Megatron's combined 1F1B runs on virtual stages
    pipeline_chunks: int = 1
    #: the pipelines its stages form, each a copy of the model with its share of the micro-batches
    #: (DualPipe: two, in opposite directions; see :class:`~ppsim.plan.plan.Plan`)
    pipes: int = 1
    #: with several pipes, the schedule that runs the same phases on one copy of the model (its
    #: ranks hold no more memory: the tuner bounds this one only where that one fits)
    folded: str | None = None
    #: the frameworks that run this kind of order as a schedule of their own, each with its name
    #: there (Megatron-Core's schedule function, torch's schedule class, DeepSpeed's): what an
    #: export may ask a framework for, and what an import reads back (read from Megatron-LM core
    #: 0.20.0's pipeline_parallel/schedules.py, torch 2.13's get_schedule_class, DeepSpeed 0.19.6's
    #: runtime/pipe/schedule.py)
    native: tuple[tuple[str, str], ...] = ()

    def native_name(self, framework: str) -> str | None:
        """The framework's name for its own schedule of this kind, or None where it has none."""
        return dict(self.native).get(framework)

    def allows_chunks(self, p: int, v: int) -> bool:
        """Whether it runs ``v`` chunks on ``p`` ranks."""
        return self.chunks.allows(v) and (p == 1 or v >= self.pipeline_chunks)

    def chunks_for(self, v: int) -> int:
        """The chunks this schedule runs in place of a scenario's ``v``: ``v`` where it takes it (and
        ``v`` > 1, or one chunk is its default: an interleaved schedule on one chunk only repeats
        1F1B), else its default."""
        return v if self.chunks.allows(v) and (v > 1 or self.chunks.default == 1) else self.chunks.default

    def stage_to_rank(self, p: int, v: int) -> tuple[int, ...]:
        """Which rank runs each of the p x v virtual stages."""
        if self.stage_to_rank_of is not None:
            return self.stage_to_rank_of(p, v)
        return v_placement(p) if self.placement is Placement.V else loop_placement(p, v)

    def check(self, p: int, m: int, v: int) -> None:
        """Refuse sizes this schedule cannot run, naming the field and the value to use."""
        check_sizes(p, m, v)
        if self.pipes > 1 and self.ranks is None and p % self.pipes:
            up = p + self.pipes - p % self.pipes
            raise ScheduleError(f"schedule {self.name!r} runs {self.pipes} pipelines in opposite directions over the "
                                f"ranks, so stages must be a multiple of {self.pipes}, got {p}; set stages: {up}",
                                field="pipeline.stages")
        if self.ranks is not None and p != self.ranks:
            raise ScheduleError(f"schedule {self.name!r} runs {self.ranks} ranks, got {p}; set stages: {self.ranks}",
                                field="pipeline.stages")
        if not self.chunks.allows(v):
            raise ScheduleError(f"schedule {self.name!r} runs {self.chunks.words()} per rank, got chunks={v}; "
                                f"set chunks: {self.chunks.default}", field="pipeline.chunks")
        if not self.allows_chunks(p, v):
            raise ScheduleError(f"schedule {self.name!r} needs at least {self.pipeline_chunks} chunks per rank with a "
                                f"pipeline (stages > 1), got chunks={v}; set chunks: {self.pipeline_chunks}, or stages: 1",
                                field="pipeline.chunks")
        use = self.microbatches.nearest(p, m, v)
        if use is not None:
            raise ScheduleError(f"schedule {self.name!r} needs micro-batches: {self.microbatches.text}, with "
                                f"p = {p} ranks; got {m}, use {use}", field="pipeline.microbatches")



@dataclass(frozen=True)
class ScheduleInfo(Capabilities):
    """A registered schedule (or a plan file): its capabilities and the builder of its orders."""

    build_order: Builder = field(kw_only=True)  #: the per-rank orders; call :meth:`build`, which checks the sizes first

    def build(self, p: int, m: int, v: int | None = None, *, remembered: bool = True) -> Plan:
        """The compute-only plan for p ranks, m micro-batches and v chunks (default: the schedule's).

        A registered schedule's orders depend on (p, m, v) alone, so the last few are remembered: a
        search builds the same plan for every recompute mode and ZeRO stage. Each call gets its own
        Plan (its own ``meta``) around the shared, immutable actions. ``remembered=False`` builds it
        anew (what a plan not seen before costs: benchmarks). Either way the plan is known to be
        valid by construction (:attr:`~ppsim.plan.plan.Plan.built_by_a_schedule`)."""
        v = self.chunks.default if v is None else v
        self.check(p, m, v)
        if self.ranks is not None:  # read from a file that may change
            return self.build_order(p, m, v)
        key = (self.name, p, m, v)
        plan = _BUILT.get(key) if remembered else None
        if plan is None:
            with gc_paused():  # tens of thousands of Actions, no cycles: no collection over them
                plan = self.build_order(p, m, v)
            if remembered:
                _BUILT[key] = plan
                if len(_BUILT) > _KEPT:
                    _BUILT.pop(next(iter(_BUILT)))
        # valid by construction: lowering need not check it again (until its actions or placement change)
        return replace(plan, built=(plan.actions, plan.stage_to_rank))


_KEPT = 16  #: compute-only plans remembered
_BUILT: dict[tuple[str, int, int, int], Plan] = {}


def check_sizes(num_ranks: int, num_microbatches: int, chunks: int) -> None:
    """Reject sizes no schedule accepts, naming the field to change."""
    if num_ranks < 1:
        raise ScheduleError(f"must be at least 1, got {num_ranks}", field="pipeline.stages")
    if num_microbatches < 1:
        raise ScheduleError(f"must be at least 1, got {num_microbatches}", field="pipeline.microbatches")
    if chunks < 1:
        raise ScheduleError(f"must be at least 1, got {chunks}", field="pipeline.chunks")


def make_plan(name: str, num_ranks: int, num_microbatches: int, chunks: int, orders: list[list[Action]],
              stage_to_rank: tuple[int, ...] | None = None, pipes: int = 1) -> Plan:
    return Plan(
        schedule=name,
        num_ranks=num_ranks,
        num_microbatches=num_microbatches,
        chunks=chunks,
        stage_to_rank=stage_to_rank or loop_placement(num_ranks, chunks),
        actions=tuple(tuple(o) for o in orders),
        pipes=pipes,
    )
