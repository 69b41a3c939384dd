"""The search of per-rank orders of one stage per rank on given costs and activation budgets: the
timeline of an order, the greedy families that build orders (a list scheduler under priority
rules, the zero-bubble authors' wavefront), a local search that improves them, an exact search for
small plans, a bound none can beat, and the candidates ``auto`` picks from (:mod:`ppsim.prediction.auto` simulates them)."""
