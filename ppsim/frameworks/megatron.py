"""The plan as Megatron-LM's command-line arguments (``pretrain_gpt.py``): parallel sizes, the
pipeline layout string (virtual stages, uneven stages, the embedding and the loss placed as ppsim
placed them), batch, recomputation, the distributed optimizer, overlaps, precision, the model's
shape and its experts. Names from :data:`ppsim.frameworks.names.MEGATRON`.

Megatron-Core runs 1F1B, interleaved 1F1B and, for a mixture of experts, the combined 1F1B; its
distributed optimizer is ZeRO-1. A plan it cannot run as predicted (another schedule, ZeRO-2 or 3,
offloading, a hybrid pattern) is refused, each reason one line with its fix.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from ppsim.formats import EXPORT_MARKER
from ppsim.frameworks.megatron_read import ONE_BUCKET_MB
from ppsim.frameworks.names import MEGATRON as N
from ppsim.frameworks.placement import StageLayers
from ppsim.frameworks.result import Refusals
from ppsim.inputs.megatron_layout import format_layout
from ppsim.inputs.scenario import DTYPE_BYTES, Scenario
from ppsim.plan import schedules as registry

ARRAY = "PPSIM_MEGATRON_ARGS"  #: the bash array the exported file sets
Put = Callable[..., None]  #: put(key, *values): a flag of the table and its values


def megatron_args(s: Scenario, stages: list[StageLayers], refuse: Refusals, notes: list[str]) -> list[str]:
    """The arguments, flag and value(s) in order; what Megatron cannot run goes to ``refuse``, what it
    does its own way to ``notes``."""
    model, tr, pl = s.model, s.training, s.pipeline
    assert model is not None
    args: list[str] = []

    def put(key: str, *values: object) -> None:
        args.append(N[key].name)
        args.extend(str(v) for v in values)

    info = registry.describe(pl.schedule)
    pipelined = pl.stages > 1  # one stage runs no pipeline schedule at all
    if pipelined and info.native_name(registry.MEGATRON) is None:
        plain = " or ".join(s.name for s in registry.native(registry.MEGATRON) if not s.overlaps)
        refuse.add(f"Megatron-Core has no {pl.schedule} schedule: export with --schedule {plain} "
                   f"(ppsim run --schedule ... predicts each)")
    elif pipelined and not info.allows_chunks(pl.stages, pl.chunks):
        refuse.add(f"Megatron's {pl.schedule} runs on {info.pipeline_chunks} or more virtual stages a rank: give "
                   f"--chunks {info.pipeline_chunks} or more")
    # parallel sizes
    put("tensor_parallel", s.tensor_parallel)
    put("stages", pl.stages)
    if s.context_parallel > 1:
        put("context_parallel", s.context_parallel)
        put("cp_comm", "all_gather" if tr.cp_comm == "all_gather" else tr.cp_comm)
        if tr.cp_comm == "a2a+p2p":
            put("cp_hierarchy", tr.cp_a2a_size, s.context_parallel // (tr.cp_a2a_size or 1))
    if model.moe is not None:
        put("expert_parallel", s.expert_parallel)
        put("expert_tensor", s.expert_tensor)
    if tr.sequence_parallel:
        put("sequence_parallel")
    if pl.stages > 1:
        blocks = [st.blocks for st in stages]
        # Megatron lists the virtual stages virtual-stage major: stage k of rank r at v x p + r, as ppsim numbers them
        put("layout", format_layout(blocks, model.mtp_layers))
    # batch
    put("micro_batch", tr.micro_batch)
    put("global_batch", s.global_batch)
    _recompute(s, put)
    if tr.zero_stage == 1:
        put("distributed_optimizer")
    elif tr.zero_stage >= 2:
        refuse.add(f"Megatron-LM's distributed optimizer shards the optimizer state (ZeRO-1), not ZeRO-{tr.zero_stage}: "
                   "export with --zero-stage 1")
    if tr.overlap_grad_reduce:
        put("overlap_grad_reduce")
    # the buckets ppsim priced (without it Megatron sizes its own, megatron_read.megatron_bucket_params)
    put("ddp_bucket_size", round(tr.bucket_mb * 1e6 / DTYPE_BYTES[model.dtype]))
    if not tr.overlap_grad_reduce and tr.bucket_mb < ONE_BUCKET_MB:
        notes.append(f"without --overlap-grad-reduce Megatron reduces every gradient in one bucket, where ppsim priced "
                     f"{tr.bucket_mb:g} MB buckets: set training.bucket_mb: {ONE_BUCKET_MB:.0f} to price it as Megatron runs")
    if tr.overlap_param_gather:
        put("overlap_param_gather")
    if tr.tp_comm_overlap:
        put("tp_comm_overlap")
    if info.overlaps and (pipelined or info.native_name(registry.MEGATRON) is not None):
        put("moe_overlap")  # the combined 1F1B, Megatron's all-to-all overlap, on one stage too
    if tr.delay_wgrad:
        put("delay_wgrad")
    if tr.cuda_graphs == ["full_iteration"]:
        put("cuda_graph_impl", "full_iteration")
    elif tr.cuda_graphs:
        put("cuda_graph_impl", "transformer_engine")
        put("cuda_graph_modules", *tr.cuda_graphs)
    if tr.moe_router_fusion:
        put("router_fusion")
    if tr.fused_grouped_mlp:
        put("op_fuser")
    if tr.offload_layers:
        refuse.add("ppsim's activation offloading is not Megatron's: export with training.offload_layers: 0")
    _precision(s, put)
    _model(s, put, refuse, notes)
    if pipelined and pl.chunks > 1:
        notes.append("Megatron overlaps the interleaved schedule's sends and receives with compute by default "
                     "(--no-overlap-p2p-communication turns it off); ppsim's messages are priced as the scenario's "
                     f"pipeline.comm ({pl.comm}) says")
    return args


def _recompute(s: Scenario, put: Put) -> None:
    tr = s.training
    if tr.recompute == "full":
        put("recompute_granularity", "full")
        if tr.recompute_layers:
            put("recompute_method", "block")  # the first n blocks of each stage, as ppsim recomputes them
            put("recompute_layers", tr.recompute_layers)
        else:
            put("recompute_method", "uniform")
            put("recompute_layers", 1)
    elif tr.recompute == "selective":
        put("recompute_granularity", "selective")
        put("recompute_modules", *(tr.recompute_modules or ["core_attn"]))


def _precision(s: Scenario, put: Put) -> None:
    assert s.model is not None
    tr = s.training
    if s.model.dtype == "bf16":
        put("bf16")
    elif s.model.dtype == "fp16":
        put("fp16")
    if tr.fp8:
        put("fp8_format", "hybrid")
        put("fp8_recipe", tr.fp8)
    if tr.fp4:
        put("fp4_format", "e2m1")
        put("fp4_recipe", tr.fp4)
    if tr.low_precision_params and tr.fp8:
        put("fp8_param_gather")
    if tr.fp8_attention:
        put("fp8_attention")
    if tr.high_precision_first_layers or tr.high_precision_last_layers:  # both given: Megatron's defaults are 1
        put("first_last_bf16")
        put("bf16_at_start", tr.high_precision_first_layers)
        put("bf16_at_end", tr.high_precision_last_layers)
    put("clip_grad", f"{tr.grad_clip:g}")


def _model(s: Scenario, put: Put, refuse: Refusals, notes: list[str]) -> None:
    """The model's shape as ppsim priced it."""
    assert s.model is not None
    m = s.model
    if m.pattern is not None:
        refuse.add("a hybrid pattern's model is Megatron's pretrain_mamba.py, not exported yet: export a GPT-style model")
    put("layers", m.layers)
    if m.attention_window is not None:
        put("window_size", f"{m.attention_window},0")
        if m.full_attention_every is not None:
            put("window_skip", m.full_attention_every)
    put("hidden", m.hidden)
    put("ffn_hidden", m.ffn)
    put("heads", m.heads)
    if m.kv < m.heads:
        put("gqa")
        put("kv_heads", m.kv)
    if m.head_dim is not None:
        put("head_dim", m.head_dim)
    put("seq_len", m.seq_len)
    put("positions_table", m.seq_len)
    put("vocab", m.vocab)
    if m.mlp == "swiglu":
        put("swiglu")
    if m.positions == "rope":
        put("positions", "rope")
        put("normalization", "RMSNorm")
        notes.append("RMSNorm for a model with rotary positions (ppsim prices LayerNorm and RMSNorm alike)")
    else:
        put("positions", "learned_absolute")
    if not m.tie_embeddings:
        put("untie")
    if not m.dropout:
        put("attention_dropout", 0)
        put("hidden_dropout", 0)
    if not s.training.flash_attention:
        put("attention_backend", "unfused")
    elif s.training.attention_kernel == "flash2":
        put("attention_backend", "flash")
        put("flash_attention_version", 2)
    else:
        put("attention_backend", "fused")
    if not s.training.flash_attention:
        notes.append("attention unfused (its s x s scores kept), as ppsim priced it: set training.flash_attention: "
                     "true to price and export Megatron's flash attention")
    if m.mla is not None:
        put("mla")
        if m.mla.q_lora_rank:
            put("q_lora_rank", m.mla.q_lora_rank)
        put("kv_lora_rank", m.mla.kv_lora_rank)
        put("qk_head_dim", m.mla.qk_nope_head_dim)
        put("qk_pos_dim", m.mla.qk_rope_head_dim)
        put("v_head_dim", m.mla.v_head_dim)
    if m.mtp_layers:
        put("mtp_layers", m.mtp_layers)
    if m.mtp_repeated:
        refuse.add("ppsim does not export model.mtp_repeated (Megatron-Bridge's mtp_use_repeated_layer) yet: export "
                   "without it")
    if m.moe is not None:
        moe = m.moe
        put("experts", moe.experts)
        put("top_k", moe.top_k)
        put("expert_ffn", moe.ffn_hidden)
        if moe.shared_experts:
            put("shared_ffn", moe.shared_experts * moe.shared_ffn)
        put("moe_layers", moe_layer_freq([moe.is_moe(i) for i in range(m.layers)]))
        if s.training.moe_dispatcher != "alltoall":  # DeepEP's or HybridEP's kernels
            put("dispatcher", "flex")
            put("flex_backend", s.training.moe_dispatcher)
        else:
            put("dispatcher", "alltoall")
        put("grouped_gemm")
        if moe.node_limit is not None:
            per_node = s.cluster.devices_per_node if s.cluster is not None else None
            if per_node is None or s.expert_parallel % per_node or s.expert_parallel <= per_node:
                refuse.add("node-limited routing needs an expert-parallel group spanning whole nodes of a cluster "
                           "(Megatron groups the experts by node): drop model.moe.node_limit or give a cluster")
            else:
                put("router_groups", s.expert_parallel // per_node)
                put("router_group_topk", moe.node_limit)
        if s.training.moe_fp8_dispatch:
            refuse.add("ppsim knows no Megatron-LM argument that dispatches tokens in FP8: export without "
                       "training.moe_fp8_dispatch")
        if moe.latent:
            refuse.add("ppsim does not export a latent MoE (Megatron-LM's moe_latent_size) yet: export without "
                       "model.moe.latent")
        if moe.skew not in (None, 1.0) or moe.routing is not None:
            notes.append("routing skew is ppsim's assumption about the run, not a Megatron setting")
        if s.training.moe_comm_sms is not None:
            notes.append(f"ppsim charged the dispatch and combine kernels {s.training.moe_comm_sms} SMs of the compute "
                         "they overlap: give the dispatcher as many (HybridEP's --moe-hybridep-num-sms, DeepEP's "
                         "Buffer.set_num_sms); NCCL's all-to-all takes what NCCL picks")


def moe_layer_freq(is_moe: list[bool]) -> str:
    """Megatron's --moe-layer-freq list expression: runs of 0 (dense) and 1 (MoE), ``([0]*3+[1]*58)``."""
    runs: list[tuple[int, int]] = []
    for flag in map(int, is_moe):
        if runs and runs[-1][0] == flag:
            runs[-1] = (flag, runs[-1][1] + 1)
        else:
            runs.append((flag, 1))
    return "(" + "+".join(f"[{flag}]*{n}" for flag, n in runs) + ")"


def args_file(args: list[str], command: str) -> str:
    """A bash file that sets :data:`ARRAY` to ``args``, one flag and its values a line."""
    lines: list[list[str]] = []
    current: list[str] = []
    for a in args:
        if a.startswith("--") and current:
            lines.append(current)
            current = []
        current.append(a)
    if current:
        lines.append(current)
    body = "\n".join("  " + " ".join(shlex.quote(x) for x in line) for line in lines)
    return (f"{EXPORT_MARKER}: {command}\n# source this file, then add the data, tokenizer and training-length arguments:\n"
            f"#   torchrun ... pretrain_gpt.py \"${{{ARRAY}[@]}}\" --data-path ... --tokenizer-type ... --train-iters ...\n"
            f"{ARRAY}=(\n{body}\n)\n")
