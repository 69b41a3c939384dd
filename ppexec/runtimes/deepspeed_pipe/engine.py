"""DeepSpeed's PipelineEngine, running a translated ppsim Plan and timing it at one dispatch point.

What the subclass changes:
- the schedule it runs is the plan's (``_train_schedule``);
- ``_exec_schedule`` runs each plan action (the group of DeepSpeed instructions it became) inside
  the rank's :class:`~ppexec.worker.clock.ActionClock`, the one timing point of every runtime;
- gradient clipping runs as the plan's own CLIP action (an instruction of ppexec's), so its
  gradient-norm all-reduce is timed apart from the optimizer step, and is not done twice;
- the last stage keeps one loss per micro-batch (the stock engine keeps one, which breaks any
  schedule that runs two forwards before a backward), and micro-batches are loaded by id.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ppexec.runtimes.base import BatchOf
from ppexec.runtimes.deepspeed_pipe.translate import clip_instruction
from ppexec.worker.clock import ActionClock
from ppsim.api import Kind


def engine_class() -> type:
    """The engine class (built on first use, so importing ppexec does not import deepspeed)."""
    global _ENGINE
    if _ENGINE is None:
        _ENGINE = _make_engine_class()
    return _ENGINE


_ENGINE: type | None = None


def _make_engine_class() -> type:
    from deepspeed.runtime.pipe.engine import PipelineEngine

    class TimedPipelineEngine(PipelineEngine):
        """PipelineEngine that runs a ppsim plan and records one span per plan action."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.ppexec_schedule: Any = None
            self.ppexec_batch: BatchOf | None = None
            self.ppexec_clock: ActionClock | None = None
            self._ppexec_losses: dict[int, Any] = {}
            self._ppexec_loading: int | None = None
            self._ppexec_clipping = False
            self._ppexec_plan_clips = False

        def _train_schedule(self) -> Any:
            if self.ppexec_schedule is None:
                raise RuntimeError("set engine.ppexec_schedule before train_batch()")
            self._ppexec_plan_clips = any(a.kind is Kind.CLIP for a in self.ppexec_schedule.actions)
            return self.ppexec_schedule

        def _exec_schedule(self, pipe_schedule: Any) -> None:
            clock = self.ppexec_clock
            if clock is None:
                raise RuntimeError("set engine.ppexec_clock before train_batch()")
            self._reserve_pipe_buffers(pipe_schedule.num_pipe_buffers())
            self.fwd_outputs: list[Any] = []  # PipelineEngine's: the losses (a tensor, or a list of them) per micro-batch
            # the stock map holds PipelineEngine's functions; bind by name so overrides here count
            table = {kind: getattr(self, fn.__name__) for kind, fn in self._INSTRUCTION_MAP.items()}
            table[clip_instruction()] = self._ppexec_clip
            for action, cmds in zip(pipe_schedule.actions, pipe_schedule.steps()):
                with clock.action(str(action)):
                    for cmd in cmds:
                        table[type(cmd)](**cmd.kwargs)

        def _ppexec_clip(self) -> None:
            """Gradient clipping as the plan's CLIP action (fp32; with fp16 / bf16 DeepSpeed's
            optimizer wrapper clips inside its step, and this only marks the place)."""
            if self.ppexec_clock is not None:
                self.ppexec_clock.mark("clip")  # its own work before: reducing the grads
            self._ppexec_clipping = True
            try:
                if self.gradient_clipping() > 0.0 and not (self.fp16_enabled() or self.bfloat16_enabled()
                                                           or self.zero_optimization()):
                    self.clip_fp32_gradients()
            finally:
                self._ppexec_clipping = False

        def clip_fp32_gradients(self) -> None:
            # clipped by the CLIP action already when the plan has one
            if self._ppexec_clipping or not self._ppexec_plan_clips:
                super().clip_fp32_gradients()

        def _exec_forward_pass(self, buffer_id: int) -> None:
            super()._exec_forward_pass(buffer_id)
            if self.is_last_stage():
                self._ppexec_losses[buffer_id] = self.loss

        def _exec_backward_pass(self, buffer_id: int) -> None:
            if self.is_last_stage():
                self.loss = self._ppexec_losses.pop(buffer_id)
            super()._exec_backward_pass(buffer_id)

        def _exec_load_micro_batch(self, buffer_id: int) -> None:
            self._ppexec_loading = buffer_id
            super()._exec_load_micro_batch(buffer_id)

        def _next_batch(self) -> Any:
            if self.ppexec_batch is None or self._ppexec_loading is None:
                raise RuntimeError("set engine.ppexec_batch before train_batch()")
            return self.ppexec_batch(self._ppexec_loading)

    return TimedPipelineEngine


@contextmanager
def pipeline_engine(cls: type) -> Iterator[None]:
    """Make ``deepspeed.initialize`` build ``cls`` for a PipelineModule (it looks the engine class
    up by its module-level name when called)."""
    import deepspeed

    saved = deepspeed.PipelineEngine
    deepspeed.PipelineEngine = cls
    try:
        yield
    finally:
        deepspeed.PipelineEngine = saved
