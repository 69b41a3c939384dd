"""Plan -> DeepSpeed PipeSchedule.

Every action of a rank's lowered plan becomes one step of DeepSpeed instructions, with the
micro-batch as the buffer id (one buffer per micro-batch, so any order of forwards and backwards
is safe). What DeepSpeed's PipelineEngine cannot express (several stages per rank, a backward
split into input and weight grads, forward-only plans) is refused, saying what it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ppsim.api import Action, Kind, Plan
from ppsim.errors import PpsimError


class TranslationError(PpsimError):
    """The plan needs something DeepSpeed's pipeline engine cannot do."""


def refusal(plan: Plan) -> str | None:
    """Why DeepSpeed's PipelineEngine cannot run ``plan`` (None if it can): it runs one stage per
    rank, full backwards, and trains."""
    if plan.chunks != 1 or len(set(plan.stage_to_rank)) != plan.num_stages:
        return (f"{plan.schedule!r} puts {plan.chunks} stages on each rank; DeepSpeed's PipelineEngine runs one "
                "stage per rank")
    kinds = {a.kind for r in plan.actions for a in r}
    if kinds & {Kind.I, Kind.W}:
        return (f"{plan.schedule!r} splits the backward into input grad and weight grad (I, W); DeepSpeed's "
                "PipelineEngine runs whole backwards")
    if Kind.OVERLAP_F_B in kinds:
        return (f"{plan.schedule!r} overlaps a forward and a backward of two micro-batches as one action; DeepSpeed's "
                "PipelineEngine runs one pass at a time")
    if Kind.B not in kinds:
        return f"{plan.schedule!r} has no backward: ppexec trains, it does not run inference"
    return None


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

    why = refusal(plan)
    if why or not plan.lowered:
        raise TranslationError(why or "ppexec needs a lowered plan (with sends, receives and the optimizer step)",
                               field="pipeline.schedule")
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
