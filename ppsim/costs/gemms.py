"""The matmuls of a layer, one pass at a time, with their shapes: what a per-GEMM efficiency curve prices.

A GEMM multiplies an (m x n) by an (n x k) matrix: 2mnk FLOPs. Per transformer block and micro-batch
(T = b x s tokens, width h, MLP width f, a heads of d = h / a, kv heads g = kv / a of them, per device
of a t-way tensor-parallel group, as Megatron-LM splits them):

- forward: QKV (T x h) x (h x (1 + 2g)h/t); attention output (T x h/t) x (h/t x h); the MLP's
  up projection(s) (T x h) x (h x f/t), two of them for SwiGLU; its down projection (T x f/t) x (f/t x h);
  and per head (b x a / t of them) the scores (s x d) x (d x s) and the context (s x s) x (s x d),
  every score computed and the causal mask applied after; a FlashAttention kernel skips the tiles
  above the diagonal, half of them: s / 2 keys per query on average; through a sliding window of w
  keys before each query it runs only the tiles of the band (:func:`attended_keys`);
- input grad: each dense GEMM's data gradient (T x out) x (out x in), the same FLOPs; the attention
  matmuls twice (the gradient of both operands of each);
- weight grad: each dense GEMM's weight gradient (in x T) x (T x out);
- what the backward runs again (recomputation, FlashAttention's scores) goes with the input grad.
- the LM head: (T x h) x (h x V/t), its data and weight gradients likewise.

The FLOPs of each pass's list equal the layer's FLOPs for that pass (:mod:`ppsim.costs.layers`;
tested). The analytic cost model prices each GEMM at the device's curve (``Device.gemm_efficiency``
by its FLOPs, ``Device.attention_efficiency`` by its head dimension).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


def attended_keys(keys: int, window: int | None = None) -> float:
    """The keys a causal FlashAttention kernel runs per query on average, of a sequence of ``keys``:
    half of them, or through a sliding ``window`` (each query sees itself and the w keys before
    it, W = w + 1 of them, fewer for the first W queries) W - W^2 / (2 keys), which is keys / 2
    when the window spans the sequence."""
    if window is None or window + 1 >= keys:
        return keys / 2
    seen = window + 1
    return seen - seen * seen / (2 * keys)


@dataclass(frozen=True, slots=True)
class Gemm:
    """``count`` GEMMs of (m x n) x (n x k); ``head_dim`` > 0 marks the attention's score and context
    matmuls (one per head), priced by the device's attention curve (or FlashAttention's kernel, by
    its head dim and the ``keys`` each query attends on average)."""

    m: float
    n: float
    k: float
    count: float = 1.0
    head_dim: float = 0.0
    linear: bool = False  #: one of a block's linear layers (what FP8 training multiplies in FP8)
    #: one kernel runs all ``count`` of them (a batched matmul: Mamba-2's chunked scan), so a curve
    #: prices the batch's FLOPs, as it does one call's: its small sizes are a call's fixed cost
    batched: bool = False
    keys: float = 0.0  #: an attention matmul's keys per query (the causal half, the window's band)
    #: a linear layer kept in the model's dtype under FP8 / FP4 (training.high_precision_first_layers)
    wide: bool = False
    #: a windowed attention matmul's keys per query without its window (every key's causal half):
    #: what a kernel that runs the whole triangle computes (FusedAttention.window_backward); 0: not windowed
    causal_keys: float = 0.0

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.count

    def times(self, count: float) -> Gemm:
        # the constructor, not dataclasses.replace: a stage's GEMMs are scaled hundreds of thousands
        # of times in a search
        return Gemm(self.m, self.n, self.k, self.count * count, self.head_dim, self.linear, self.batched, self.keys,
                    self.wide, self.causal_keys)


@dataclass(frozen=True)
class PassGemms:
    """The GEMMs of one layer (or stage) per micro-batch, pass by pass."""

    forward: tuple[Gemm, ...] = ()
    input_grad: tuple[Gemm, ...] = ()
    weight_grad: tuple[Gemm, ...] = ()

    def times(self, count: float) -> PassGemms:
        return PassGemms(*(tuple(g.times(count) for g in part) for part in (self.forward, self.input_grad,
                                                                             self.weight_grad)))

    def widened(self) -> PassGemms:
        """The same GEMMs, the linear layers' kept in the model's dtype (not FP8 / FP4)."""
        return PassGemms(*(tuple(replace(g, wide=True) if g.linear else g for g in part)
                           for part in (self.forward, self.input_grad, self.weight_grad)))

    def __add__(self, other: PassGemms) -> PassGemms:
        return PassGemms(self.forward + other.forward, self.input_grad + other.input_grad,
                         self.weight_grad + other.weight_grad)


def weight_grad_output_values(gemms: PassGemms, linear: bool | None = None) -> float:
    """The output-gradient values a layer's weight grads read, per micro-batch: each weight GEMM
    (in x T) x (T x out) reads the T x out gradient of its forward's output, which a split backward
    keeps from the input grad, which makes it, to the weight grad. ``linear``: only the block's
    linear layers' GEMMs (True), only the others' (False)."""
    return sum(g.n * g.k * g.count for g in gemms.weight_grad if linear is None or g.linear is linear)


def weight_grad_input_values(gemms: PassGemms, linear: bool | None = None) -> float:
    """The input values a layer's weight grads read, per micro-batch: each weight GEMM's T x in
    input of its forward (what a weight-gradient store keeps for it); ``linear`` as above."""
    return sum(g.m * g.n * g.count for g in gemms.weight_grad if linear is None or g.linear is linear)


def block_gemms(seq_len: int, micro_batch: int, hidden: int, heads: int, kv_heads: int, ffn_hidden: float, *,
                swiglu: bool = False, tensor_parallel: int = 1, recompute: str = "none",
                flash_attention: bool = False, kv_len: int | None = None, mlp: bool = True,
                head_dim: int | None = None, attention_linears: list[tuple[float, float]] | None = None,
                score_dims: tuple[float, float] | None = None, window: int | None = None,
                attention: bool = True) -> PassGemms:
    """A transformer block's GEMMs (see the module docstring); ``kv_len``: the keys each query sees
    when it is not ``seq_len`` (context parallelism: a rank's queries, every key); ``window``: a
    sliding window's keys before each query (FlashAttention runs only its band); without
    ``attention`` only the MLP's (a hybrid model's MLP layer); without ``mlp``
    only the attention's (a mixture of experts adds its own: :mod:`ppsim.costs.moe`);
    ``attention_linears`` and ``score_dims`` (a head's query/key and value widths): multi-head
    latent attention's projections and heads (:func:`ppsim.costs.layers.mla_linears`)."""
    s, b, h, a, f, t = seq_len, micro_batch, hidden, heads, ffn_hidden, tensor_parallel
    keys = kv_len or s
    tokens = b * s
    g = kv_heads / a
    d = head_dim or h / a
    q = a * d  # the queries' width
    # (in, out) of each dense weight, per tensor rank
    weights = (list(attention_linears) if attention_linears else [(h, (1 + 2 * g) * q / t), (q / t, h)]
               ) if attention else []
    if mlp:
        weights += [(h, f / t)] * (2 if swiglu else 1) + [(f / t, h)]
    dense = tuple(Gemm(tokens, i, o, linear=True) for i, o in weights)
    per_head = b * a / t
    # a causal FlashAttention kernel works on half the keys on average (the tiles it skips), or the window's band
    keys_run = attended_keys(keys, window) if flash_attention else keys
    dk, dv = score_dims or (d, d)
    # a fused kernel runs both matmuls of a head: its measured figures are by the mean of their widths
    kernel_dk, kernel_dv = ((dk + dv) / 2,) * 2 if flash_attention else (dk, dv)
    causal = attended_keys(keys) if flash_attention and keys_run < attended_keys(keys) else 0.0
    scores = Gemm(s, dk, keys_run, per_head, head_dim=kernel_dk, keys=keys_run, causal_keys=causal)
    context = Gemm(s, keys_run, dv, per_head, head_dim=kernel_dv, keys=keys_run, causal_keys=causal)
    core = (scores, context) if attention else ()
    if flash_attention and attention:  # the backward recomputes the scores; full recompute runs the forward again
        again = (dense + core if recompute == "full" else ()) + (scores,)
    else:
        again = {"none": (), "selective": core, "full": dense + core}[recompute]
    return PassGemms(
        forward=dense + core,
        input_grad=tuple(Gemm(tokens, o, i, linear=True) for i, o in weights) + tuple(x.times(2) for x in core)
        + again,
        weight_grad=tuple(Gemm(i, tokens, o, linear=True) for i, o in weights),
    )


def head_gemms(seq_len: int, micro_batch: int, hidden: int, vocab: int, tensor_parallel: int = 1) -> PassGemms:
    """The LM head's logits GEMM, its data and weight gradients."""
    tokens, v = seq_len * micro_batch, vocab / tensor_parallel
    return PassGemms(forward=(Gemm(tokens, hidden, v),), input_grad=(Gemm(tokens, v, hidden),),
                     weight_grad=(Gemm(hidden, tokens, v),))
