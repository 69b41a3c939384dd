"""The one timing point of every runtime: the start and end of each plan action on
``time.perf_counter_ns`` (CLOCK_MONOTONIC: one clock for every process of a machine), and the
memory in use when it ends.

On a GPU the device is synchronised before each reading, else a span would measure only the
queueing of asynchronous kernels. Memory is the device allocator's bytes in use on a GPU and the
process's resident memory on a CPU (interpreter and libraries included).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ppexec.worker.events import Span
from ppsim.api import MemorySource


def resident_bytes() -> int:
    """This process's resident memory (Linux: /proc/self/statm; elsewhere its peak so far)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - not Linux
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class ActionClock:
    """Records one span per action and the memory after it; ``current`` is the action running
    (what a failure names)."""

    def __init__(self, synchronize: Callable[[], None] | None = None,
                 memory_now: Callable[[], int] = resident_bytes, memory_source: MemorySource = "rss") -> None:
        self.synchronize = synchronize
        self.memory_now = memory_now
        self.memory_source = memory_source
        self.spans: list[Span] = []
        self.marks: list[tuple[str, int]] = []
        self.memory: list[tuple[int, int]] = []
        self.current: str | None = None

    @classmethod
    def for_device(cls, device: str) -> ActionClock:
        """The clock of a rank on ``device`` ("cpu", or a CUDA / other accelerator type)."""
        if device == "cpu":
            return cls()
        import torch

        accel = getattr(torch, device)
        return cls(accel.synchronize, accel.memory_allocated, "allocator")

    def reset(self) -> None:
        """Start a new step."""
        self.spans, self.marks, self.memory = [], [], []

    def mark(self, name: str) -> None:
        """A named moment inside the running action (the profile uses them)."""
        self.marks.append((name, time.perf_counter_ns()))

    @contextmanager
    def action(self, text: str) -> Iterator[None]:
        """Time the action ``text`` (its text form: ``2F0``, ``1SEND_B3``, ``0OPT``)."""
        self.current = text
        sync = self.synchronize
        if sync is not None:
            sync()
        start = time.perf_counter_ns()
        yield
        if sync is not None:
            sync()
        end = time.perf_counter_ns()
        self.spans.append((text, start, end))
        self.memory.append((end, self.memory_now()))
        self.current = None
