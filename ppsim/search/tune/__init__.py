"""``ppsim tune``: the plans of a scenario's model and batch on N devices, ranked by predicted throughput.

``run`` is one search (``search_plans``: what the command calls); ``space`` enumerates the
candidates, ``evaluate`` prices one (an exact memory check first, the simulation only for plans
that fit), ``prune`` skips those a bound shows cannot be reported, ``executors`` runs the
evaluations (serially, over local processes, or over a Ray cluster), ``rank`` orders them and says
why the best wins, ``report`` prints and draws them.
"""

from typing import Literal

#: where a search's plans are evaluated (here, light: the command line declares its option with it)
ExecutorName = Literal["local", "ray"]
