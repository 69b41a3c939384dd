"""One rank of the torch runtime: its virtual stages as PipelineStages in torch's schedule
runtime, fed the plan's actions, and the step's tail (clipping, optimizer steps) after it.

Timing: torch runs every action inside ``record_function("PP:<action>")``; during a step this
module points that name, in torch's schedules module, at the rank's ActionClock, so every
compute, send and gradient reduction is timed at the one point torch itself labels. torch posts a
receive in its RECV action — here one compute action ahead of the plan's place for it
(``translate.posted_early``), as torch's own lowering does, so the data moves while the rank
computes — and waits for it in the action that consumes the data; here that wait is timed as the
plan's receive, right before its consumer, so waiting shows as the receive it is and a compute
span is compute only.

The loss of a micro-batch is divided by the micro-batch count before its backward, and the
data-parallel replicas average their gradients, as DeepSpeed does: the weights after a step are
those of one process over the whole batch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import schedules as torch_schedules
from torch.utils.checkpoint import checkpoint

from ppexec.runtimes.base import BatchOf, RankContext
from ppexec.runtimes.experts import is_expert, make_expert_groups
from ppexec.runtimes.model import TORCH_DTYPES, Block, layer_factories, loss_fn, optimizer_state, stage_boundaries
from ppexec.runtimes.torch_pipelining.translate import tail, torch_actions, waits_before
from ppsim.api import Kind


class StageModule(nn.Module):
    """Layers ``first`` .. ``last`` of the whole network, named by their index in it (as the
    one-process reference names them); ``full``: every block recomputed in the backward."""

    def __init__(self, layers: dict[int, nn.Module], full_recompute: bool) -> None:
        super().__init__()
        for index, layer in layers.items():
            self.add_module(str(index), layer)
        self.full_recompute = full_recompute

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.children():
            if self.full_recompute and isinstance(layer, Block) and torch.is_grad_enabled():
                x = checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        return x


class TorchProgram:
    """This rank's stages, schedule runtime, optimizers and process groups."""

    def __init__(self, ctx: RankContext) -> None:
        from torch.distributed.pipelining import PipelineStage
        from torch.distributed.pipelining.schedules import _ComputationType, _PipelineScheduleRuntime

        spec = ctx.spec
        s, plan = spec.scenario, spec.plan
        p, d = plan.num_ranks, s.data_parallel
        self.clock = ctx.clock
        self.plan = plan
        self.microbatches = plan.num_microbatches
        self.max_norm = s.training.grad_clip
        # DeepSpeed's layout of a pipe x data topology: rank = pipeline rank x d + replica
        self.pipe_rank, self.replica = divmod(ctx.rank, d)
        self.tp_rank = 0
        # every rank makes every group; a group's waits time out as the run says (new_group's own
        # default is 30 minutes, whatever init_process_group was given)
        timeout = timedelta(seconds=spec.timeout_s)
        pipelines = [dist.new_group([q * d + r for q in range(p)], timeout=timeout) for r in range(d)]
        replicas = ([dist.new_group([q * d + r for r in range(d)], timeout=timeout) for q in range(p)] if d > 1
                    else [None] * p)
        self.pipeline_group, self.replica_group, self.replicas = pipelines[self.replica], replicas[self.pipe_rank], d
        self.experts = make_expert_groups(p, d, s.expert_parallel, ctx.rank, timeout)
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device(f"cuda:{local}") if spec.backend == "nccl" else torch.device("cpu")

        mine = plan.stages_of_rank(self.pipe_rank)
        self.first_here, self.last_here = 0 in mine, plan.num_stages - 1 in mine
        factories = layer_factories(spec.model, spec.seed, s.training.recompute, experts=self.experts)
        bounds = stage_boundaries(spec.partition)
        dtype = TORCH_DTYPES[spec.model.dtype]
        self.modules = {k: StageModule({i: factories[i][0](*factories[i][1]) for i in range(bounds[k], bounds[k + 1])},
                                       s.training.recompute == "full").to(device=device, dtype=dtype) for k in mine}
        self.device = device
        stages = [PipelineStage(self.modules[k], k, plan.num_stages, device, *_example_args(spec.model, s, k, plan.num_stages),
                                group=self.pipeline_group) for k in mine]
        # the micro-batch's loss over m: the grads are the mean over the step's micro-batches
        self.runtime = _PipelineScheduleRuntime(stages, plan.num_microbatches, loss_fn=self._loss, scale_grads=False)
        self.runtime._prepare_schedule_with_comms(torch_actions(plan), format="compute_comms")
        if d > 1:
            self.runtime.register_custom_function(_ComputationType.REDUCE_GRAD, self._reduce_grads)
        self.tail = tail(plan, self.pipe_rank)
        self.optimizers = {k: self._optimizer(self.modules[k], spec.lr, s.training.zero_stage) for k in mine}
        self._waits = waits_before(list(plan.actions[self.pipe_rank]))

    def _optimizer(self, module: nn.Module, lr: float, zero_stage: int) -> StageOptimizer:
        """AdamW over the stage's parameters; under ZeRO-1 each replica keeps the Adam state of its
        shard: of the dense parameters over every replica, of its experts' over the replicas that
        hold the same experts."""
        dense, experts = _split_experts(module)
        groups = [(dense, self.replica_group, self.replicas),
                  (experts, self.experts.replicas if self.experts else self.replica_group,
                   self.replicas // (self.experts.size if self.experts else 1))]
        parts: list[torch.optim.Optimizer] = []
        for params, group, holders in groups:
            if not params:
                continue
            if zero_stage >= 1 and holders > 1:
                from torch.distributed.optim import ZeroRedundancyOptimizer

                parts.append(ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, process_group=group,
                                                     lr=lr, weight_decay=0.0))
            else:
                parts.append(torch.optim.AdamW(params, lr=lr, weight_decay=0.0))
        return StageOptimizer(parts)

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return loss_fn(logits, labels) / self.microbatches

    # ----- one step ------------------------------------------------------------------------------
    def train_step(self, batch: BatchOf) -> float | None:
        for optimizer in self.optimizers.values():
            optimizer.zero_grad(set_to_none=True)
        parts = [batch(mb) for mb in range(self.microbatches)]
        args = (torch.cat([ids for ids, _ in parts]).to(self.device),) if self.first_here else ()
        losses: list[torch.Tensor] = []
        kwargs: dict[str, Any] = {}
        if self.last_here:
            kwargs = {"target": torch.cat([labels for _, labels in parts]).to(self.device), "losses": losses}
        with self._timed():
            self.runtime.step(*args, **kwargs)
        for a in self.tail:
            with self.clock.action(str(a)):
                if a.kind is Kind.CLIP:
                    self._clip()
                else:
                    self.optimizers[a.stage].step()
        if not self.last_here:
            return None
        loss = torch.stack([x.detach().float() for x in losses]).sum()
        if self.replicas > 1:  # the step's loss over every replica's micro-batches, as DeepSpeed reports it
            dist.all_reduce(loss, group=self.replica_group)
            loss /= self.replicas
        return float(loss)

    @contextmanager
    def _timed(self) -> Iterator[None]:
        """Torch's action labels, pointed at this rank's clock for the step."""
        labelled = torch_schedules.record_function
        clock, runtime, waits = self.clock, self.runtime, self._waits

        @contextmanager
        def timed(name: str) -> Iterator[None]:
            if not name.startswith("PP:"):
                with labelled(name):
                    yield
                return
            text = name[3:]
            if "RECV_" in text:  # a receive is posted here, ahead; its wait is timed before its consumer
                yield
                return
            for a in waits.get(text, ()):  # the plan's receives before this action: wait for each
                with clock.action(str(a)):
                    posted = runtime.fwd_recv_ops if a.kind is Kind.RECV_F else runtime.bwd_recv_ops
                    assert a.microbatch is not None  # a receive carries a micro-batch
                    key = (a.stage, a.microbatch)
                    for work in posted.get(key, ()):
                        work.wait()
                    if key in posted:  # nothing left for the consumer to wait for: a gloo receive
                        posted[key] = []  # waited for twice would wait for a second message
            with clock.action(text):
                yield

        # torch's schedules label each action with record_function: this rank's clock in its place
        torch_schedules.record_function = timed  # type: ignore[misc, assignment]  # patches a class with a function
        try:
            yield
        finally:
            torch_schedules.record_function = labelled  # type: ignore[misc]  # restores the class patched above

    def _reduce_grads(self, action: Any, ctx: Any) -> None:
        """REDUCE_GRAD: the stage's gradients averaged over the data-parallel replicas, in one buffer
        per group: the dense parameters' over every replica; a routed expert's gradient already sums
        the tokens of its whole expert-parallel group (the all-to-all's backward brought them), so
        it is summed over the replicas holding the same experts and divided by every replica."""
        dense, experts = _split_experts(self.modules[action.stage_index])
        expert_group = self.replica_group if self.experts is None else self.experts.replicas
        for params, group in ((dense, self.replica_group), (experts, expert_group)):
            if not params:
                continue
            # every holder reduces every parameter: one that got no gradient here (an expert no
            # token reached) adds zeros, and keeps none where no holder had one (as one process would)
            had = torch.tensor([float(q.grad is not None) for q in params])
            grads = [q.grad if q.grad is not None else torch.zeros_like(q) for q in params]
            flat = torch._utils._flatten_dense_tensors(grads + [had])
            if group is not None:
                dist.all_reduce(flat, group=group)
            reduced = torch._utils._unflatten_dense_tensors(flat, grads + [had])
            for q, value, anyone in zip(params, reduced[:-1], reduced[-1].tolist(), strict=True):
                q.grad = value.div_(self.replicas) if anyone else None

    def _clip(self) -> None:
        clip_over_pipeline(list(self.modules.values()), self.max_norm, self.pipeline_group, self.clock.mark,
                           experts=self.experts.group if self.experts else None)

    # ----- what the worker records -----------------------------------------------------------------
    def optimizer_state(self) -> dict[str, Any]:
        states = [optimizer_state(o) for stage in self.optimizers.values() for o in stage.parts]
        return {"class": states[0]["class"] if states else "none",
                "state_elements": sum(x["state_elements"] for x in states)}

    def saved_state(self) -> dict[str, Any]:
        state = {name: value.detach().cpu() for m in self.modules.values() for name, value in m.state_dict().items()}
        return {"stages": sorted(self.modules), "stage": self.pipe_rank, "tp": 0, "tp_size": 1, "state": state}


def clip_over_pipeline(modules: list[nn.Module], max_norm: float, group: Any, mark: Any = None,
                       experts: Any = None) -> None:
    """CLIP: the gradient norm over every stage of the pipeline (the squares all-reduced over the
    pipeline's ranks, a routed expert's first over the ``experts`` group that holds the layer's
    experts between them), and the gradients scaled to ``max_norm`` when above it, as torch's
    clip_grad_norm_ does in one process; ``mark("clip")`` is called once this rank's part is done."""
    device = next((q.device for m in modules for q in m.parameters()), torch.device("cpu"))

    def squares_of(params: list[torch.Tensor]) -> torch.Tensor:
        grads = [q.grad for q in params if q.grad is not None]
        return torch.stack([g.detach().float().pow(2).sum() for g in grads]).sum() if grads else \
            torch.zeros((), device=device)

    split = [_split_experts(m) for m in modules]
    routed_squares = squares_of([q for _, routed in split for q in routed])
    if experts is not None:
        dist.all_reduce(routed_squares, group=experts)
    squares = squares_of([q for dense, _ in split for q in dense]) + routed_squares
    grads = [q.grad for m in modules for q in m.parameters() if q.grad is not None]
    if mark is not None:
        mark("clip")  # the norm's all-reduce follows
    dist.all_reduce(squares, group=group)
    coefficient = torch.clamp(max_norm / (squares.sqrt() + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coefficient.to(g.dtype))


class StageOptimizer:
    """A stage's optimizers (the dense parameters' and, apart, the routed experts'), stepped as one."""

    def __init__(self, parts: list[torch.optim.Optimizer]) -> None:
        self.parts = parts

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.parts:
            o.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for o in self.parts:
            o.step()


def _split_experts(module: nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(dense, routed experts') parameters of ``module``."""
    dense: list[torch.Tensor] = []
    experts: list[torch.Tensor] = []
    for name, q in module.named_parameters():
        (experts if is_expert(name) else dense).append(q)
    return dense, experts


def _example_args(model: Any, s: Any, stage: int, stages: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input, output) of one micro-batch of ``stage``, as shapes on the meta device: given, torch's
    runtime does not infer them by running each stage on empty tensors, which it would otherwise
    do in a step of its own (one that runs the MoE layers' all-to-alls on some ranks only)."""
    b, seq, h = s.training.micro_batch, model.seq_len, model.hidden
    dtype = TORCH_DTYPES[model.dtype]
    meta = torch.device("meta")
    given = (torch.empty((b, seq), dtype=torch.int64, device=meta) if stage == 0
             else torch.empty((b, seq, h), dtype=dtype, device=meta, requires_grad=True))
    out = torch.empty((b, seq, model.vocab if stage == stages - 1 else h), dtype=dtype, device=meta, requires_grad=True)
    return given, out
