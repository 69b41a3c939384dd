"""The ``ppsim`` command line: ``commands`` holds the commands, ``common`` what they share with ``ppexec``'s."""

import gc

from ppsim.cli.commands import app
from ppsim.gc_pause import allow_gc_pauses


def main() -> None:
    allow_gc_pauses()  # the command's own process: ppsim may pause the collector around its passes
    try:
        app()
    finally:
        # on its way out the interpreter would walk, collection after collection, every object the
        # command leaves behind (a prediction's plans and caches); frozen, they are left to the
        # process's end (nothing is skipped: exit handlers run and files are flushed as before)
        gc.freeze()


__all__ = ["app", "main"]
