"""Many predictions of one scenario: variants side by side (``sweep``: schedules, stages x
micro-batches) and the search of every plan for N devices (``tune``).

Sits on top: drives :mod:`ppsim.prediction`, and may use everything below it.
"""
