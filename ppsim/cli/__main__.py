"""``python -m ppsim.cli``: the ``ppsim`` command."""

from ppsim.cli import main

main()
