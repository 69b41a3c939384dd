"""``ppexec rank``: one rank of a real plan run alone on one device, at full size, its actions in
plan order with receives fed and sends dropped, timed and its memory measured by the allocator;
compared with ppsim's prediction of the same rank. It may import ``runtimes`` (the model a run
builds) and ``launch`` (the checks of what ppexec builds), not ``cli``."""
