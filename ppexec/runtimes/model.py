"""A real network built from a ppsim Scenario, as layers a DeepSpeed PipelineModule can split.

Layers: token embedding (and a learned position table, unless positions are rotary),
``model.layers`` pre-norm transformer blocks (causal self-attention, grouped-query where the model
has fewer KV heads; a GELU MLP with LayerNorms and biases, GPT-style, or a SwiGLU MLP with RMSNorms
and no biases, Llama-style), final LayerNorm + LM head. Recomputation as ppsim models it:
``full`` is DeepSpeed's own (``activation_checkpoint_interval`` 1 over the blocks, set up by the
worker); ``selective`` checkpoints each block's attention core (QK^T, softmax, AV) as Megatron does,
which DeepSpeed has no switch for, so the block does it itself. Every layer initialises its weights from
its own seed, so a layer has the same weights whether it is built on a pipeline stage or in one
process, which is what the parity checks rely on. Data is synthetic tokens drawn from a seed.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ppexec.runtimes.experts import ExpertGroups, MoEMLP
from ppexec.runtimes.tensor_parallel import TPGroup, copy_to_group, reduce_from_group, shard
from ppexec.runtimes.weights import init_weights
from ppsim.api import ModelSpec

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

#: forward passes run in this process, recomputed ones included; the worker records them per step,
#: which shows that recomputation really ran (a block's forward runs twice with ``full``)
FORWARDS: dict[str, int] = {"block": 0, "attention_core": 0}


class Embedding(nn.Module):
    """Token embeddings, and a learned position table unless the model's positions are rotary."""

    def __init__(self, spec: ModelSpec, seed: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(spec.vocab, spec.hidden)
        self.positions = nn.Embedding(spec.seq_len, spec.hidden) if spec.positions == "learned" else None
        init_weights(self, seed)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.positions is None:  # rotary positions: each block turns its queries and keys
            return self.tokens(ids)
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.tokens(ids) + self.positions(pos)[None]


class Block(nn.Module):
    """A pre-norm transformer block: causal self-attention and an MLP, both residual. GPT-style
    (LayerNorms, biases, a GELU MLP) or, with ``mlp: swiglu``, Llama-style (RMSNorms, no biases,
    a SwiGLU MLP); grouped-query attention with ``kv_heads``, heads of ``head_dim``, rotary
    positions with ``positions: rope``, as ppsim counts the parameters of each. ``selective``: the
    attention core keeps no activations and reruns in the backward. With a tensor-parallel group
    ``tp`` (GPT-style multi-head blocks) the block holds its rank's heads and MLP units (see
    ppexec/tensor_parallel.py), with the weights the whole block would have, sliced."""

    def __init__(self, spec: ModelSpec, seed: int, selective: bool = False, tp: TPGroup | None = None,
                 moe: bool = False, experts: ExpertGroups | None = None, fused: bool = True) -> None:
        super().__init__()
        self.fused = fused  #: the attention core as one fused kernel (SDPA), or its scores kept (unfused)
        h, t = spec.hidden, tp.size if tp else 1
        if spec.heads % t or spec.ffn % t or spec.kv % t:
            raise ValueError(f"tensor_parallel {t} must divide the heads ({spec.heads}), the KV heads ({spec.kv}) and "
                             f"the MLP width ({spec.ffn})")
        if moe and tp is not None:
            raise ValueError("ppexec's MoE layers run without tensor parallelism")
        self.llama = spec.mlp == "swiglu"
        self.rope = spec.positions == "rope"
        self.heads, self.kv_heads, self.head_dim = spec.heads // t, spec.kv // t, spec.head_width
        self.selective = selective
        self.tp = tp
        norm = (lambda: RMSNorm(h)) if self.llama else (lambda: nn.LayerNorm(h))
        bias = not self.llama
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim  # this rank's widths
        self.widths = (q, kv, kv)
        self.norm1 = norm()
        self.qkv = nn.Linear(h, q + 2 * kv, bias=bias)
        self.proj = nn.Linear(q, h, bias=bias)
        self.norm2 = norm()
        self.moe: MoEMLP | None = None
        if not moe and self.llama:
            self.gate = nn.Linear(h, spec.ffn // t, bias=False)
            self.up = nn.Linear(h, spec.ffn // t, bias=False)
            self.down = nn.Linear(spec.ffn // t, h, bias=False)
        elif not moe:
            self.fc1 = nn.Linear(h, spec.ffn // t)
            self.fc2 = nn.Linear(spec.ffn // t, h)
        if tp is None:
            init_weights(self, seed)
            if moe:  # its own weights: each expert from a seed of its own (see ppexec/runtimes/experts.py)
                self.moe = MoEMLP(spec, seed, experts)
        else:  # the whole block's weights, drawn as in one process, then this rank's slices
            whole = Block(spec, seed).state_dict()
            with torch.no_grad():
                for name, param in self.named_parameters():
                    param.copy_(shard(name, whole[name], tp.rank, tp.size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        FORWARDS["block"] += 1
        b, s, h = x.shape
        q, k, v = self.qkv(copy_to_group(self.norm1(x), self.tp)).split(self.widths, dim=-1)
        q = q.reshape(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = (t.reshape(b, s, self.kv_heads, self.head_dim).transpose(1, 2) for t in (k, v))
        if self.rope:  # turned copies of q and k; v copied out too, so the projection's output is freed
            q, k, v = Rotary.apply(q), Rotary.apply(k), v.contiguous()
        core = _attention_core if self.fused else _unfused_attention_core
        if self.selective and torch.is_grad_enabled():
            att = checkpoint(core, q, k, v, use_reentrant=False)
        else:
            att = core(q, k, v)
        out = F.linear(att.transpose(1, 2).reshape(b, s, self.widths[0]), self.proj.weight)
        x = x + reduce_from_group(out, self.tp)
        if self.proj.bias is not None:
            x = x + self.proj.bias
        if self.moe is not None:
            return x + self.moe(self.norm2(x))
        if self.llama:
            y = self.norm2(x)
            return x + self.down(SwiGLU.apply(self.gate(y), self.up(y)))
        hidden = F.gelu(self.fc1(copy_to_group(self.norm2(x), self.tp)))
        return x + reduce_from_group(F.linear(hidden, self.fc2.weight), self.tp) + self.fc2.bias


def _angles(s: int, d: int, device: torch.device, dtype: torch.dtype, base: float = 10000.0
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's angle for each pair of halves of a d-wide head (s x d)."""
    inv = 1.0 / base ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d)
    angles = torch.outer(torch.arange(s, device=device, dtype=torch.float32), inv)
    return tuple(torch.cat([f, f], dim=-1).to(dtype) for f in (angles.cos(), angles.sin()))  # type: ignore[return-value]


def _turn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class Rotary(torch.autograd.Function):
    """Rotary position embedding of (b, heads, s, d) queries or keys (Su et al.), as a fused kernel
    runs it: nothing kept for the backward, which turns the gradient back by the same angles."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        cos, sin = _angles(x.shape[-2], x.shape[-1], x.device, x.dtype)
        return _turn(x, cos, sin)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        cos, sin = _angles(grad.shape[-2], grad.shape[-1], grad.device, grad.dtype)
        return _turn(grad, cos, -sin)


class RMSNorm(nn.Module):
    """x / rms(x) x weight, as a fused kernel runs it (Transformer Engine's, Apex's): the input and
    each token's inverse RMS kept for the backward, nothing else (torch's own composite keeps twice that)."""

    def __init__(self, width: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RMSNorm.apply(x, self.weight, self.eps)


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        wide = torch.promote_types(x.dtype, torch.float32)  # 16-bit inputs in fp32
        rstd = torch.rsqrt(x.to(wide).pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (x.to(wide) * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, weight, rstd = ctx.saved_tensors
        wide = rstd.dtype
        normed = x.to(wide) * rstd
        g = grad.to(wide) * weight.to(wide)
        dx = rstd * (g - normed * (g * normed).mean(-1, keepdim=True))
        dw = (grad.to(wide) * normed).reshape(-1, x.shape[-1]).sum(0)
        return dx.to(x.dtype), dw.to(weight.dtype), None


class SwiGLU(torch.autograd.Function):
    """silu(gate) x up, as Megatron's fused kernel runs it: only its two inputs kept, the silu
    recomputed in the backward (the 2 of ppsim's 3 f-wide values a token; the product is the third,
    kept by the down projection)."""

    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gate, up = ctx.saved_tensors
        sig = torch.sigmoid(gate)
        silu = gate * sig
        return grad * up * sig * (1 + gate * (1 - sig)), grad * silu


def _attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(QK^T / sqrt(d)) V, causal: the part selective recomputation reruns; grouped-query
    keys and values serve several query heads each."""
    FORWARDS["attention_core"] += 1
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1])


def _unfused_attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The same product as separate kernels, as without FlashAttention: the softmax's b x a x s x s
    probabilities kept for the backward (the scores ppsim counts when ``flash_attention`` is off)."""
    FORWARDS["attention_core"] += 1
    if k.shape[1] != q.shape[1]:
        k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k, v))
    s = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    causal = torch.ones(s, s, dtype=torch.bool, device=q.device).triu_(1)
    return torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1) @ v


class Head(nn.Module):
    """Final LayerNorm and the LM head (logits over the vocabulary)."""

    def __init__(self, spec: ModelSpec, seed: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(spec.hidden)
        self.lm_head = nn.Linear(spec.hidden, spec.vocab, bias=False)
        init_weights(self, seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(x))


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (computed in fp32)."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))


def layer_factories(spec: ModelSpec, seed: int, recompute: str = "none", tp: TPGroup | None = None,
                    experts: ExpertGroups | None = None, fused: bool = True
                    ) -> list[tuple[type[nn.Module], tuple[object, ...]]]:
    """(class, args) of every layer in order: embedding, blocks, head; layer i is seeded seed + i.
    With ``recompute`` selective the blocks checkpoint their attention core (``full`` is the
    pipeline module's business: see the module docstring); with ``tp`` they hold this rank's
    slices (the embedding and the head are replicated); the MoE blocks of a ``model.moe`` hold
    this rank's experts (``experts``: its expert-parallel groups; None: every expert); ``fused``:
    the attention core as one kernel (what a run uses), or unfused (what ``flash_attention: false``
    describes, for ``ppexec rank``'s memory)."""
    classes: list[type[nn.Module]] = [Embedding] + [Block] * spec.layers + [Head]
    selective = recompute == "selective"

    def moe(block: int) -> bool:
        return spec.moe is not None and spec.moe.is_moe(block)

    return [(cls, (spec, seed + i, selective, tp, moe(i - 1), experts, fused) if cls is Block else (spec, seed + i))
            for i, cls in enumerate(classes)]


def stage_boundaries(blocks_per_stage: list[int]) -> list[int]:
    """DeepSpeed ``parts`` (layer index where each stage starts, plus the end) for block counts,
    the embedding going to the first stage and the head to the last: what ``ppsim export --to
    deepspeed`` writes."""
    from ppsim.api import deepspeed_parts

    return deepspeed_parts(blocks_per_stage)


def optimizer_state(optimizer: Any) -> dict[str, Any]:
    """What an optimizer holds: its class and the elements of its state tensors (Adam's two
    moments), which ZeRO-1 divides among the data-parallel ranks."""
    # DeepSpeed's wrappers keep the torch optimizer in .optimizer, torch's ZeroRedundancyOptimizer in .optim
    inner = getattr(optimizer, "optimizer", None) or getattr(optimizer, "optim", optimizer)
    elements = sum(t.numel() for st in inner.state.values() for t in st.values() if torch.is_tensor(t) and t.dim() > 0)
    return {"class": type(optimizer).__name__, "state_elements": int(elements)}


def reference_model(spec: ModelSpec, seed: int) -> nn.Sequential:
    """The whole network in one process, with the same weights as the pipeline's stages."""
    return nn.Sequential(*(cls(*args) for cls, args in layer_factories(spec, seed)))


def synthetic_batch(spec: ModelSpec, micro_batch: int, seed: int, step: int, replica: int, microbatch: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and next-token labels of one micro-batch, a pure function of its coordinates."""
    g = torch.Generator().manual_seed(hash((seed, step, replica, microbatch)) & 0x7FFF_FFFF)
    tokens = torch.randint(spec.vocab, (micro_batch, spec.seq_len + 1), generator=g)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def parameter_count(spec: ModelSpec) -> int:
    """Parameters of the whole network (embedding, blocks, head): ppsim's count of the same layers."""
    from ppsim.api import ExpertShard, gpt_layers

    emb, block, head = gpt_layers(spec, 1)
    if spec.moe is None:
        return emb.params + spec.layers * block.params + head.params
    moe_block = gpt_layers(spec, 1, experts=ExpertShard(spec.moe))[1]
    moe_blocks = spec.moe.moe_layers(spec.layers)
    return emb.params + (spec.layers - moe_blocks) * block.params + moe_blocks * moe_block.params + head.params
