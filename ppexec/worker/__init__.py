"""One rank of a run (``python -m ppexec.worker RUN_DIR``): the step loop, run.json, its events, clock and heartbeat.
It may import ``runtimes``, ``measure.stats`` and ``measure.microbench``, never the launcher side (launch, results, cli)."""
