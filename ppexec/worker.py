"""One rank of a ppexec run: ``python -m ppexec.worker RUN_DIR``.

Any launcher can start it (ppexec's local launcher, ``deepspeed``, ``torchrun``, Slurm's ``srun``):
it reads RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT from the environment and the
run description from ``RUN_DIR/run.json``, and writes JSON lines to ``RUN_DIR/ranks/rank-R.jsonl``:
``ready`` (stage, replica, host, clock reference), one ``step`` per recorded step (loss and one
span per plan action, in ns on CLOCK_MONOTONIC), and ``error`` (with the action it was in) if it
fails. The files are flushed line by line, so whatever was recorded survives a crash.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any


class EventLog:
    """Append-only JSON lines, flushed per line."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = path.open("a", encoding="utf-8")

    def write(self, kind: str, **fields: Any) -> None:
        self._fh.write(json.dumps({"type": kind, **fields}) + "\n")
        self._fh.flush()


def _env_int(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise RuntimeError(f"environment variable {name} is not set: start the worker with a launcher")
        return default
    return int(value)


def run(run_dir: Path) -> int:
    spec = json.loads((run_dir / "run.json").read_text())
    rank = _env_int("RANK")
    world = _env_int("WORLD_SIZE")
    log = EventLog(run_dir / "ranks" / f"rank-{rank}.jsonl")
    try:
        return _train(spec, rank, world, run_dir, log)
    except BaseException as exc:  # report every failure, then exit non-zero
        current = getattr(ENGINE, "ppexec_current", None)
        current = str(current) if current is not None else None
        log.write("error", rank=rank, action=current, error=f"{type(exc).__name__}: {exc}",
                  traceback=traceback.format_exc(limit=8))
        return 1


ENGINE: Any = None  #: this process's engine, so a failure can name the action it was in


def optimizer_state(optimizer: Any) -> dict[str, Any]:
    """What the rank's optimizer holds: its class and the elements of its state tensors (Adam's
    two moments), which ZeRO-1 divides among the data-parallel ranks."""
    import torch

    inner = getattr(optimizer, "optimizer", optimizer)  # DeepSpeed's wrappers keep the torch optimizer here
    elements = sum(t.numel() for st in inner.state.values() for t in st.values()
                   if torch.is_tensor(t) and t.dim() > 0)
    return {"class": type(optimizer).__name__, "state_elements": int(elements)}


def _train(spec: dict[str, Any], rank: int, world: int, run_dir: Path, log: EventLog) -> int:
    global ENGINE
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    bind = os.environ.get("PPEXEC_BIND_CORE")
    if bind:
        os.sched_setaffinity(0, {int(bind)})
    import deepspeed
    import deepspeed.ops
    from deepspeed.pipe import LayerSpec, PipelineModule
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

    from ppexec.engine import engine_class, pipeline_engine
    from ppexec.model import FORWARDS, TORCH_DTYPES, layer_factories, loss_fn, stage_boundaries, synthetic_batch
    from ppexec.tensor_parallel import is_sharded, make_groups
    from ppexec.translate import plan_schedule
    from ppsim.inputs.scenario import parse_scenario
    from ppsim.plan import Plan

    scenario = parse_scenario(spec["scenario"], source="run.json")
    plan = Plan.from_dict(spec["plan"])
    model = scenario.model
    assert model is not None
    p, d, t = plan.num_ranks, scenario.data_parallel, scenario.tensor_parallel
    if world != p * d * t:
        raise RuntimeError(f"WORLD_SIZE is {world}, the plan needs stages x data_parallel x tensor_parallel = "
                           f"{p} x {d} x {t} = {p * d * t}")
    # the shared-memory all-reduce op would be JIT-compiled on first use (about 35 s): not needed
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend=spec["backend"], timeout=timedelta(seconds=spec["timeout_s"]),
                               verbose=False)

    parts = stage_boundaries(spec["partition"])

    class PlannedPipelineModule(PipelineModule):
        """A PipelineModule cut exactly where ppsim's partition says."""

        def _partition_layers(self, method: str = "uniform") -> None:
            self.parts = parts
            stage_id = self._topo.get_coord(self.global_rank).pipe
            self._set_bounds(start=parts[stage_id], stop=parts[stage_id + 1])

    recompute = scenario.training.recompute
    tp = make_groups(world, t, rank)  # consecutive ranks, as DeepSpeed's model axis
    specs = [LayerSpec(cls, *args) for cls, args in layer_factories(model, spec["seed"], recompute, tp)]
    # full recomputation is DeepSpeed's activation checkpointing of every block (the embedding and the
    # head keep their activations, as in Megatron); selective is done inside the blocks
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
    config = {
        "train_micro_batch_size_per_gpu": scenario.training.micro_batch,
        "gradient_accumulation_steps": plan.num_microbatches,
        "train_batch_size": scenario.training.micro_batch * plan.num_microbatches * d,
        "steps_per_print": 10**9,
        "gradient_clipping": scenario.training.grad_clip,
        "wall_clock_breakdown": False,
        "bf16": {"enabled": dtype is torch.bfloat16},
        "fp16": {"enabled": dtype is torch.float16},
        # each tensor-parallel rank sends the whole activation to its peer of the next stage, as
        # ppsim's message model says (DeepSpeed would otherwise send 1/t and all-gather)
        "pipeline": {"pipe_partitioned": False, "grad_partitioned": False},
    }
    if scenario.training.zero_stage:
        # ZeRO-1: each data-parallel rank keeps the optimizer state of its shard of the stage's
        # parameters; DeepSpeed wraps the (client) AdamW for it
        config["zero_optimization"] = {
            "stage": scenario.training.zero_stage,
            # reduce_scatter: each bucket is reduced to the replica owning each part, not all-reduced
            "use_multi_rank_bucket_allreduce": scenario.training.zero_reduce == "allreduce"}
        config["zero_allow_untested_optimizer"] = True
    optimizer = torch.optim.AdamW(module.parameters(), lr=spec["lr"], weight_decay=0.0)
    with pipeline_engine(engine_class()):
        engine, _, _, _ = deepspeed.initialize(model=module, optimizer=optimizer, config=config)
    ENGINE = engine
    stage, replica = engine.stage_id, engine.grid.data_parallel_id
    engine.ppexec_schedule = plan_schedule(plan, stage)
    profiling = spec.get("mode") == "profile"
    if profiling:  # every rank times the layers at once, as they contend in training
        from ppexec.measure import layer_times, recompute_times

        torch.distributed.barrier()
        log.write("measure", name="layers", data=layer_times(model, scenario.training.micro_batch, spec["seed"]))
        log.write("measure", name="recompute",
                  data=recompute_times(model, scenario.training.micro_batch, spec["seed"]))
    torch.distributed.barrier()
    log.write("ready", rank=rank, stage=stage, replica=replica, tp=tp.rank if tp else 0, host=socket.gethostname(),
              clock_ns=time.perf_counter_ns(), pid=os.getpid(), backend=spec["backend"])
    for step in range(spec["warmup"] + spec["steps"]):
        engine.ppexec_batch = lambda mb, step=step: synthetic_batch(
            model, scenario.training.micro_batch, spec["seed"], step, replica, mb)
        engine.ppexec_spans = []
        engine.ppexec_marks = []
        engine.ppexec_memory = []
        FORWARDS.update(dict.fromkeys(FORWARDS, 0))
        loss = engine.train_batch()
        if step >= spec["warmup"]:
            log.write("step", step=step - spec["warmup"], loss=float(loss) if engine.is_last_stage() else None,
                      spans=[[str(a), t0, t1] for a, t0, t1 in engine.ppexec_spans],
                      marks=[list(m) for m in engine.ppexec_marks],
                      memory=[list(m) for m in engine.ppexec_memory], memory_source=engine.ppexec_memory_source,
                      forwards=dict(FORWARDS))
    if profiling and p == 2:
        from ppexec.measure import ping_pong
        from ppexec.profile import COLLECTIVE_FACTORS, message_sizes
        from ppsim.inputs.scenario import DTYPE_BYTES

        message = model.seq_len * scenario.training.micro_batch * model.hidden * DTYPE_BYTES[model.dtype]
        log.write("measure", name="link", data=ping_pong(rank, 1 - rank, message_sizes(message)))
        from ppexec.measure import collective_times
        from ppexec.model import parameter_count

        grads = parameter_count(model) * DTYPE_BYTES[model.dtype] // p  # a stage's gradients, about
        log.write("measure", name="collectives", data=collective_times(message_sizes(grads, COLLECTIVE_FACTORS)))
        from ppexec.measure import tensor_parallel_times

        pair = make_groups(world, 2, rank)  # the two profiling ranks as one tensor-parallel group
        assert pair is not None
        log.write("measure", name="tensor_parallel",
                  data=tensor_parallel_times(model, scenario.training.micro_batch, spec["seed"], pair))
    log.write("measure", name="optimizer", data=optimizer_state(engine.optimizer))
    if spec.get("save_params"):
        state = {k: v.detach().cpu() for k, v in engine.module.state_dict().items()}
        torch.save({"parts": parts, "stage": stage, "tp": tp.rank if tp else 0, "tp_size": t, "state": state},
                   run_dir / "ranks" / f"params-{rank}.pt")
    log.write("done", rank=rank)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    return 0


def main() -> None:
    if len(sys.argv) != 2:
        print("usage: python -m ppexec.worker RUN_DIR", file=sys.stderr)
        raise SystemExit(2)
    code = run(Path(sys.argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    # leave without the interpreter's teardown: the process group's C++ threads can abort there
    # ("terminate called without an active exception") after everything was recorded
    os._exit(code)


if __name__ == "__main__":
    main()
