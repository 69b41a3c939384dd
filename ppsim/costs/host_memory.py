"""Host memory a whole plan needs when every rank runs as a process on one machine's CPUs, as a
local ``ppexec run`` does: the figure ppexec refuses a run by, and ``ppsim tune`` warns with."""

from __future__ import annotations

from ppsim.costs.layers import gpt_layers
from ppsim.inputs.scenario import ModelSpec

#: bytes a rank's process takes before its model: the interpreter, torch and the process group
PROCESS_BYTES = 400e6
#: fp32 weights, gradients and Adam's two moments, per parameter
FP32_ADAM_BYTES_PER_PARAM = 16


def host_run_bytes(model: ModelSpec, micro_batch: int, microbatches: int, processes: int) -> int:
    """A rough upper bound: the whole model's fp32 weights, gradients and Adam states, every
    micro-batch's activations (as the device memory model counts them, without recomputation) and
    :data:`PROCESS_BYTES` a process."""
    emb, block, head = gpt_layers(model, 1)
    params = emb.params + model.layers * block.params + head.params
    emb, block, head = gpt_layers(model, micro_batch)
    per_microbatch = emb.activation_bytes + model.layers * block.activation_bytes + head.activation_bytes
    return int(FP32_ADAM_BYTES_PER_PARAM * params + per_microbatch * microbatches + processes * PROCESS_BYTES)
