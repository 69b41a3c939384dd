"""What runs a plan: the Runtime seam (``base``), DeepSpeed's (``deepspeed_pipe``), torch's (``torch_pipelining``), the model.
It may import ``worker.clock`` and ``worker.run_spec`` (the clock actions are timed on, the run a rank reads), nothing else."""
