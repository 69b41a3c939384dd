"""The Scenario: a validated, typed description of a model, a batch, a pipeline plan and hardware.

This is the only module that reads scenario files. Every error names the key and what to do.
"""

from __future__ import annotations

import difflib
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ppsim.errors import PpsimError, ScenarioError, file_error, shown_path
from ppsim.inputs.choices import (
    Comm,
    CudaGraphScope,
    Dtype,
    Fp4Recipe,
    Fp8Recipe,
    KernelChoice,
    PartitionMode,
    Recompute,
    RecomputeModule,
    SplitBackward,
)
from ppsim.inputs.yaml_files import load_yaml, problem
from ppsim.plan import schedules

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
MAX_MS = 1e9  #: the longest time a cost may give, in ms (11.6 days)
#: the most actions a plan may have: the simulator's time and memory grow with them (docs/scenarios.md
#: says what this many cost)
MAX_PLAN_ACTIONS = 5 * 10**6
ACTIONS_PER_PASS = 6  #: per virtual stage and micro-batch: forward, backward, and their sends and receives
#: the most devices (and NICs) a cluster may have: its graph is built whole (10,000 nodes of 8 take a second)
MAX_CLUSTER_DEVICES = 131_072
Ms = Annotated[float, Field(ge=0, le=MAX_MS)]
PerStage = Ms | list[Ms]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class RoutingSpec(_Strict):
    """A seeded draw of how unevenly a MoE layer's router spreads its tokens (ppsim.costs.moe.routing_skew)."""

    load_cv: float = Field(gt=0, le=100, description=(
        "the experts' routed token counts' standard deviation over their mean, in each MoE layer (what a "
        "run's per-expert token counts give)"))
    seed: int = Field(default=0, ge=0, le=2**32, description="the draw's seed: the same seed, the same loads")


class MoESpec(_Strict):
    """A mixture of experts in place of the MLP of the MoE layers (ppsim.costs.moe)."""

    experts: int = Field(gt=1, le=2**16, description="routed experts per MoE layer")
    top_k: int = Field(gt=0, le=2**10, description="routed experts per token")
    ffn_hidden: int = Field(gt=0, le=2**22, description="one expert's MLP width (Megatron's moe_ffn_hidden_size)")
    shared_experts: int = Field(default=0, ge=0, le=64, description="experts every token goes through")
    shared_ffn_hidden: int | None = Field(default=None, gt=0, le=2**22,
                                          description="one shared expert's MLP width; default: ffn_hidden")
    dense_layers: int = Field(default=0, ge=0, le=10_000,
                              description="the first this many layers keep a dense MLP (DeepSeek's first_k_dense)")
    layer_freq: int = Field(default=1, ge=1, le=10_000,
                            description="every this many layers (after the dense ones) is a MoE layer; 1: all")
    #: the busiest expert-parallel rank's routed tokens over the mean (1: balanced routing); its
    #: experts set each MoE layer's time and its all-to-all bytes. None (not given): balanced, or
    #: what the profile a prediction is priced by measured of the model (``stated_skew``)
    skew: float | None = Field(default=None, ge=1.0, le=1_000.0)
    #: each token's routed experts on at most this many nodes (DeepSeek-V3's node-limited routing;
    #: Megatron's --moe-router-group-topk with an expert group per node): what a ``deepep`` dispatch
    #: sends over the network
    node_limit: int | None = Field(default=None, ge=1, le=10_000)
    #: a latent MoE (Nemotron 3 Super's and Ultra's; Megatron's --moe-latent-size): each token is
    #: projected from the hidden width to this one before its dispatch, the routed experts work in
    #: it, and the combined result is projected back (the router and the shared experts stay at the
    #: hidden width)
    latent: int | None = Field(default=None, ge=1, le=2**20)
    #: instead of ``skew``: each MoE layer's expert loads drawn from a seeded distribution, the
    #: busiest rank found for the plan's expert parallelism
    routing: RoutingSpec | None = None

    @model_validator(mode="after")
    def _top_k_within_experts(self) -> MoESpec:
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) is more than experts ({self.experts})")
        if self.routing is not None and self.skew not in (None, 1.0):
            raise ValueError(f"skew ({self.skew:g}) and routing both say how uneven the routing is: give one "
                             "(routing draws the loads and finds the busiest rank for each expert_parallel)")
        return self

    @property
    def stated_skew(self) -> float:
        """``skew`` where given, else balanced routing's 1."""
        return 1.0 if self.skew is None else self.skew

    @property
    def shared_ffn(self) -> int:
        return self.shared_ffn_hidden or self.ffn_hidden

    def is_moe(self, layer: int) -> bool:
        """Whether block ``layer`` (0-based) has experts."""
        return layer >= self.dense_layers and (layer - self.dense_layers) % self.layer_freq == 0

    def moe_layers(self, layers: int) -> int:
        """How many of a model's ``layers`` blocks have experts."""
        return sum(map(self.is_moe, range(layers)))


class MambaSpec(_Strict):
    """Mamba-2 mixer layers of a hybrid model (Nemotron-H, Nemotron 3; ppsim.costs.mamba)."""

    heads: int = Field(gt=0, le=2**16, description="SSM heads H (Megatron's mamba_num_heads)")
    head_dim: int = Field(gt=0, le=2**12, description="one head's width P (mamba_head_dim): d_inner = H x P")
    state: int = Field(default=128, gt=0, le=2**12, description="the state's width N (mamba_state_dim)")
    groups: int = Field(default=1, gt=0, le=2**12, description="B and C groups G (mamba_num_groups)")
    conv_kernel: int = Field(default=4, gt=0, le=64, description="the causal convolution's width")
    chunk: int = Field(default=128, gt=0, le=2**14, description="the SSD scan's chunk length Q")

    @model_validator(mode="after")
    def _groups_divide_heads(self) -> MambaSpec:
        if self.heads % self.groups:
            raise ValueError(f"groups ({self.groups}) must divide heads ({self.heads})")
        return self

    @property
    def inner(self) -> int:
        """d_inner = heads x head_dim."""
        return self.heads * self.head_dim


#: the kinds of layer (ModelSpec.layer_kind) that have experts
MOE_KINDS = frozenset({"moe", "moe/window", "E"})
#: the layers of a hybrid pattern (Megatron's hybrid_override_pattern)
PATTERN_LAYERS = {"M": "a Mamba-2 mixer", "*": "attention", "-": "an MLP", "E": "a mixture of experts"}


class MLASpec(_Strict):
    """DeepSeek's multi-head latent attention (DeepSeek-V2/V3, Kimi K2): queries and keys/values
    projected down to low-rank latents and up again per head (ppsim.costs.layers)."""

    q_lora_rank: int | None = Field(default=None, gt=0, le=2**16, description="the queries' latent width; "
                                    "none: queries projected directly")
    kv_lora_rank: int = Field(gt=0, le=2**16, description="the keys' and values' latent width")
    qk_nope_head_dim: int = Field(default=128, gt=0, le=2**12, description="a head's query/key width without RoPE")
    qk_rope_head_dim: int = Field(default=64, gt=0, le=2**12, description="a head's query/key width with RoPE")
    v_head_dim: int = Field(default=128, gt=0, le=2**12, description="a head's value width")

    @property
    def qk_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class ModelSpec(_Strict):
    """A GPT-style decoder-only transformer, its MLPs optionally a mixture of experts."""

    layers: int = Field(gt=0, le=10_000, description="transformer blocks")
    hidden: int = Field(gt=0, le=2**20, description="model width h")
    heads: int = Field(gt=0, le=2**16, description="attention heads")
    seq_len: int = Field(gt=0, le=2**24, description="tokens per sequence s")
    vocab: int = Field(gt=0, le=2**24, description="vocabulary size V")
    ffn_hidden: int | None = Field(default=None, gt=0, le=2**22, description="MLP width, default 4h")
    kv_heads: int | None = Field(default=None, gt=0, le=2**16, description="key/value heads (grouped-query "
                                 "attention); default: heads")
    head_dim: int | None = Field(default=None, gt=0, le=2**12, description="one head's width (Qwen3, GPT-OSS: "
                                 "heads x head_dim is not hidden); default: hidden / heads")
    mlp: Literal["gelu", "swiglu"] = "gelu"  #: swiglu: three h x f matrices (gate, up, down), as in Llama
    positions: Literal["learned", "rope"] = "learned"  #: rope: no position-embedding table
    dropout: bool = True  #: dropout layers (their masks are kept for the backward); Llama has none
    #: the LM head reuses the embedding's table (GPT-2; Megatron-LM's GPT unless untied): one copy on one
    #: stage; with the first and last stage on different ranks each keeps a copy and they all-reduce
    #: its gradient before the optimizer step
    tie_embeddings: bool = False
    dtype: Dtype = "bf16"
    moe: MoESpec | None = None  #: experts in place of the MLP of the MoE layers
    mtp_layers: int = Field(default=0, ge=0, le=16, description=(
        "multi-token prediction modules (DeepSeek-V3; Megatron's --mtp-num-layers), on the last stage: each a "
        "projection of 2h to h, one more block and another pass of the shared LM head"))
    mtp_repeated: bool = Field(default=False, description=(
        "the multi-token prediction modules are one module run at every depth, its weights held once "
        "(Megatron-Bridge's mtp_use_repeated_layer: Nemotron 3 Super's recipe)"))
    mla: MLASpec | None = None  #: multi-head latent attention in place of (grouped-query) multi-head attention
    attention_window: int | None = Field(default=None, gt=0, le=2**24, description=(
        "sliding-window attention: each query sees itself and the this many keys before it (Megatron's "
        "window_size (w, 0); GPT-OSS: 128); None: every earlier key"))
    full_attention_every: int | None = Field(default=None, gt=0, le=10_000, description=(
        "with attention_window: every this many layers (the N-th, 2N-th, ...) attends to every earlier key, the "
        "others through the window (Megatron's window_attn_skip_freq; GPT-OSS: 2); None: every layer windowed"))
    #: a hybrid model's layers, one character each (Megatron's hybrid_override_pattern): M a Mamba-2
    #: mixer, * attention, - an MLP, E a mixture of experts; each its own layer with its norm and residual
    pattern: str | None = Field(default=None, min_length=1, max_length=10_000)
    mamba: MambaSpec | None = None  #: the Mamba-2 mixers of the pattern's M layers

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> ModelSpec:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.heads % self.kv:
            raise ValueError(f"kv_heads ({self.kv}) must divide heads ({self.heads})")
        if self.mla is not None and (self.kv_heads is not None or self.head_dim is not None):
            raise ValueError("multi-head latent attention (mla) sets the heads' widths itself: drop kv_heads and head_dim")
        if self.full_attention_every is not None and self.attention_window is None:
            raise ValueError("full_attention_every says which layers skip the sliding window, and there is no "
                             "attention_window: add one or drop full_attention_every")
        if self.mtp_repeated and not self.mtp_layers:
            raise ValueError("mtp_repeated runs the multi-token prediction module at every depth, and mtp_layers "
                             "is 0: give mtp_layers or drop mtp_repeated")
        if self.moe is not None and self.moe.latent is not None and self.moe.latent >= self.hidden:
            raise ValueError(f"moe.latent ({self.moe.latent}) projects each token to fewer values than hidden "
                             f"({self.hidden}): give a smaller one or drop it")
        self._check_pattern()
        return self

    def _check_pattern(self) -> None:
        p = self.pattern
        if p is None:
            if self.mamba is not None:
                raise ValueError("mamba describes the Mamba-2 layers of a hybrid pattern, and there is none: add a "
                                 "pattern (M for each Mamba layer) or drop mamba")
            return
        unknown = sorted(set(p) - set(PATTERN_LAYERS))
        if unknown:
            raise ValueError(f"pattern has {', '.join(map(repr, unknown))}: each layer is one of "
                             + ", ".join(f"{k} ({v})" for k, v in PATTERN_LAYERS.items()))
        if len(p) != self.layers:
            raise ValueError(f"pattern has {len(p)} layers and layers is {self.layers}: give one character per layer")
        for char, spec, key in (("M", self.mamba, "mamba"), ("E", self.moe, "moe")):
            if char in p and spec is None:
                raise ValueError(f"pattern has {PATTERN_LAYERS[char]} layers ({char}) and no {key} section: add one")
        if "M" not in p and self.mamba is not None:
            raise ValueError("pattern has no Mamba layer (M) to use the mamba section: drop it")
        if self.moe is not None and (self.moe.dense_layers or self.moe.layer_freq != 1):
            raise ValueError("with a pattern, its E characters say which layers have experts: drop moe.dense_layers "
                             "and moe.layer_freq")
        unsupported = [(k, v) for k, v in (("attention_window", self.attention_window),) if v is not None]
        if self.mtp_layers and "*" not in p:
            raise ValueError("mtp_layers: a hybrid model's multi-token prediction block is its attention layer "
                             "and its MoE or MLP layer (Nemotron 3's *E), and the pattern has no attention (*)")
        if unsupported:
            raise ValueError(f"{unsupported[0][0]} is not modelled in a hybrid pattern yet: drop it")

    def layer_kind(self, layer: int) -> str:
        """What layer ``layer`` is: its pattern character in a hybrid model; else a block ("block"),
        with experts where the moe section's rule puts them ("moe"), attending through the window
        ("/window")."""
        if self.pattern is not None:
            return self.pattern[layer]
        experts = self.moe is not None and self.moe.is_moe(layer)
        return ("moe" if experts else "block") + ("/window" if self.is_windowed(layer) else "")

    @cached_property
    def layer_kinds(self) -> tuple[str, ...]:
        """:meth:`layer_kind` of every layer, worked out once per model."""
        return tuple(map(self.layer_kind, range(self.layers)))

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer ``layer`` (0-based) has experts (its kind is a MoE one)."""
        return self.layer_kinds[layer] in MOE_KINDS

    def moe_layer_count(self) -> int:
        return sum(kind in MOE_KINDS for kind in self.layer_kinds)

    def is_windowed(self, layer: int) -> bool:
        """Whether block ``layer`` (0-based) attends through ``attention_window`` (Megatron numbers
        layers from 1 and makes every ``full_attention_every``-th one full)."""
        if self.attention_window is None:
            return False
        return self.full_attention_every is None or (layer + 1) % self.full_attention_every != 0

    @property
    def kv(self) -> int:
        """Key/value heads."""
        return self.kv_heads or self.heads

    @property
    def head_width(self) -> int:
        """One attention head's width d."""
        return self.head_dim or self.hidden // self.heads

    @property
    def q_width(self) -> int:
        """The queries' width, heads x d (the model's width unless ``head_dim`` says otherwise)."""
        return self.heads * self.head_width

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden


#: training.bucket_mb's bounds: the smallest bucket, and the largest (one bucket of every gradient)
BUCKET_MB = (1.0, 1e6)


class TrainingSpec(_Strict):
    global_batch: int | None = Field(default=None, gt=0, le=10**9,
                                     description="sequences per optimizer step, all replicas")
    micro_batch: int = Field(default=1, gt=0, le=10**6, description="sequences per micro-batch")
    grad_clip: float = Field(default=1.0, ge=0, description="gradient clipping norm; 0: off (no gradient-norm sync)")
    recompute: Recompute = "none"
    #: with recompute: full, only the first this many blocks of each virtual stage are recomputed, the
    #: rest keep their activations (Megatron's --recompute-method block --recompute-num-layers); None: all
    recompute_layers: int | None = Field(default=None, ge=1, le=10_000)
    #: with recompute: selective, what it recomputes (Megatron's --recompute-modules; ppsim.costs.layers):
    #: None: the attention core, as Megatron's default ["core_attn"]
    recompute_modules: list[RecomputeModule] | None = Field(default=None, min_length=1)
    zero_stage: int = Field(default=0, ge=0, le=3, description="DeepSpeed ZeRO stage (3: FSDP); pipelines allow 0, 1 or 3")
    #: how ZeRO-1 reduces the gradients: all-reduce, each replica keeping its part (DeepSpeed's default),
    #: or reduce-scatter (Megatron's distributed optimizer; DeepSpeed's use_multi_rank_bucket_allreduce: false)
    zero_reduce: Literal["allreduce", "reduce_scatter"] = "allreduce"
    allreduce: Literal["ring", "tree"] = "ring"
    overlap_grad_reduce: bool = False
    #: ZeRO-1's parameter all-gather during the next step's first forward (Megatron's --overlap-param-gather)
    overlap_param_gather: bool = False
    #: blocks of each virtual stage whose activations go to host memory (Megatron's --cpu-offloading-num-layers)
    offload_layers: int = Field(default=0, ge=0, le=10_000)
    #: at least 1 MB: every bucket is simulated, and a 175B model's gradients are 350,000 of them
    bucket_mb: float = Field(default=25.0, ge=BUCKET_MB[0], le=BUCKET_MB[1],
                             description="gradient all-reduce bucket, MB (1e6 bytes)")
    sequence_parallel: bool = False  #: Megatron's: layer norms and dropouts split over the tensor-parallel group
    #: Megatron's --tp-comm-overlap: the tensor-parallel collectives run beside the linear layers' GEMMs
    #: (userbuffers; needs sequence_parallel): ppsim.costs.tensor_parallel
    tp_comm_overlap: bool = False
    #: Megatron's --delay-wgrad-compute (with schedule combined-1f1b): each MoE layer's weight grads wait
    #: for its backward's dispatch all-to-all and run beside it (ppsim.sim.durations)
    delay_wgrad: bool = False
    #: how a MoE layer's tokens reach their experts: ``alltoall`` (one message per token copy, NCCL's
    #: all-to-all: Megatron's alltoall dispatcher), or ``deepep`` / ``hybridep`` (Megatron's flex
    #: dispatcher with DeepEP's or HybridEP's kernels: a token crosses the network once per destination
    #: node and goes once to each device it has experts on, at the share of each link's rate the
    #: kernels were measured to reach on the device: hardware.Device.dispatch_rate)
    moe_dispatcher: Literal["alltoall", "deepep", "hybridep"] = "alltoall"
    #: a MoE layer's tokens dispatched to their experts in the FP8 format of ``fp8`` (and, in the
    #: backward, the gradients sent to the experts); the combine and its gradient in the dtype
    #: (DeepSeek-V3's dispatch)
    moe_fp8_dispatch: bool = False
    #: the SMs the dispatch and combine kernels take while they run beside compute (DeepEP's and
    #: HybridEP's, Megatron's --moe-hybridep-num-sms; DeepSeek-V3's 20): an overlapped action's
    #: compute runs on the rest meanwhile (ppsim.sim.durations); None: not charged
    moe_comm_sms: int | None = Field(default=None, ge=1)
    #: the router's score function, top-k and auxiliary loss in fused kernels (Megatron's --moe-router-fusion)
    moe_router_fusion: bool = False
    #: the routed experts' projections and activation in Transformer Engine's fused grouped MLP (its
    #: operation fuser's, Megatron-Bridge's te_op_fuser_cutedsl_fused_grouped_mlp), not a GEMM per expert
    fused_grouped_mlp: bool = False
    #: what CUDA graphs capture (Megatron's --cuda-graph-scope; ``full_iteration`` alone: the whole
    #: step): a graphed module's kernels cost the host one launch (ppsim.costs.launches); none: all eager
    cuda_graphs: list[CudaGraphScope] = Field(default_factory=list)
    flash_attention: bool = False  #: no s x s scores kept; the backward recomputes them
    #: which fused kernel computes the attention under flash_attention: ``cudnn`` (Transformer Engine's
    #: fused attention, its default on Hopper and Blackwell) or ``flash2`` (the flash-attn package's
    #: FlashAttention-2: Transformer Engine with NVTE_FUSED_ATTN=0, torch SDPA's flash backend), each at
    #: its measured speed on the device (hardware.Device.kernel_speed)
    attention_kernel: Literal["cudnn", "flash2"] = "cudnn"
    #: the fused attention's inputs in FP8 (Megatron's --fp8-dot-product-attention, under training.fp8):
    #: cuDNN's kernel at its measured FP8 figures, MXFP8's under the mxfp8 recipe (priced_attention_kernel)
    fp8_attention: bool = False
    #: how context parallelism exchanges keys and values (Megatron's --cp-comm-type): ppsim.costs.context_parallel
    cp_comm: Literal["p2p", "all_gather", "a2a", "a2a+p2p"] = "p2p"
    #: with cp_comm a2a+p2p: the all-to-all groups' size (Megatron's --hierarchical-context-parallel-sizes' first)
    cp_a2a_size: int | None = Field(default=None, gt=1, le=1_024)
    #: the blocks' linear layers in FP8 by this Transformer Engine recipe (ppsim.costs.low_precision); None: all 16-bit
    fp8: Fp8Recipe | None = None
    fp4: Fp4Recipe | None = None  #: the linear layers in FP4 (Megatron's --fp4-recipe; Blackwell)
    #: weights kept in the fp8 / fp4 format (Megatron's --fp8-param-gather / --fp4-param-gather)
    low_precision_params: bool = False
    #: with fp8 or fp4, the model's first and last this many layers keep their linear layers in
    #: model.dtype (Megatron's --first-last-layers-bf16, --num-layers-at-start-in-bf16 / -at-end-)
    high_precision_first_layers: int = Field(default=0, ge=0, le=1_000_000)
    high_precision_last_layers: int = Field(default=0, ge=0, le=1_000_000)

    @property
    def priced_attention_kernel(self) -> str:
        """The fused attention kernel whose figures price the attention: ``attention_kernel``, or
        under ``fp8_attention`` cuDNN's in FP8 (``cudnn_mxfp8`` under the mxfp8 recipe, ``cudnn_fp8``
        under the per-tensor and blockwise ones: the catalogue's ``attention_kernels``)."""
        if not self.fp8_attention:
            return self.attention_kernel
        return "cudnn_mxfp8" if self.fp8 == "mxfp8" else "cudnn_fp8"


class PipelineSpec(_Strict):
    stages: int = Field(default=1, gt=0, le=10_000, description="pipeline ranks p")
    microbatches: int | None = Field(default=None, gt=0, le=10**9, description="micro-batches per step m")
    schedule: str = schedules.DEFAULT
    chunks: int = Field(default=1, gt=0, le=1_000, description="virtual stages per rank v")
    partition: PartitionMode | list[int] = "balanced"
    comm: Comm = "async"
    #: with tensor parallelism and no sequence parallelism, each tensor rank sends 1/t of a stage-to-stage
    #: message and the receiving group all-gathers it (Megatron's scatter-gather, DeepSpeed's partitioned
    #: activations); false: every tensor rank sends the whole message
    scatter_gather: bool = True
    #: what a split backward (I, then W) keeps between its halves: ``autograd`` as torch's runtime
    #: (torchtitan) keeps it, ``store`` as a weight-gradient store (Megatron-Core, the zero-bubble
    #: authors, DeepSeek's DualPipe) keeps it
    split_backward: SplitBackward = "autograd"
    memory_budget: float | None = Field(default=None, gt=0, description=(
        "the most micro-batches of activations a rank may hold at once: the cap of schedule auto "
        "(default: what fits in the device's memory)"))

    @property
    def overlap_layerwise(self) -> bool:
        """Whether an overlapped forward and backward interleave layer by layer, the memory moving
        from the one pass's to the other's and never above both (Megatron's combined 1F1B, DeepSeek's
        DualPipe), rather than running one after the other as torch's runtime runs a schedule it has
        a class for (or reads from a file) with its own split backward."""
        info = schedules.SCHEDULES.get(self.schedule)
        by_torch = info is None or info.native_name("torch") is not None
        return not by_torch or self.split_backward == "store"

    @property
    def overlaps(self) -> bool:
        """Whether the schedule runs a forward and a backward of two micro-batches as one action (the
        one hiding the other's all-to-alls: DualPipe, Megatron's combined 1F1B)."""
        info = schedules.SCHEDULES.get(self.schedule)
        return info is not None and info.overlaps

    @property
    def input_grad_frees(self) -> bool:
        """Whether a split backward's input grad frees the forward's activations (a weight-gradient
        store keeps only what the weight grads read)."""
        return self.split_backward == "store"


class LinkSpec(_Strict):
    bandwidth_gb_s: float = Field(ge=1e-6, le=1e6, description="GB/s (1e9 bytes/s) per direction, at least 1e-6 (1 kB/s)")
    latency_us: float = Field(default=0.0, ge=0, le=1e6, description="microseconds, at most a second")


class HardwareSpec(_Strict):
    device: str = "a100-80g"
    device_file: str | None = None  #: a YAML of the catalogue's format, relative to the scenario file
    efficiency: float | None = Field(default=None, ge=1e-6, le=1, description="fraction of peak reached")
    #: price each matmul by the device's measured curves (devices.yaml ``gemm``: by the GEMM's FLOPs;
    #: ``attention``: the unfused attention matmuls by head dimension) instead of the flat efficiency;
    #: ignored where the device has no curve or ``efficiency`` is set
    gemm_curves: bool = False
    #: the host's microseconds to launch one eager kernel, its CPU's (ppsim.costs.launches); None: the
    #: device's measured figure (devices.yaml ``launch``); 0: launches not priced
    launch_us: float | None = Field(default=None, ge=0, le=1e4)
    link: LinkSpec | None = None  #: between consecutive stages; default: the device's inter-node NIC
    dp_link: LinkSpec | None = None  #: for the gradient all-reduce; default: the device's intra-node link
    tp_link: LinkSpec | None = None  #: for tensor parallelism's all-reduces; default: the device's intra-node link


class ClusterSpec(_Strict):
    """Nodes of devices; links inside a node and between nodes; where the ranks go."""

    nodes: int = Field(gt=0, le=MAX_CLUSTER_DEVICES)
    devices_per_node: int = Field(default=8, gt=0, le=1_024)
    nics_per_node: int | None = Field(default=None, gt=0, le=1_024, description="default: one per device")
    #: devices one NVLink switch connects, whole nodes (GB200 NVL72: 72, in trays of 4); default: a node
    nvlink_domain: int | None = Field(default=None, gt=0, le=MAX_CLUSTER_DEVICES)
    intra_node: LinkSpec | None = None  #: default: the device's NVLink figures
    inter_node: LinkSpec | None = None  #: per NIC; default: the device's NIC figures
    placement: Literal["megatron", "pipeline-inner"] = "megatron"
    #: flows: transfers and gradient reductions share the links max-min fairly among the flows active
    #: at each instant (the simulator's network model); static: each boundary's share of its links is
    #: fixed for the whole step and each gradient all-reduce runs alone (faster to simulate)
    network: Literal["flows", "static"] = "flows"


class CostsSpec(_Strict):
    """Explicit per-stage costs in milliseconds; a number for every stage, or one value per stage."""

    forward_ms: PerStage
    backward_ms: PerStage
    weight_grad_ms: PerStage = 0.0
    p2p_ms: PerStage = 0.0
    optimizer_ms: PerStage = 0.0
    allreduce_ms: PerStage = 0.0


class SimulatorSpec(_Strict):
    """How ppsim simulates the step (the same trace whichever kernel: they are tested against SimPy)."""

    kernel: KernelChoice = "auto"


class Scenario(_Strict):
    name: str | None = None
    description: str | None = None
    model: ModelSpec | None = None
    training: TrainingSpec = TrainingSpec()
    pipeline: PipelineSpec = PipelineSpec()
    data_parallel: int = Field(default=1, gt=0, le=10**6)
    tensor_parallel: int = Field(default=1, gt=0, le=8, description="Megatron tensor parallelism inside a node")
    #: Megatron's context parallelism: each sequence's tokens split over cp devices (ppsim.costs.context_parallel)
    context_parallel: int = Field(default=1, gt=0, le=1_024)
    #: the experts of each MoE layer split over this many devices of a stage (Megatron's EP: folded into
    #: the stage's tensor x context x data-parallel devices); ppsim.costs.moe
    expert_parallel: int = Field(default=1, gt=0, le=65_536)
    #: each expert's matrices split over this many devices (Megatron's ETP); default: tensor_parallel, as Megatron's
    expert_tensor_parallel: int | None = Field(default=None, gt=0, le=64)
    hardware: HardwareSpec = HardwareSpec()
    costs: CostsSpec | None = None
    cluster: ClusterSpec | None = None
    deepspeed: str | None = Field(default=None, description="a DeepSpeed config JSON, relative to the scenario file")
    simulator: SimulatorSpec = SimulatorSpec()

    @model_validator(mode="after")
    def _needs_model_or_costs(self) -> Scenario:
        if self.model is None and self.costs is None:
            raise ValueError("a scenario needs a 'model' section or a 'costs' section (or both)")
        return self

    # ----- derived figures ------------------------------------------------------------------
    @property
    def microbatches(self) -> int:
        """m: given, or global batch / (micro-batch x data-parallel)."""
        if self.pipeline.microbatches is not None:
            return self.pipeline.microbatches
        if self.training.global_batch is not None:
            return self.training.global_batch // (self.training.micro_batch * self.data_parallel)
        return self.pipeline.stages

    @property
    def global_batch(self) -> int:
        return self.microbatches * self.training.micro_batch * self.data_parallel

    @property
    def weight_replicas(self) -> int:
        """The devices of a stage that hold the same weights (tensor ranks aside): data x context
        parallel; gradients are reduced and ZeRO shards over them."""
        return self.data_parallel * self.context_parallel

    @property
    def expert_tensor(self) -> int:
        """Expert tensor parallelism: as given, else tensor parallelism (Megatron's default)."""
        return self.expert_tensor_parallel or self.tensor_parallel

    @property
    def expert_replicas(self) -> int:
        """Devices of a stage holding the same experts (Megatron's expert data parallelism): the
        stage's tensor x context x data-parallel devices over expert x expert-tensor parallelism."""
        return self.tensor_parallel * self.weight_replicas // (self.expert_parallel * self.expert_tensor)

    @property
    def devices(self) -> int:
        return self.pipeline.stages * self.data_parallel * self.tensor_parallel * self.context_parallel

    def with_overrides(self, **overrides: Any) -> Scenario:
        """A copy with plan options laid over it (``schedule``, ``stages``, ``microbatches``,
        ``chunks``, ``partition``, ``comm``, ``data_parallel``, ``tensor_parallel``, ``micro_batch``,
        ``recompute``, ``zero_stage``; ``None`` keeps the scenario's), by the rules the command line
        follows (:func:`ppsim.inputs.overrides.apply_overrides`)."""
        from ppsim.inputs.overrides import PlanOverrides, apply_overrides

        return apply_overrides(self, PlanOverrides(**overrides), source="the overrides")[0]


def valid_range(cls: type[BaseModel], key: str) -> str | None:
    """The declared valid range of a numeric key of ``cls`` as docs/scenarios.md writes it (``integer
    1 - 10,000``, ``number > 0``, ``number, 0 < x ≤ 1``); None for a key that is not a number."""
    field = cls.model_fields[key]
    kinds = [a for a in get_args(field.annotation) or (field.annotation,) if a is not type(None)]
    scalar = kinds[0]
    meta = list(field.metadata)
    if get_origin(scalar) is Annotated:
        scalar, *extra = get_args(scalar)
        meta += [m for e in extra for m in getattr(e, "metadata", [e])]
    if scalar not in (int, float):
        return None
    bound = {name: getattr(m, name) for m in meta for name in ("gt", "ge", "le") if getattr(m, name, None) is not None}
    upper = f"{bound['le']:,.0f}" if "le" in bound else None
    if scalar is int:
        low = bound["ge"] if "ge" in bound else bound["gt"] + 1
        return f"integer {low:,} - {upper}" if upper else f"integer ≥ {low:,}"
    low, strict = (bound["gt"], True) if "gt" in bound else (bound["ge"], False)
    low_text = f"{low:g}" if low == 0 or low >= 1e-4 else f"{low:.12f}".rstrip("0")  # 0.000001, not 1e-06
    if upper is None:
        return f"number {'>' if strict else '≥'} {low_text}"
    return f"number, {low_text} < x ≤ {upper}" if strict else f"number {low_text} - {upper}"


# ----------------------------------------------------------------------------------------------
# loading and checks
# ----------------------------------------------------------------------------------------------
def _format_loc(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in ("float", "constrained-float", "literal['uniform','balanced']") or "[" in str(item):
            continue  # the branch names pydantic adds for unions
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def _explain(exc: ValidationError, source: str) -> ScenarioError:
    errors = exc.errors()
    # for unions pydantic reports one error per branch: of the first key's, report the one that went
    # deepest (a list's bad entry rather than "not a number" for the whole list)
    key = _format_loc(errors[0]["loc"]).split("[")[0]
    err = max((e for e in errors if _format_loc(e["loc"]).split("[")[0] == key), key=lambda e: len(e["loc"]))
    loc = _format_loc(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        parent_cls = _model_at(err["loc"][:-1])
        names = list(parent_cls.model_fields) if parent_cls else []
        near = difflib.get_close_matches(str(err["loc"][-1]), names, n=1)
        msg = (f"unknown key in {source}; " + (f"did you mean {near[0]}? " if near else "")
               + f"remove it or use one of: {', '.join(names)}")
    elif kind in ("model_type", "dict_type"):  # a section given as something else than a mapping
        msg = f"must be a section of keys (a mapping), got {err.get('input')!r} in {source}"
    elif kind == "missing":
        msg = f"is required in {source}; add it"
    else:
        got = repr(err.get("input"))
        msg = f"{err['msg']}{f' (got {got})' if len(got) <= 60 else ''} in {source}"
        msg = msg.replace("Value error, ", "")
    return ScenarioError(msg, field=loc or None)


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    cls: type[BaseModel] = Scenario
    for item in loc:
        field = cls.model_fields.get(str(item)) if isinstance(item, str) else None
        if field is None:
            return None
        ann = field.annotation
        candidates = getattr(ann, "__args__", (ann,))
        nxt = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if nxt is None:
            return None
        cls = nxt
    return cls


def parse_scenario(data: Any, source: str = "the scenario") -> Scenario:
    """Validate a mapping (e.g. parsed YAML) into a Scenario, raising ScenarioError on bad input."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source} must be a mapping of keys (model, training, pipeline, ...), got {type(data).__name__}")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise _explain(exc, source) from None
    check(scenario)
    return scenario


def load(path: str | Path, ds_config: str | Path | None = None) -> Scenario:
    """Read and validate a scenario YAML file (with its DeepSpeed config, if it names one)."""
    return load_with_notes(path, ds_config)[0]


def load_with_notes(path: str | Path, ds_config: str | Path | None = None) -> tuple[Scenario, list[str]]:
    """The scenario and notes for the user (e.g. DeepSpeed config keys DeepSpeed ignores).
    ``ds_config`` (a path) replaces the scenario's own ``deepspeed`` key."""
    data, p = _read_yaml(path)
    notes: list[str] = []
    if ds_config is not None:
        data["deepspeed"] = str(ds_config)
        ds_path = Path(ds_config)
    elif isinstance(data.get("deepspeed"), str):
        ds_path = p.parent / data["deepspeed"]
    else:
        ds_path = None
    hw = data.get("hardware")
    if isinstance(hw, dict) and isinstance(hw.get("device_file"), str):
        hw["device_file"] = str(p.parent / hw["device_file"])  # relative to the scenario file
    if ds_path is not None:
        from ppsim.inputs.ds_config import apply_ds_config, read_ds_config

        data, notes = apply_ds_config(data, read_ds_config(ds_path), ds_path.name)
    return parse_scenario(data, source=str(p)), notes


def _read_yaml(path: str | Path) -> tuple[dict[str, Any], Path]:
    p = Path(path)
    try:
        if not p.exists():
            raise ScenarioError(f"scenario file {shown_path(p)} does not exist; check the path")
        if p.is_dir():
            raise ScenarioError(f"{shown_path(p)} is a directory; give a scenario YAML file")
        text = p.read_text()
    except (OSError, RuntimeError) as exc:  # RuntimeError: pathlib's symbolic link loop
        raise file_error(p, exc, writing=False, kind=ScenarioError) from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"cannot read {shown_path(p)}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                            "give a scenario YAML file") from None
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{p}: malformed YAML{problem(exc)}; fix the syntax") from None
    if data is None:
        raise ScenarioError(f"{p} is empty; a scenario needs at least a 'model' or 'costs' section")
    if not isinstance(data, dict):
        raise ScenarioError(f"{p} must be a mapping of keys (model, training, pipeline, ...), got {type(data).__name__}")
    return data, p


def check(s: Scenario) -> None:
    """Cross-field rules that pydantic's per-field checks cannot see; each raises a ScenarioError
    naming the key and the fix."""
    for rule in (_check_sizes, _check_batch, _check_tensor_parallel, _check_experts, _check_links, _check_zero,
                 _check_recompute, _check_delay_wgrad, _check_dispatcher, _check_attention_kernel,
                 _check_high_precision_layers, _check_cuda_graphs,
                 _check_hybrid, _check_partition, _check_costs):
        rule(s)
    from ppsim.inputs.hardware import get_device  # local: keeps the catalogue out of schema import time

    get_device(s.hardware.device, s.hardware.device_file)


def plan_actions(s: Scenario) -> int:
    """About how many actions the scenario's plan has (and the simulator runs): forwards, backwards and
    their messages, :data:`ACTIONS_PER_PASS` per virtual stage and micro-batch."""
    return ACTIONS_PER_PASS * s.pipeline.stages * s.pipeline.chunks * s.microbatches


def _check_sizes(s: Scenario) -> None:
    """Refuse, before anything is built, a plan or a cluster too big to simulate in reasonable time
    and memory, naming its size, the limit and the key to reduce."""
    n = plan_actions(s)
    if n > MAX_PLAN_ACTIONS:
        p, v, m = s.pipeline.stages, s.pipeline.chunks, s.microbatches
        if m >= max(p, v):
            key = ("pipeline.microbatches" if s.pipeline.microbatches is not None
                   else "training.global_batch" if s.training.global_batch is not None else "pipeline.stages")
        else:
            key = "pipeline.stages" if p >= v else "pipeline.chunks"
        raise ScenarioError(
            f"the plan has about {power(n)} actions ({ACTIONS_PER_PASS} per virtual stage and micro-batch: "
            f"{p:,} stages x {v:,} chunk{'s' if v > 1 else ''} x {m:,} micro-batches); at most {power(MAX_PLAN_ACTIONS)} can be "
            f"simulated in reasonable time: reduce {key}", field=key)
    c = s.cluster
    if c is None:
        return
    if c.nvlink_domain is not None and c.nvlink_domain % c.devices_per_node:
        raise ScenarioError(
            f"cluster.nvlink_domain ({c.nvlink_domain}) must be whole nodes of cluster.devices_per_node "
            f"({c.devices_per_node}) devices: a multiple of {c.devices_per_node}", field="cluster.nvlink_domain")
    for key, count in (("devices_per_node", c.devices_per_node), ("nics_per_node", c.nics_per_node or 0)):
        if c.nodes * count > MAX_CLUSTER_DEVICES:
            raise ScenarioError(
                f"the cluster has {c.nodes:,} nodes x {count:,} = {power(c.nodes * count)} {key.split('_')[0]}; at most "
                f"{MAX_CLUSTER_DEVICES:,} can be simulated in reasonable time: reduce cluster.nodes or cluster.{key}",
                field="cluster.nodes")


def power(n: int) -> str:
    """A count as people read it: ``12,345`` below a million, else ``1.2 x 10^9``."""
    if n < 10**6:
        return f"{n:,}"
    exp = len(str(n)) - 1
    lead = n // 10 ** (exp - 1)
    return f"{lead // 10}.{lead % 10} x 10^{exp}" if lead % 10 else f"{lead // 10} x 10^{exp}"


def _check_batch(s: Scenario) -> None:
    """The global batch agrees with micro-batch x micro-batches x data-parallel."""
    gb = s.training.global_batch
    if gb is None:
        return
    micro, d, m = s.training.micro_batch, s.data_parallel, s.pipeline.microbatches
    per_step = micro * d
    if m is None and gb % per_step:
        raise ScenarioError(
            f"global_batch ({gb}) is not a multiple of micro_batch x data_parallel ({micro} x {d} = {per_step}); "
            "change one of them or set pipeline.microbatches",
            field="training.global_batch",
        )
    if m is not None and gb != m * per_step:
        raise ScenarioError(
            f"global_batch ({gb}) != micro_batch x microbatches x data_parallel "
            f"({micro} x {m} x {d} = {m * per_step}); drop one of them or make them agree",
            field="training.global_batch",
        )
    if gb < per_step:
        raise ScenarioError(f"global_batch ({gb}) is smaller than micro_batch x data_parallel ({per_step})",
                            field="training.global_batch")


def _check_tensor_parallel(s: Scenario) -> None:
    tp, m = s.tensor_parallel, s.model
    if tp > 1 and m is not None and (m.heads % tp or m.ffn % tp or m.kv % tp):
        raise ScenarioError(
            f"tensor_parallel ({tp}) must divide model.heads ({m.heads}), model.kv_heads ({m.kv}) and "
            f"the MLP width ({m.ffn}); choose a divisor of all three",
            field="tensor_parallel",
        )
    cp = s.context_parallel
    if cp > 1 and m is not None and m.seq_len % (2 * cp):
        raise ScenarioError(
            f"context_parallel ({cp}) cuts each sequence in 2 x cp = {2 * cp} chunks (two per rank, for the causal "
            f"mask's balance); model.seq_len ({m.seq_len}) must be a multiple of {2 * cp}", field="context_parallel")
    if s.training.cp_a2a_size is not None and s.training.cp_comm != "a2a+p2p":
        raise ScenarioError(f"training.cp_a2a_size sizes the all-to-all groups of cp_comm a2a+p2p; cp_comm is "
                            f"{s.training.cp_comm}: drop it or set cp_comm: a2a+p2p", field="training.cp_a2a_size")
    a2a = {"a2a": cp, "a2a+p2p": s.training.cp_a2a_size or 0}.get(s.training.cp_comm, 1)
    if s.training.cp_comm == "a2a+p2p" and cp < 4:
        raise ScenarioError(f"a2a+p2p runs all-to-alls inside groups and a ring between them, at least two of two: "
                            f"it needs context_parallel of 4 or more (here {cp}); use a2a or p2p",
                            field="training.cp_comm")
    if s.training.cp_comm == "a2a+p2p" and not (a2a and cp % a2a == 0 and 1 < a2a < cp):
        raise ScenarioError(
            f"training.cp_comm: a2a+p2p needs training.cp_a2a_size, the all-to-all groups' size: a divisor of "
            f"context_parallel ({cp}) between 2 and {cp // 2} (it is {s.training.cp_a2a_size})",
            field="training.cp_a2a_size")
    if cp > 1 and m is not None and a2a > 1 and (m.heads % (tp * a2a) or m.kv % (tp * a2a)):
        raise ScenarioError(
            f"training.cp_comm: {s.training.cp_comm} splits the heads over tensor parallel x its all-to-all group "
            f"({tp} x {a2a}); model.heads ({m.heads}) and model.kv_heads ({m.kv}) must be multiples of {tp * a2a}: "
            "use p2p or all_gather", field="training.cp_comm")
    if s.training.tp_comm_overlap and not (tp > 1 and s.training.sequence_parallel):
        raise ScenarioError(
            "training.tp_comm_overlap overlaps the tensor-parallel all-gathers and reduce-scatters of sequence "
            f"parallelism with the GEMMs; it needs tensor_parallel > 1 (it is {tp}) and training.sequence_parallel: "
            "true", field="training.tp_comm_overlap")


def _check_links(s: Scenario) -> None:
    """Links come from the hardware section or from a cluster's routes, not both."""
    if s.cluster is None:
        return
    given = [k for k in ("link", "dp_link", "tp_link") if getattr(s.hardware, k) is not None]
    if given:
        raise ScenarioError(
            f"hardware.{given[0]} and a cluster section both set links; with a cluster, give the links as "
            "cluster.intra_node and cluster.inter_node (the routes between ranks decide which is used)",
            field=f"hardware.{given[0]}",
        )


def _check_recompute(s: Scenario) -> None:
    modules = s.training.recompute_modules
    if modules is not None:
        if s.training.recompute != "selective":
            raise ScenarioError(f"says what selective recomputation recomputes, and needs training.recompute: "
                                f"selective (here {s.training.recompute!r})", field="training.recompute_modules")
        if len(set(modules)) != len(modules):
            raise ScenarioError(f"lists a module twice: {modules}", field="training.recompute_modules")
        model = s.model
        shared = model is None or (model.moe is not None and model.moe.shared_experts > 0)
        for module, has, what in (("mla_up_proj", model is None or model.mla is not None, "model.mla"),
                                  ("moe_act", model is None or model.moe is not None, "model.moe"),
                                  ("moe", model is None or model.moe is not None, "model.moe"),
                                  ("shared_experts", shared, "model.moe (its shared_experts)")):
            if module in modules and not has:
                raise ScenarioError(f"{module} recomputes part of {what}, which the model has not: drop it",
                                    field="training.recompute_modules")
    layers = s.training.recompute_layers
    if layers is None:
        return
    if s.training.recompute != "full":
        raise ScenarioError(f"recomputes that many blocks of each virtual stage in full, and needs "
                            f"training.recompute: full (here {s.training.recompute!r})",
                            field="training.recompute_layers")
    if s.model is not None and layers > s.model.layers:
        raise ScenarioError(f"{layers} is more than model.layers ({s.model.layers}); it counts the blocks of each "
                            "virtual stage that are recomputed",
                            field="training.recompute_layers")


def _check_experts(s: Scenario) -> None:
    """Megatron's rules on expert parallelism: the expert groups tile the stage's devices, the
    experts divide evenly, and with tensor parallelism the tokens are split by sequence parallelism."""
    ep, etp = s.expert_parallel, s.expert_tensor
    if s.model is None or s.model.moe is None:
        if ep > 1 or s.expert_tensor_parallel is not None:
            key = "expert_parallel" if ep > 1 else "expert_tensor_parallel"
            raise ScenarioError(f"{key} splits the experts of a mixture of experts, and the model has none: add a "
                                "model.moe section or drop it", field=key)
        return
    model, moe = s.model, s.model.moe
    stage = s.tensor_parallel * s.weight_replicas

    def choices() -> str:
        """The expert-parallel sizes that would do with this expert tensor parallelism, for the message."""
        per = stage // etp if stage % etp == 0 else 0
        fits = [n for n in range(1, per + 1) if not per % n and not moe.experts % n]
        return f"; with expert_tensor_parallel {etp}: expert_parallel {', '.join(map(str, fits))}" if fits else ""

    if stage % (ep * etp):
        raise ScenarioError(
            f"expert_parallel x expert_tensor_parallel ({ep} x {etp}) must divide the devices of a stage, tensor x "
            f"context x data parallel ({s.tensor_parallel} x {s.context_parallel} x {s.data_parallel} = {stage}): "
            f"Megatron folds the expert groups into them{choices()}", field="expert_parallel")
    if moe.experts % ep:
        raise ScenarioError(f"expert_parallel ({ep}) must divide model.moe.experts ({moe.experts}): each device "
                            f"holds experts / expert_parallel of them{choices()}", field="expert_parallel")
    for key, width in (("ffn_hidden", moe.ffn_hidden), ("shared_ffn_hidden", moe.shared_ffn)):
        if width % etp:
            raise ScenarioError(f"expert_tensor_parallel ({etp}) must divide model.moe.{key} ({width})",
                                field="expert_tensor_parallel")
    if s.tensor_parallel > 1 and ep > 1 and not s.training.sequence_parallel:
        raise ScenarioError("expert parallelism with tensor parallelism needs training.sequence_parallel: true "
                            "(Megatron refuses it otherwise: each tensor rank dispatches its own tokens)",
                            field="training.sequence_parallel")
    if moe.dense_layers >= model.layers:
        raise ScenarioError(f"model.moe.dense_layers ({moe.dense_layers}) leaves no MoE layer of the "
                            f"{model.layers}; use fewer", field="model.moe.dense_layers")


def _check_hybrid(s: Scenario) -> None:
    """What a hybrid pattern cannot take yet, and how its Mamba layers split over tensor parallelism."""
    model = s.model
    if model is None or model.pattern is None:
        return
    for key, on, fix in (("context_parallel", s.context_parallel > 1, "use context_parallel: 1"),
                         ("training.tp_comm_overlap", s.training.tp_comm_overlap, "drop it")):
        if on:
            raise ScenarioError(f"a hybrid pattern's layers are not priced with {key} yet: {fix}", field=key)
    mb, t = model.mamba, s.tensor_parallel
    if mb is not None and (mb.heads % t or mb.groups % t):
        raise ScenarioError(f"tensor_parallel ({t}) must divide model.mamba's heads ({mb.heads}) and groups "
                            f"({mb.groups}): Megatron splits both over the tensor-parallel devices",
                            field="tensor_parallel")


def _check_delay_wgrad(s: Scenario) -> None:
    if not s.training.delay_wgrad:
        return
    if s.pipeline.schedule != "combined-1f1b":
        raise ScenarioError(f"delays the weight grads under the all-to-alls of Megatron's combined 1F1B, and needs "
                            f"pipeline.schedule: combined-1f1b (here {s.pipeline.schedule!r})",
                            field="training.delay_wgrad")
    if s.model is None or s.model.moe is None or s.expert_parallel * s.expert_tensor <= 1:
        raise ScenarioError("hides a mixture of experts' all-to-alls under the weight grads, and this plan has "
                            "none (a model.moe with expert_parallel > 1): drop it", field="training.delay_wgrad")


def _check_high_precision_layers(s: Scenario) -> None:
    """Layers kept out of FP8 / FP4 need a narrow format and must be layers of the model."""
    first, last = s.training.high_precision_first_layers, s.training.high_precision_last_layers
    if not first and not last:
        return
    key = "training.high_precision_first_layers" if first else "training.high_precision_last_layers"
    if s.training.fp8 is None and s.training.fp4 is None:
        raise ScenarioError("keeps layers out of FP8 / FP4, and neither training.fp8 nor training.fp4 is set: set "
                            "one or drop it", field=key)
    if s.model is not None and first + last > s.model.layers:
        raise ScenarioError(f"keeps the first {first} and the last {last} layers in {s.model.dtype}, more than the "
                            f"model's {s.model.layers}: give at most {s.model.layers} in all", field=key)


def _check_dispatcher(s: Scenario) -> None:
    for key, on in (("moe_dispatcher", s.training.moe_dispatcher != "alltoall"),
                    ("moe_fp8_dispatch", s.training.moe_fp8_dispatch),
                    ("moe_comm_sms", s.training.moe_comm_sms is not None)):
        if on and (s.model is None or s.model.moe is None):
            raise ScenarioError("dispatches a mixture of experts' tokens, and the model has none (model.moe): drop it",
                                field=f"training.{key}")
    if s.training.moe_fp8_dispatch and s.training.fp8 is None:
        raise ScenarioError("sends the tokens in FP8 for FP8 expert GEMMs, and training.fp8 is not set: set a recipe "
                            "(blockwise, as DeepSeek-V3) or drop it", field="training.moe_fp8_dispatch")


#: the cuda_graphs scopes that capture a kind of layer: the model needs one for the scope to mean anything
_GRAPHED_LAYERS = {"moe": "experts (model.moe)", "moe_router": "experts (model.moe)",
                   "moe_preprocess": "experts (model.moe)", "mamba": "Mamba layers (model.pattern's M)"}


def _check_cuda_graphs(s: Scenario) -> None:
    scopes, key = s.training.cuda_graphs, "training.cuda_graphs"
    if len(set(scopes)) < len(scopes):
        raise ScenarioError(f"lists a scope twice: {scopes}; list each once", field=key)
    if "full_iteration" in scopes and len(scopes) > 1:
        raise ScenarioError(f"full_iteration graphs the whole step, the other scopes with it: give [full_iteration] "
                            f"alone (here {scopes})", field=key)
    model = s.model
    for scope in scopes:
        needs = _GRAPHED_LAYERS.get(scope)
        has = model is not None and (model.moe is not None if scope.startswith("moe")
                                     else model.pattern is not None and "M" in model.pattern)
        if needs and not has:
            raise ScenarioError(f"graphs {scope}, and the model has no {needs}: drop {scope}", field=key)
    for flag in ("moe_router_fusion", "fused_grouped_mlp"):
        if getattr(s.training, flag) and (model is None or model.moe is None):
            raise ScenarioError("is a MoE layer's kernel choice, and the model has no experts (model.moe): drop it",
                                field=f"training.{flag}")


def _check_attention_kernel(s: Scenario) -> None:
    tr = s.training
    if tr.attention_kernel != "cudnn" and not tr.flash_attention:
        raise ScenarioError(f"names the fused kernel {tr.attention_kernel}, and training.flash_attention is "
                            "off: set flash_attention: true, or drop attention_kernel", field="training.attention_kernel")
    if not tr.fp8_attention:
        return
    if tr.fp8 is None:
        raise ScenarioError("runs the attention in FP8, which Transformer Engine does under an FP8 recipe: set "
                            "training.fp8, or drop fp8_attention", field="training.fp8_attention")
    if not tr.flash_attention or tr.attention_kernel != "cudnn":
        raise ScenarioError("FP8 attention is cuDNN's fused kernel (Transformer Engine's FusedAttention): set "
                            "flash_attention: true and attention_kernel: cudnn, or drop fp8_attention",
                            field="training.fp8_attention")


def _check_zero(s: Scenario) -> None:
    if s.model is not None and s.training.offload_layers > s.model.layers:
        raise ScenarioError(f"{s.training.offload_layers} is more than model.layers "
                            f"({s.model.layers}); it counts the blocks of each virtual stage whose activations go to "
                            "the host", field="training.offload_layers")
    if s.training.overlap_param_gather and s.training.zero_stage < 1:
        raise ScenarioError("training.overlap_param_gather overlaps ZeRO-1's all-gather of the updated parameters; it "
                            "needs training.zero_stage: 1", field="training.overlap_param_gather")
    if s.training.zero_stage == 2 and s.pipeline.stages > 1:
        raise ScenarioError(
            "ZeRO stage 2 cannot be used with pipeline parallelism (DeepSpeed's pipeline engine refuses it: it "
            "partitions the gradients each micro-batch accumulates into); use 1 (the optimizer states sharded), "
            "or 3 (fully sharded, as Megatron FSDP and torch's FSDP2 run beside a pipeline)",
            field="training.zero_stage",
        )


def _check_partition(s: Scenario) -> None:
    """Explicit layer counts (the only place they are checked): one per virtual stage, summing to
    the layers, at least one each except the first and last (which may hold only the embedding or
    the LM head); otherwise enough layers for the virtual stages (evenly, for ``uniform``)."""
    part = s.pipeline.partition
    p, v = s.pipeline.stages, s.pipeline.chunks
    copies = _copies_of_the_model(s)
    n_virtual = p * v // copies
    what = (f"stages x chunks = {p} x {v} = {n_virtual}" if copies == 1 else
            f"stages x chunks / copies of the model = {p} x {v} / {copies} = {n_virtual}")
    if isinstance(part, list):
        inner = part[1:-1] if n_virtual > 1 else part
        if min(part, default=0) < 0 or min(inner, default=1) < 1:
            raise ScenarioError(
                f"layer counts {part}: every virtual stage needs at least one layer, except the first (which "
                "also holds the embedding) and the last (the LM head), which may have 0",
                field="pipeline.partition",
            )
    if s.model is None or s.costs is not None:
        return
    layers = s.model.layers
    if isinstance(part, list):
        if len(part) != n_virtual:
            raise ScenarioError(
                f"gives {len(part)} layer counts, but {what}; give one count per virtual stage"
                + (" of one copy" if copies > 1 else ""),
                field="pipeline.partition",
            )
        if sum(part) != layers:
            raise ScenarioError(f"layer counts sum to {sum(part)}, but model.layers is {layers}; make them agree",
                                field="pipeline.partition")
    elif layers < n_virtual:
        raise ScenarioError(
            f"model.layers ({layers}) is smaller than {what}; "
            "every virtual stage needs at least one layer: use fewer stages or chunks",
            field="pipeline.stages",
        )
    elif part == "uniform" and layers % n_virtual:
        raise ScenarioError(
            f"model.layers ({layers}) is not divisible by {what} "
            "for a uniform partition; use partition: balanced, explicit layer counts, or another stage count",
            field="pipeline.partition",
        )


def _copies_of_the_model(s: Scenario) -> int:
    """The copies of the model the schedule's virtual stages form (DualPipe's two); 1 where the
    schedule cannot be read (its own check says why)."""
    try:
        return schedules.describe(s.pipeline.schedule).pipes
    except PpsimError:
        return 1


def _check_costs(s: Scenario) -> None:
    """Explicit costs: one number or one per stage (per boundary for p2p_ms); weight grad within backward."""
    if s.costs is None:
        return
    p = s.pipeline.stages
    for name in CostsSpec.model_fields:
        value = getattr(s.costs, name)
        allowed = {p, p - 1} if name == "p2p_ms" else {p}
        if isinstance(value, list) and len(value) not in allowed:
            want = f"{p} (or {p - 1}, one per stage boundary)" if name == "p2p_ms" else str(p)
            raise ScenarioError(f"has {len(value)} values but there are {p} stages; give one number or {want} values",
                                field=f"costs.{name}")
    backward, weight_grad = per_stage(s.costs.backward_ms, p), per_stage(s.costs.weight_grad_ms, p)
    for i, (b, w) in enumerate(zip(backward, weight_grad)):
        if w > b:
            raise ScenarioError(
                f"weight_grad_ms ({w}) of stage {i} exceeds backward_ms ({b}); it is the part of backward that is "
                "weight grad",
                field="costs.weight_grad_ms",
            )


def per_stage(value: PerStage, p: int) -> list[float]:
    """A cost given as one number or one value per stage, as a list of p values."""
    return [float(x) for x in value] if isinstance(value, list) else [float(value)] * p
