"""The torch runtime: the plan runs in torch.distributed.pipelining's schedule runtime, one
PipelineStage per virtual stage of the rank, its actions given one for one (``translate``), every
action timed where torch labels it (``program``).

It runs any placement (several stages per rank, loop or V) and split backwards (I, W), with data
parallelism, activation recomputation and ZeRO-1 (torch's ZeroRedundancyOptimizer); its sends are
posted and waited for at the end of the step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ppexec.runtimes import RuntimeName
from ppsim.api import BACKWARD_KINDS, Kind, Plan, Scenario

if TYPE_CHECKING:  # pragma: no cover
    from ppexec.runtimes.base import RankContext
    from ppexec.runtimes.torch_pipelining.program import TorchProgram


class TorchRuntime:
    name: RuntimeName = "torch"
    comm = "async"  # isend / irecv: a send is posted and the rank goes on

    def refuses(self, plan: Plan, s: Scenario) -> str | None:
        if s.tensor_parallel > 1:
            return ("tensor parallelism runs in the DeepSpeed runtime only (ppexec splits its blocks over "
                    "DeepSpeed's pipe x data x model topology)")
        if s.training.zero_stage >= 1 and s.training.zero_reduce == "reduce_scatter":
            return ("ZeRO-1 with reduce-scattered gradients runs in the DeepSpeed runtime only (torch's "
                    "ZeroRedundancyOptimizer takes whole gradients): use zero_reduce: allreduce")
        if s.model is not None and s.model.dtype == "fp16":
            return "fp16 needs loss scaling, which the torch runtime does not do: use bf16 or fp32"
        if s.pipeline.input_grad_frees and any(a.kind is Kind.W for r in plan.actions for a in r):
            return ("torch's split backward keeps the autograd graph to its weight grad, not a weight-gradient "
                    "store: use pipeline.split_backward: autograd")
        if not any(a.kind in BACKWARD_KINDS for r in plan.actions for a in r):
            return f"{plan.schedule!r} has no backward: ppexec trains, it does not run inference"
        return None

    def start(self, ctx: RankContext) -> TorchProgram:
        from datetime import timedelta

        import torch.distributed as dist

        from ppexec.runtimes.torch_pipelining.program import TorchProgram

        dist.init_process_group(ctx.spec.backend, timeout=timedelta(seconds=ctx.spec.timeout_s))
        return TorchProgram(ctx)
