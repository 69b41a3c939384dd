"""ppexec: run the plan ppsim predicts for real (DeepSpeed's PipelineEngine or torch.distributed.pipelining) and
record it as a measured ppsim Trace.

Its folders follow a run: ``launch`` (prepare run.json, start the ranks, watch them) -> ``worker``
(one rank: the step loop, its events, its clock, its heartbeat) -> ``runtimes`` (the frameworks that
run the plan, and the model) -> ``measure`` (microbenchmarks, statistics, the profile, the device)
-> ``results`` (the run collected into traces, compared with a prediction); ``cli`` on top. The
worker side (``worker``, ``runtimes``, ``measure.stats``, ``measure.microbench``) never imports the
launcher side, and ppexec uses ppsim only through ``ppsim.api`` and ``ppsim.errors``
(``tests/ppexec/test_layout_ppexec.py`` holds both).
"""
