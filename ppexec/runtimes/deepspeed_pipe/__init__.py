"""The DeepSpeed runtime: the plan runs in DeepSpeed's PipelineEngine, each action translated to
DeepSpeed's instructions (``translate``) and dispatched and timed by one engine subclass (``engine``).

It runs one stage per rank with whole backwards, with data parallelism, activation recomputation,
ZeRO-1 and Megatron-style tensor parallelism; its point-to-point sends block until received.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ppexec.runtimes import RuntimeName
from ppexec.runtimes.base import BatchOf, RankContext
from ppsim.api import Plan, Scenario


class DeepSpeedRuntime:
    name: RuntimeName = "deepspeed"
    comm = "rendezvous"  # DeepSpeed's p2p send blocks until the peer receives

    def refuses(self, plan: Plan, s: Scenario) -> str | None:
        from ppexec.runtimes.deepspeed_pipe.translate import refusal

        if s.model is not None and s.model.moe is not None:
            return "ppexec's mixture of experts and its all-to-all run in the torch runtime"
        return refusal(plan)

    def start(self, ctx: RankContext) -> DeepSpeedProgram:
        return DeepSpeedProgram(ctx)


class DeepSpeedProgram:
    """One rank: a PipelineModule cut where ppsim's partition says, in ppexec's timed engine."""

    def __init__(self, ctx: RankContext) -> None:
        import deepspeed
        import deepspeed.ops
        import torch
        from deepspeed.pipe import LayerSpec, PipelineModule
        from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

        from ppexec.runtimes.deepspeed_pipe.engine import engine_class, pipeline_engine
        from ppexec.runtimes.deepspeed_pipe.translate import plan_schedule
        from ppexec.runtimes.model import TORCH_DTYPES, layer_factories, loss_fn, stage_boundaries
        from ppexec.runtimes.tensor_parallel import is_sharded, make_groups

        spec = ctx.spec
        scenario, plan = spec.scenario, spec.plan
        model = spec.model
        p, d, t = plan.num_ranks, scenario.data_parallel, scenario.tensor_parallel
        # the shared-memory all-reduce op would be JIT-compiled on first use (about 35 s): not needed
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
        deepspeed.init_distributed(dist_backend=spec.backend, timeout=timedelta(seconds=spec.timeout_s), verbose=False)
        parts = stage_boundaries(spec.partition)

        class PlannedPipelineModule(PipelineModule):
            """A PipelineModule cut exactly where ppsim's partition says."""

            def _partition_layers(self, method: str = "uniform") -> None:
                self.parts = parts
                stage_id = self._topo.get_coord(self.global_rank).pipe
                self._set_bounds(start=parts[stage_id], stop=parts[stage_id + 1])

        recompute = scenario.training.recompute
        tp = make_groups(ctx.world, t, ctx.rank, timedelta(seconds=spec.timeout_s))  # consecutive: DeepSpeed's model axis
        specs = [LayerSpec(cls, *args) for cls, args in layer_factories(model, spec.seed, recompute, tp)]
        # full recomputation is DeepSpeed's activation checkpointing of every block (the embedding and
        # the head keep their activations, as in Megatron); selective is done inside the blocks
        checkpointing = {"activation_checkpoint_interval": 1, "checkpointable_layers": ["Block"]} \
            if recompute == "full" else {}
        module = PlannedPipelineModule(layers=specs, loss_fn=loss_fn, partition_method="uniform",
                                       topology=PipeModelDataParallelTopology(num_pp=p, num_mp=t, num_dp=d),
                                       **checkpointing)
        # DeepSpeed's gradient clipping counts a parameter not marked model-parallel only on the first
        # rank of the pipeline (it takes the other stages for replicas, as Megatron's tensor-parallel
        # copies are): the norm would leave out every later stage. Each stage's parameters are its own.
        # With tensor parallelism a replicated parameter (a norm, a bias after the all-reduce, the
        # embedding, the head) counts on the group's first rank only, a sliced one on every rank.
        for name, param in module.named_parameters():
            param.model_parallel = tp is None or tp.rank == 0 or is_sharded(name.split(".", 1)[-1])
        dtype = TORCH_DTYPES[model.dtype]
        config: dict[str, Any] = {
            "train_micro_batch_size_per_gpu": scenario.training.micro_batch,
            "gradient_accumulation_steps": plan.num_microbatches,
            "train_batch_size": scenario.training.micro_batch * plan.num_microbatches * d,
            "steps_per_print": 10**9,
            "gradient_clipping": scenario.training.grad_clip,
            "wall_clock_breakdown": False,
            "bf16": {"enabled": dtype is torch.bfloat16},
            "fp16": {"enabled": dtype is torch.float16},
            # with tensor parallelism DeepSpeed sends each rank's 1/t of a stage-to-stage activation
            # (gradient) and all-gathers it at the receiver, as ppsim's pipeline.scatter_gather says
            "pipeline": {"pipe_partitioned": scenario.pipeline.scatter_gather,
                         "grad_partitioned": scenario.pipeline.scatter_gather},
        }
        if scenario.training.zero_stage:
            # ZeRO-1: each data-parallel rank keeps the optimizer state of its shard of the stage's
            # parameters; DeepSpeed wraps the (client) AdamW for it
            config["zero_optimization"] = {
                "stage": scenario.training.zero_stage,
                # reduce_scatter: each bucket is reduced to the replica owning each part, not all-reduced
                "use_multi_rank_bucket_allreduce": scenario.training.zero_reduce == "allreduce"}
            config["zero_allow_untested_optimizer"] = True
        optimizer = torch.optim.AdamW(module.parameters(), lr=spec.lr, weight_decay=0.0)
        with pipeline_engine(engine_class()):
            engine, _, _, _ = deepspeed.initialize(model=module, optimizer=optimizer, config=config)
        engine.ppexec_clock = ctx.clock
        engine.ppexec_schedule = plan_schedule(plan, engine.stage_id)
        self.engine = engine
        self.parts = parts
        self.pipe_rank = engine.stage_id
        self.replica = engine.grid.data_parallel_id
        self.tp_rank = tp.rank if tp else 0
        self.tp_size = t

    def train_step(self, batch: BatchOf) -> float | None:
        self.engine.ppexec_batch = batch
        loss = self.engine.train_batch()
        return float(loss) if self.engine.is_last_stage() else None

    def optimizer_state(self) -> dict[str, Any]:
        from ppexec.runtimes.model import optimizer_state

        return optimizer_state(self.engine.optimizer)

    def saved_state(self) -> dict[str, Any]:
        state = {k: v.detach().cpu() for k, v in self.engine.module.state_dict().items()}
        return {"parts": self.parts, "stage": self.pipe_rank, "tp": self.tp_rank, "tp_size": self.tp_size,
                "state": state}
