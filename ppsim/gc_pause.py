"""Pausing the cyclic garbage collector around allocation-heavy passes (building large plans,
lowering, simulation): only in a process that allowed it, such as the ``ppsim`` command and its
own worker processes. A library call in someone else's process (a notebook, a Ray worker, a
training script) leaves that process's collector alone."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_allowed = False


def allow_gc_pauses(allowed: bool = True) -> None:
    """Let ppsim pause this process's cyclic garbage collector around its allocation-heavy passes
    (see :func:`gc_paused`); what the ``ppsim`` command does. The pause is process-wide: allow it
    only where nothing else runs meanwhile (no other threads allocating)."""
    global _allowed
    _allowed = allowed


def gc_pauses_allowed() -> bool:
    return _allowed


@contextmanager
def gc_paused() -> Iterator[None]:
    """Where allowed (:func:`allow_gc_pauses`), pause the cyclic garbage collector: a run allocates
    hundreds of thousands of small tuples that form no cycles, and repeated full collections over
    them would cost several times the run. On the way out the survivors go straight to the oldest
    generation (freeze, then unfreeze), else the first young collection afterwards would walk them
    all at once. Elsewhere, nothing changes."""
    if not _allowed or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        gc.enable()
