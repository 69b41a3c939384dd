"""Stage costs from the model's FLOPs on the device's roofline (no measurement).

Time = FLOPs / (peak x efficiency), plus the elementwise work's HBM bytes over the device's HBM
bandwidth (:mod:`ppsim.costs.elementwise`: norms, activations, softmax, dropout, residuals, the
loss). Optimizer step: 32 bytes of memory traffic per parameter at
HBM bandwidth (mixed-precision Adam). Gradient clipping: one read of every gradient for the norm,
which is then all-reduced over the pipeline's stages (2(p-1) x link latency) before the update.
Tied embeddings: the first and the last stage all-reduce their copies' gradient before the step,
added to their optimizer step. Gradient all-reduce over the d replicas in buckets
(:func:`~ppsim.costs.collectives.grad_allreduce`);
with ZeRO-1 the optimizer steps over 1/d of the parameters and they are all-gathered after it.
Tensor parallelism adds its collectives to each block's passes and an all-gather to each received
stage-to-stage message (:mod:`~ppsim.costs.tensor_parallel`).
"""

from __future__ import annotations

from dataclasses import replace

from ppsim.costs.collectives import grad_allreduce, ring_allreduce_ms, traffic
from ppsim.costs.layout import Layout
from ppsim.costs.links import Links
from ppsim.costs.table import CostTable, Link
from ppsim.costs.tensor_parallel import gathering, tensor_parallel_comm
from ppsim.costs.zero import shard_optimizer
from ppsim.inputs.hardware import Device
from ppsim.inputs.scenario import ModelSpec, Scenario

OPTIMIZER_BYTES_PER_PARAM = 32


def analytic_costs(s: Scenario, model: ModelSpec, layout: Layout, device: Device, links: Links) -> CostTable:
    """Per virtual stage costs of ``layout`` on ``device``, its links as ``links`` say."""
    training, d, t = s.training, s.data_parallel, s.tensor_parallel
    efficiency = s.hardware.efficiency or device.efficiency
    flops_per_ms = device.peak_flops(model.dtype) * efficiency / 1e3
    hbm_bytes_per_ms = device.hbm_gb_s * 1e9 / 1e3
    tp = tensor_parallel_comm(layout.activation_bytes, t, links.tensor_parallel,
                              sequence_parallel=training.sequence_parallel, full_recompute=training.recompute == "full",
                              scatter_gather=s.pipeline.scatter_gather)
    stages = []
    for k, st in enumerate(layout.stages):
        reduce_ms, buckets = grad_allreduce(st.params * layout.dtype_bytes, d, links.data_parallel,
                                            training.allreduce, training.bucket_mb * 1e6)
        stages.append(layout.stage_cost(
            k,
            forward_ms=st.forward_flops / flops_per_ms + st.forward_bytes / hbm_bytes_per_ms + st.blocks * tp.forward_ms,
            backward_ms=((st.input_grad_flops + st.weight_grad_flops) / flops_per_ms + st.backward_bytes / hbm_bytes_per_ms
                         + st.blocks * tp.backward_ms),
            weight_grad_ms=st.weight_grad_flops / flops_per_ms,
            optimizer_ms=st.params * OPTIMIZER_BYTES_PER_PARAM / hbm_bytes_per_ms,
            clip_ms=st.params * layout.dtype_bytes / hbm_bytes_per_ms,
            allreduce_ms=reduce_ms,
            allreduce_buckets=buckets,
            forward_comm_ms=st.blocks * tp.forward_ms,
            backward_comm_ms=st.blocks * tp.backward_ms,
        ))
    if training.zero_stage >= 1:
        stages = [shard_optimizer(c, d, links.data_parallel, links.data_parallel, training.zero_reduce)
                  for c in stages]
    tied_ms = tied_embedding_allreduce_ms(s, layout, links.embedding)
    if tied_ms > 0:
        stages[0] = replace(stages[0], optimizer_ms=stages[0].optimizer_ms + tied_ms)
        stages[-1] = replace(stages[-1], optimizer_ms=stages[-1].optimizer_ms + tied_ms)
    boundaries = gathering(links.boundaries, tp)
    fabric = None
    if links.fabric is not None:
        kind = ("reduce_scatter" if training.zero_stage >= 1 and training.zero_reduce == "reduce_scatter"
                else "tree" if training.allreduce == "tree" else "ring")
        fabric = links.fabric.fabric(tuple(
            (*traffic(kind, c.grad_bytes / c.allreduce_buckets, d), c.allreduce_buckets) if d > 1 and c.grad_bytes else None
            for c in stages))
    return CostTable(stages=tuple(stages), message_bytes=layout.message_bytes, links=boundaries,
                     clip_allreduce_ms=2 * (s.pipeline.stages - 1) * max(x.latency_ms for x in boundaries),
                     overlap_grad_reduce=training.overlap_grad_reduce, fabric=fabric)


def tied_embedding_allreduce_ms(s: Scenario, layout: Layout, link: Link | None) -> float:
    """The all-reduce of the tied embedding's gradient between the first and the last stage's
    copies (Megatron-LM runs it after the backward, right before the optimizer step), over the
    link between their ranks; nothing when the model does not tie them or one rank holds both."""
    model = s.model
    if model is None or not model.tie_embeddings or link is None:
        return 0.0
    return ring_allreduce_ms(model.vocab * model.hidden // s.tensor_parallel * layout.dtype_bytes, 2, link)
