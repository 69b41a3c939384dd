"""Pausing the cyclic garbage collector around allocation-heavy passes (lowering, simulation)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: a run allocates hundreds of thousands of small tuples
    that form no cycles, and repeated full collections over them would triple the run time.
    On the way out the survivors go straight to the oldest generation (freeze, then unfreeze),
    else the first young collection afterwards would walk them all at once."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.freeze()
            gc.unfreeze()
            gc.enable()
