"""``ppsim tui``: the timeline in a terminal (Textual), with the plan changed by keys.

The logic (``state``: what is shown and how keys change the plan; ``timeline``: a trace drawn as
character cells) is plain Python and tested on its own; ``app`` is the Textual layer over it.
Textual is imported by ``app`` only.
"""
