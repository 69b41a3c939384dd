"""The plan as torchtitan's TOML job config (its v0.2.2 format, the last with TOML files) and the
schedule CSV its ``_PipelineScheduleRuntime`` runs: the plan's exact order of compute actions on
each rank (compute only: torch places the sends and receives), for every ppsim schedule, torch
class or not. Names from :data:`ppsim.frameworks.names.TORCHTITAN`.

torchtitan splits the model by ``module_fqns_per_model_part`` (one list per virtual stage, its
llama3 model's module names) and places the stages by the schedule's name: V placement for
``ZBVZeroBubble``, a loop otherwise; so the TOML names a torch class of the plan's placement and
stage count, while the CSV says the order. Refused, each with its fix: DualPipe (two copies of the
model), ZeRO-1 and 2 (torchtitan shards with FSDP, ZeRO-3), FP8 recipes torchtitan has not (delayed,
blockwise), FP4, a hybrid pattern, sliding windows, offloading.
"""

from __future__ import annotations

from collections.abc import Callable

from ppsim.formats import EXPORT_MARKER
from ppsim.frameworks.names import TORCHTITAN as N
from ppsim.frameworks.placement import StageLayers
from ppsim.frameworks.result import Refusals
from ppsim.inputs.scenario import Scenario
from ppsim.plan import Kind, Plan
from ppsim.plan import schedules as registry

TORCH = "torch"  #: torch's schedule classes, in the schedule registry's native names

TomlValue = str | int | float | bool | list[str] | list[list[str]]


def torchtitan_config(s: Scenario, plan: Plan, stages: list[StageLayers], csv_name: str, refuse: Refusals,
                      notes: list[str]) -> dict[str, dict[str, TomlValue]]:
    """The TOML sections and keys of the plan; ``csv_name``: the schedule CSV's path as the TOML gives it."""
    model, tr, pl = s.model, s.training, s.pipeline
    assert model is not None
    out: dict[str, dict[str, TomlValue]] = {}

    def put(key: str, value: TomlValue) -> None:
        section, name = N[key].name.rsplit(".", 1)
        out.setdefault(section, {})[name] = value

    # torchtitan's families: llama3 (dense), deepseek_v3 (latent attention and experts), qwen3 (with experts)
    family = "llama3" if model.moe is None else "deepseek_v3" if model.mla is not None else "qwen3"
    put("model_name", family)
    notes.append(f"model.name {family}: torchtitan builds the model from its name and flavor; choose (or add) the "
                 f"flavor of this shape ({model.layers} layers, hidden {model.hidden}, {model.heads} heads, "
                 f"{model.kv} KV heads, MLP {model.ffn}, vocabulary {model.vocab}"
                 + (f", {model.moe.experts} experts of {model.moe.ffn_hidden}, {model.moe.top_k} a token"
                    if model.moe else "") + f"); the stages' module names are {family}'s")
    if model.positions != "rope" or model.mlp != "swiglu":
        notes.append(f"torchtitan's {family} has rotary positions and SwiGLU MLPs, this model "
                     f"{'learned positions' if model.positions != 'rope' else 'rotary positions'} and "
                     f"{model.mlp.upper() if model.mlp == 'gelu' else 'SwiGLU'} MLPs: the plan and the schedule "
                     "hold for the model you bring, whose modules must carry these names")
    if tr.fp8 == "tensorwise":
        put("converters", ["quantize.linear.float8"])
        put("float8_recipe", "tensorwise")
    elif tr.fp8 == "mxfp8":
        put("converters", ["quantize.linear.mx"])
        put("mx_recipe", "mxfp8_cublas")
    elif tr.fp8:
        refuse.add(f"torchtitan has no {tr.fp8} FP8 scaling: export with training.fp8: tensorwise or mxfp8")
    if tr.fp4:
        refuse.add("torchtitan's TOML has no FP4 training: export without training.fp4")
    if tr.fp8_attention:
        refuse.add("torchtitan's TOML runs the attention in 16 bits: export without training.fp8_attention")
    for on, what, fix in ((tr.cuda_graphs, "CUDA graphs", "training.cuda_graphs: []"),
                          (tr.moe_router_fusion, "Megatron's fused router", "training.moe_router_fusion: false"),
                          (tr.fused_grouped_mlp, "Transformer Engine's fused grouped MLP",
                           "training.fused_grouped_mlp: false")):
        if on:
            refuse.add(f"torchtitan's TOML has no {what}, which ppsim priced: export with {fix}")
    if tr.high_precision_first_layers or tr.high_precision_last_layers:
        refuse.add("torchtitan's TOML keeps no layers out of FP8 by their place: export without "
                   "training.high_precision_first_layers / high_precision_last_layers")
    d = s.data_parallel
    # a pipeline's micro-batches are its local batch over the micro-batch size; without one, torchtitan
    # accumulates gradients over the global batch's excess over the local batch x replicas
    put("local_batch", tr.micro_batch * (s.microbatches if pl.stages > 1 else 1))
    put("global_batch", s.global_batch)
    put("seq_len", model.seq_len)
    put("max_norm", tr.grad_clip)
    if model.dtype == "fp16":
        refuse.add("torchtitan trains in bfloat16 or float32, not fp16: export with model.dtype: bf16")
    put("param_dtype", "float32" if model.dtype == "fp32" else "bfloat16")
    # data parallelism: replicated (DDP) or fully sharded (FSDP, ZeRO-3); torchtitan has no ZeRO-1 or 2
    if tr.zero_stage in (1, 2) and d > 1:
        refuse.add(f"torchtitan shards with FSDP (ZeRO-3) or replicates (ZeRO-0); it has no ZeRO-{tr.zero_stage}: "
                   "export with --zero-stage 0 or 3")
    sharded = tr.zero_stage == 3
    put("replicate", 1 if sharded else d)
    put("shard", d if sharded else 1)
    put("tensor_parallel", s.tensor_parallel)
    put("context_parallel", s.context_parallel)
    put("stages", pl.stages)
    put("microbatch_size", tr.micro_batch)
    if pl.stages > 1:
        torch_class = placement_schedule(plan)
        if torch_class is None:
            refuse.add("torchtitan places a rank's stages in a loop or a V; this plan places them otherwise: export "
                       "a schedule of either placement")
        else:
            put("schedule", torch_class)
        put("schedule_csv", csv_name)
        put("fqns", module_fqns(stages, model.layers))
    if pl.input_grad_frees and Kind.W in plan.kinds():
        refuse.add("torch's runtime keeps a split backward's autograd graph to its weight grad, not a "
                   "weight-gradient store: export with pipeline.split_backward: autograd")
    info = registry.describe(pl.schedule)
    if info.pipes > 1:
        refuse.add(f"{pl.schedule} runs {info.pipes} copies of the model; torchtitan runs one: export "
                   f"{info.folded or 'a schedule of one copy'}")
    if model.moe is not None:
        for on, what, fix in ((tr.moe_dispatcher != "alltoall", f"{tr.moe_dispatcher}'s dispatch",
                               "export with training.moe_dispatcher: alltoall"),
                              (model.moe.node_limit is not None, "node-limited routing", "drop model.moe.node_limit"),
                              (tr.moe_fp8_dispatch, "an FP8 dispatch", "drop training.moe_fp8_dispatch"),
                              (model.moe.latent is not None, "a latent MoE", "drop model.moe.latent")):
            if on:
                refuse.add(f"ppsim knows no key of torchtitan v0.2.2's TOML for {what}: {fix}")
        put("expert_parallel", s.expert_parallel)
        etp = s.expert_tensor
        if etp not in (1, s.tensor_parallel):
            refuse.add(f"torchtitan splits experts over 1 or t devices, not {etp}: export with expert_tensor_parallel "
                       f"1 or {s.tensor_parallel}")
        put("expert_tensor", etp)
        # torchtitan's experts borrow their ranks from the sharded data parallelism and context
        # parallelism (and tensor parallelism where each expert is whole): ParallelDims' rule
        within = s.context_parallel * (s.tensor_parallel if etp == 1 else 1)
        borrowed = (d if sharded else 1) * within
        if s.expert_parallel > 1 and (borrowed % s.expert_parallel or s.expert_parallel % within):
            refuse.add(f"torchtitan's expert parallelism ({s.expert_parallel}) takes its ranks from the sharded data "
                       f"parallelism, context parallelism{' and tensor parallelism' if etp == 1 else ''} "
                       f"({borrowed} here), which it must divide and be a multiple of {within}: export with "
                       + ("--zero-stage 3 (FSDP's sharded data parallelism)" if not sharded else
                          "expert_parallel a divisor of that"))
    _checkpointing(s, put, refuse, notes)
    if model.pattern is not None:
        refuse.add("torchtitan has no hybrid Mamba model: export a GPT-style model")
    if model.attention_window is not None:
        refuse.add("sliding-window attention is not exported yet: drop model.attention_window")
    if model.mtp_layers:
        refuse.add("ppsim knows no key of torchtitan v0.2.2's TOML for multi-token prediction: export with "
                   "model.mtp_layers: 0")
    if tr.offload_layers:
        refuse.add("ppsim's activation offloading is not torchtitan's: export with training.offload_layers: 0")
    if s.context_parallel > 1 and tr.cp_comm != "all_gather":
        notes.append(f"torchtitan's ring attention passes keys and values by all-gather or all-to-all "
                     f"(context_parallel_rotate_method), not Megatron's {tr.cp_comm}: ppsim priced {tr.cp_comm}")
    if tr.flash_attention and tr.attention_kernel != "cudnn":
        notes.append("torchtitan v0.2.2's attention asks torch's SDPA for cuDNN's kernel first "
                     f"(torchtitan/models/attention.py), FlashAttention-2 only where cuDNN's cannot run: ppsim priced "
                     f"{tr.attention_kernel}")
    if s.tensor_parallel > 1 and not tr.sequence_parallel:
        notes.append("torchtitan's tensor parallelism always splits the norms' activations (sequence parallel); "
                     "ppsim priced it without")
    return out


def _checkpointing(s: Scenario, put: Callable[[str, TomlValue], None], refuse: Refusals, notes: list[str]) -> None:
    tr = s.training
    if tr.recompute == "none":
        put("ac_mode", "none")
    elif tr.recompute == "full":
        put("ac_mode", "full")
        if tr.recompute_layers:
            refuse.add("torchtitan checkpoints every block or every n-th, not the first n of each stage: "
                       "drop training.recompute_layers")
    else:
        put("ac_mode", "selective")
        put("ac_option", "op")
        notes.append("selective recomputation as torchtitan's per-operator checkpointing (it keeps the matmuls' "
                     "outputs and recomputes the rest; ppsim priced the attention core recomputed)")


def placement_schedule(plan: Plan) -> str | None:
    """The torch schedule class whose placement and stages per rank torchtitan splits the model for
    (the CSV gives the order): the first of torch's classes, the default schedule's first, that
    places the plan's stages on the same ranks (1F1B, Interleaved1F1B, ZBVZeroBubble); None when
    none does."""
    p, v = plan.num_ranks, plan.chunks
    for info in sorted(registry.native(TORCH), key=lambda info: info.name != registry.DEFAULT):
        if info.pipes == 1 and info.allows_chunks(p, v) and info.stage_to_rank(p, v) == plan.stage_to_rank:
            return info.native_name(TORCH)
    return None


def module_fqns(stages: list[StageLayers], layers: int) -> list[list[str]]:
    """Each virtual stage's modules, in llama3's names: the embedding, the blocks, the final norm
    and the output head."""
    out = []
    for st in stages:
        names = (["tok_embeddings"] if st.embedding else []) + [f"layers.{i}" for i in st.block_range]
        out.append(names + (["norm", "output"] if st.head else []))
    return out


def toml_text(sections: dict[str, dict[str, TomlValue]], command: str) -> str:
    """The sections as TOML (strings, numbers, booleans and lists of them)."""
    lines = [f"{EXPORT_MARKER}: {command}", "# torchtitan v0.2.2's TOML: merge these keys into your train config", ""]
    for section, keys in sections.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {_value(value)}" for key, value in keys.items()]
        lines.append("")
    return "\n".join(lines)


def _value(v: TomlValue) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "[" + ", ".join(_value(x) for x in v) + "]"
