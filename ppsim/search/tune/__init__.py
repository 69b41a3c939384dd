"""``ppsim tune``: the plans of a scenario's model and batch on N devices, ranked by predicted throughput.

``space`` enumerates the candidates, ``evaluate`` prices one (an exact memory check first, the
simulation only for plans that fit), ``executors`` runs the evaluations (serially, over local
processes, or over a Ray cluster), ``rank`` orders them and says why the best wins, ``report``
prints and draws them.
"""
