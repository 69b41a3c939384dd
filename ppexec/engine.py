"""DeepSpeed's PipelineEngine, running a translated ppsim Plan and timing it at one dispatch point.

What the subclass changes:
- the schedule it runs is the plan's (``_train_schedule``);
- ``_exec_schedule`` records the start and end of every plan action (the group of DeepSpeed
  instructions it became) on ``time.perf_counter_ns`` (CLOCK_MONOTONIC: one clock for every
  process of a machine), synchronising the device first on GPUs — the only timing code — and
  the memory in use after it (the device allocator's bytes on GPUs, the process's resident
  memory on CPUs);
- gradient clipping runs as the plan's own CLIP action (an instruction of ppexec's), so its
  gradient-norm all-reduce is timed apart from the optimizer step, and is not done twice;
- the last stage keeps one loss per micro-batch (the stock engine keeps one, which breaks any
  schedule that runs two forwards before a backward), and micro-batches are loaded by id.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ppexec.translate import clip_instruction
from ppsim.plan import Action, Kind

Batch = tuple[Any, Any]


def engine_class() -> type:
    """The engine class (built on first use, so importing ppexec does not import deepspeed)."""
    global _ENGINE
    if _ENGINE is None:
        _ENGINE = _make_engine_class()
    return _ENGINE


_ENGINE: type | None = None


def resident_bytes() -> int:
    """This process's resident memory (Linux: /proc/self/statm; elsewhere its peak so far)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - not Linux
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _make_engine_class() -> type:
    from deepspeed.runtime.pipe.engine import PipelineEngine

    class TimedPipelineEngine(PipelineEngine):
        """PipelineEngine that runs a ppsim plan and records one span per plan action."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.ppexec_schedule: Any = None
            self.ppexec_batch: Callable[[int], Batch] | None = None
            self.ppexec_spans: list[tuple[Action, int, int]] = []
            self.ppexec_marks: list[tuple[str, int]] = []  #: named moments inside actions (ns)
            self.ppexec_memory: list[tuple[int, int]] = []  #: (ns, bytes) at the end of every action
            self.ppexec_current: Action | None = None
            self._ppexec_losses: dict[int, Any] = {}
            self._ppexec_loading: int | None = None
            self._ppexec_clipping = False
            self._ppexec_plan_clips = False
            from deepspeed.accelerator import get_accelerator

            accel = get_accelerator()
            on_cpu = accel.device_name() == "cpu"
            self._ppexec_sync = None if on_cpu else accel.synchronize
            self.ppexec_memory_source = "rss" if on_cpu else "allocator"
            self._ppexec_memory_now = resident_bytes if on_cpu else accel.memory_allocated

        def _train_schedule(self) -> Any:
            if self.ppexec_schedule is None:
                raise RuntimeError("set engine.ppexec_schedule before train_batch()")
            self._ppexec_plan_clips = any(a.kind is Kind.CLIP for a in self.ppexec_schedule.actions)
            return self.ppexec_schedule

        def _exec_schedule(self, pipe_schedule: Any) -> None:
            self._reserve_pipe_buffers(pipe_schedule.num_pipe_buffers())
            self.fwd_outputs = []
            record = self.ppexec_spans.append
            record_memory = self.ppexec_memory.append
            memory_now = self._ppexec_memory_now
            # the stock map holds PipelineEngine's functions; bind by name so overrides here count
            table = {kind: getattr(self, fn.__name__) for kind, fn in self._INSTRUCTION_MAP.items()}
            table[clip_instruction()] = self._ppexec_clip
            clock = time.perf_counter_ns
            # on a GPU, work is queued asynchronously: wait for it, or a span measures only the queueing
            sync = self._ppexec_sync
            for action, cmds in zip(pipe_schedule.actions, pipe_schedule.steps()):
                self.ppexec_current = action
                start = clock()
                for cmd in cmds:
                    table[type(cmd)](**cmd.kwargs)
                if sync is not None:
                    sync()
                end = clock()
                record((action, start, end))
                record_memory((end, memory_now()))
            self.ppexec_current = None

        def _ppexec_clip(self) -> None:
            """Gradient clipping as the plan's CLIP action (fp32; with fp16 / bf16 DeepSpeed's
            optimizer wrapper clips inside its step, and this only marks the place)."""
            self.ppexec_marks.append(("clip", time.perf_counter_ns()))  # own work before: reducing grads
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

        def _next_batch(self) -> Batch:
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
