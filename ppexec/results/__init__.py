"""What a run gives: its events as measured Traces, the run folder's outputs, the check against a prediction, the reference.
The end of the flow: it may import ``launch``, ``worker``, ``runtimes`` and ``measure``, not ``cli``."""
