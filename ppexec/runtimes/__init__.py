"""What runs a plan: the Runtime seam (``base``), DeepSpeed's (``deepspeed_pipe``), torch's (``torch_pipelining``), the model.
It may import ``worker.clock`` and ``worker.run_spec`` (the clock actions are timed on, the run a rank reads), nothing else."""

from typing import Literal

#: what runs a plan's ranks: DeepSpeed's PipelineEngine or torch.distributed.pipelining
RuntimeName = Literal["deepspeed", "torch"]
#: what a run asks for: a runtime, or auto (DeepSpeed where it can run the plan, else torch)
RuntimeChoice = Literal["auto", "deepspeed", "torch"]
