"""Plan -> DeepSpeed PipeSchedule: the only schedule-aware code in ppexec.

Every action of a rank's lowered plan becomes one step of DeepSpeed instructions, with the
micro-batch as the buffer id (one buffer per micro-batch, so any order of forwards and backwards
is safe). What DeepSpeed's PipelineEngine cannot express is refused with a message that names the
schedules that run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ppsim.errors import PpsimError
from ppsim.plan import Action, Kind, Plan

#: schedules whose plans DeepSpeed's PipelineEngine can run
RUNNABLE = ("gpipe", "1f1b")


class TranslationError(PpsimError):
    """The plan needs something DeepSpeed's pipeline engine cannot do."""


def check_runnable(plan: Plan) -> None:
    """Raise TranslationError if DeepSpeed's engine cannot run ``plan``."""
    runnable = ", ".join(RUNNABLE)
    if plan.chunks != 1:
        raise TranslationError(
            f"schedule {plan.schedule!r} runs {plan.chunks} chunks (virtual stages) per rank, which DeepSpeed's "
            f"PipelineEngine cannot run; schedules that run: {runnable}",
            field="pipeline.schedule",
        )
    kinds = {a.kind for r in plan.actions for a in r}
    if kinds & {Kind.I, Kind.W}:
        raise TranslationError(
            f"schedule {plan.schedule!r} splits the backward into input grad and weight grad (I, W), which "
            f"DeepSpeed's PipelineEngine cannot run; schedules that run: {runnable}",
            field="pipeline.schedule",
        )
    if Kind.B not in kinds:
        raise TranslationError(
            f"schedule {plan.schedule!r} has no backward: ppexec trains, it does not run inference; "
            f"schedules that run: {runnable}",
            field="pipeline.schedule",
        )
    if not plan.lowered:
        raise TranslationError("ppexec needs a lowered plan (with sends, receives and the optimizer step)")


def clip_instruction() -> type:
    """A PipeInstruction for gradient clipping on its own (the engine clips there, not inside
    DeepSpeed's optimizer step), so its gradient-norm all-reduce is timed as its own action."""
    global _CLIP
    if _CLIP is None:
        from deepspeed.runtime.pipe.schedule import PipeInstruction

        class ClipGradients(PipeInstruction):
            """Clip the gradients to the configured norm (all-reducing the norm over the pipeline)."""

        _CLIP = ClipGradients
    return _CLIP


_CLIP: type | None = None


def instructions(a: Action, *, first: bool, last: bool, reduce_in_plan: bool, clip_in_plan: bool = False) -> list[Any]:
    """DeepSpeed instructions for one action of a stage (``first`` / ``last`` stage)."""
    from deepspeed.runtime.pipe import schedule as ds

    mb = a.microbatch
    k = a.kind
    if k is Kind.F:
        load = [ds.LoadMicroBatch(buffer_id=mb)] if first or last else []
        return load + [ds.ForwardPass(buffer_id=mb)]
    if k is Kind.B:
        return [ds.BackwardPass(buffer_id=mb)]
    if k is Kind.SEND_F:
        return [ds.SendActivation(buffer_id=mb)]
    if k is Kind.RECV_F:
        return [ds.RecvActivation(buffer_id=mb)]
    if k is Kind.SEND_B:
        return [ds.SendGrad(buffer_id=mb)]
    if k is Kind.RECV_B:
        return [ds.RecvGrad(buffer_id=mb)]
    # without data parallelism the plan has no REDUCE_GRAD; DeepSpeed still expects its reduce
    # calls before the step (they only mark the gradient-accumulation boundary then)
    reduce = [] if reduce_in_plan else [ds.ReduceTiedGrads(), ds.ReduceGrads()]
    if k is Kind.REDUCE_GRAD:
        return [ds.ReduceTiedGrads(), ds.ReduceGrads()]
    if k is Kind.CLIP:
        return reduce + [clip_instruction()()]
    if k is Kind.OPT:
        return ([] if clip_in_plan else reduce) + [ds.OptimizerStep()]
    raise TranslationError(f"action {a} has no DeepSpeed instruction")


def plan_schedule(plan: Plan, rank: int) -> Any:
    """The DeepSpeed PipeSchedule that runs ``plan``'s actions of pipeline rank ``rank``."""
    from deepspeed.runtime.pipe.schedule import PipeSchedule

    check_runnable(plan)
    p = plan.num_ranks
    actions = list(plan.actions[rank])
    reduce_in_plan = any(a.kind is Kind.REDUCE_GRAD for a in actions)
    clip_in_plan = any(a.kind is Kind.CLIP for a in actions)
    steps = [instructions(a, first=rank == 0, last=rank == p - 1, reduce_in_plan=reduce_in_plan,
                          clip_in_plan=clip_in_plan) for a in actions]

    class PlanSchedule(PipeSchedule):
        """One DeepSpeed step per plan action; ``actions[i]`` is what step i does."""

        def __init__(self) -> None:
            super().__init__(micro_batches=plan.num_microbatches, stages=p, stage_id=rank)
            self.actions = actions

        def steps(self) -> Iterator[list[Any]]:  # DeepSpeed's generator protocol
            yield from steps

        def num_pipe_buffers(self) -> int:
            return plan.num_microbatches

    return PlanSchedule()
