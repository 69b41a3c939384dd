"""The kernels the host launches one at a time for a layer's passes, and the time that takes.

One host thread queues a rank's kernels: Python, PyTorch's dispatcher and Transformer Engine's
bookkeeping, then the launch. The GPU runs them no faster than they are queued, so where a pass's
kernels are short (a few tokens per expert, small widths) the host's time to queue them, not the
GPU's to run them, sets the pass's time. A dropless MoE layer's forward makes the host wait for the
GPU once (the tokens per expert copied to the host before the dispatch), so the host cannot queue
far ahead of the GPU: ppsim prices each pass of a stage's micro-batch at the longer of the two
(:func:`launch_wait`, applied in :mod:`ppsim.costs.analytic`).

Counts per layer and micro-batch, forward and backward, as Megatron-Core's modules run under
Transformer Engine (``q``: the launches that quantize one operand under FP8 / FP4, :data:`QUANTIZE`;
weights are quantized once a step, not per micro-batch):

- a linear layer: its GEMM and its input's quantize forward (1 + q), the input and weight grads and
  the output gradient's quantize backward (2 + q); a tensor-parallel linear adds its collective;
- a norm (1, 2), a residual add (1, 1), rotary embeddings of queries and keys (2, 2), the fused
  attention kernel (1, 3: backward with its pre- and post-processing), an activation (1, 1);
- multi-head latent attention: five linear layers, two more norms, and two copies that split and
  join the rotary part;
- a MoE layer's router with its score function, top-k and auxiliary loss: 72 kernels forward, 31
  fused (``training.moe_router_fusion``; DeepSeek-V3's GB200 report, counted in a forward's
  timeline), as many backward (its autograd's); the dispatcher's preprocessing (2, 0), permute,
  dispatch, combine and unpermute (4, 4);
- the routed experts through Transformer Engine's GroupedLinear: one GEMM per local expert and
  projection (2E forward, 4E backward) and a quantize per local expert and operand (fused into one
  under delayed scaling), with the activation between; fused into a handful of kernels by Transformer
  Engine's fused grouped MLP (``training.fused_grouped_mlp``: (4, 8));
- a Mamba-2 mixer: its two linear layers, the causal convolution, the SSD scan's five kernels (ten
  backward), the gated norm, and three copies that split in_proj's output.

CUDA graphs (``training.cuda_graphs``, Megatron's ``--cuda-graph-scope``): a graphed module's kernels
are replayed by one launch each pass; ``full_iteration`` graphs the whole step, leaving none.
A recomputed forward's launches run again in the backward: the whole layer's under full
recomputation, each recomputed module's under selective (an eager one's: a graphed module replays
inside its graph). Not counted: the embedding's and the loss's few kernels, the optimizer's, the
pipeline's sends.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ppsim.costs.layers import LayerCost
from ppsim.costs.low_precision import LowPrecision
from ppsim.costs.recompute import selective_modules
from ppsim.inputs.hardware import Device
from ppsim.inputs.scenario import ModelSpec, Scenario

#: the launches that quantize one operand, by recipe: current scaling's amax, scale and cast
#: (Transformer Engine's quantizer), one fused kernel for the others
QUANTIZE: dict[str, int] = {"tensorwise": 3, "delayed": 1, "blockwise": 1, "mxfp8": 1, "nvfp4": 1}
ROUTER = (72.0, 72.0)
ROUTER_FUSED = (31.0, 31.0)
PREPROCESS = (2.0, 0.0)
PERMUTE_AND_EXCHANGE = (4.0, 4.0)
FUSED_GROUPED_MLP = (4.0, 8.0)
NORM, RESIDUAL, ROPE, CORE_ATTENTION, ACTIVATION = (1.0, 2.0), (1.0, 1.0), (2.0, 2.0), (1.0, 3.0), (1.0, 1.0)
SSD_SCAN = (5.0, 10.0)
CONVOLUTION = (1.0, 1.0)
COPIES_MLA, COPIES_MAMBA = 2.0, 3.0


@dataclass(frozen=True)
class Launches:
    """Kernels launched one by one for one pass each way of a layer, per micro-batch."""

    forward: float = 0.0
    backward: float = 0.0

    def __add__(self, other: Launches) -> Launches:
        return Launches(self.forward + other.forward, self.backward + other.backward)

    def times(self, n: float) -> Launches:
        return Launches(self.forward * n, self.backward * n)


def _of(*parts: tuple[float, float]) -> Launches:
    return Launches(sum(f for f, _ in parts), sum(b for _, b in parts))


def linear(q: int, collective: bool = False) -> tuple[float, float]:
    """One linear layer's launches, its operand quantized by ``q``; with its tensor-parallel collective."""
    c = 1.0 if collective else 0.0
    return 1 + q + c, 2 + q + c


def quantize(precision: LowPrecision | None) -> int:
    """The launches that quantize one operand in ``precision`` (0 in 16 bits)."""
    return QUANTIZE[precision.recipe] if precision is not None else 0


def attention_launches(model: ModelSpec, q: int, tensor_parallel: int) -> Launches:
    """An attention half: its norm, linear layers, rotary embeddings, fused kernel and residual."""
    tp = tensor_parallel > 1
    if model.mla is not None:  # q down and up, kv down and up (their norms between), the output projection
        linears = [linear(q, tp)] + [linear(q)] * 3 + [linear(q, tp)]
        return _of(NORM, NORM, NORM, *linears, ROPE, (COPIES_MLA, COPIES_MLA), CORE_ATTENTION, RESIDUAL)
    return _of(NORM, linear(q, tp), ROPE, CORE_ATTENTION, linear(q, tp), RESIDUAL)


def mlp_launches(q: int, tensor_parallel: int) -> Launches:
    """A dense MLP half: norm, up projection, activation, down projection, residual."""
    tp = tensor_parallel > 1
    return _of(NORM, linear(q, tp), ACTIVATION, linear(q, tp), RESIDUAL)


def expert_launches(s: Scenario, model: ModelSpec, precision: LowPrecision | None
                    ) -> tuple[Launches, Launches, Launches]:
    """A MoE half as (its router, the dispatcher's preprocessing, the rest: norm, permute and
    exchange, routed and shared experts, a latent MoE's projections, residual)."""
    assert model.moe is not None
    training, q = s.training, quantize(precision)
    router = Launches(*(ROUTER_FUSED if training.moe_router_fusion else ROUTER))
    if training.fused_grouped_mlp:
        routed = Launches(*FUSED_GROUPED_MLP)
    else:
        local = model.moe.experts / s.expert_parallel
        casts = 2.0 if precision is not None and precision.recipe == "delayed" else 2 * local * q
        routed = Launches(2 * local + 1 + casts, 4 * local + 1 + casts)
    shared = _of(linear(q), ACTIVATION, linear(q)) if model.moe.shared_experts else Launches()
    latent = _of(linear(q), linear(q)) if model.moe.latent else Launches()
    return router, Launches(*PREPROCESS), _of(NORM, PERMUTE_AND_EXCHANGE, RESIDUAL) + routed + shared + latent


def mamba_launches(q: int, tensor_parallel: int) -> Launches:
    """A Mamba-2 mixer: norm, in_proj, convolution, SSD scan, gated norm, out_proj, residual, copies."""
    tp = tensor_parallel > 1
    return _of(NORM, linear(q, tp), CONVOLUTION, SSD_SCAN, NORM, linear(q, tp), RESIDUAL,
               (COPIES_MAMBA, COPIES_MAMBA))


def layer_launches(s: Scenario, precision: LowPrecision | None, recompute: str, *, attention: bool = False,
                   mlp: str | None = None, mamba: bool = False) -> Launches:
    """One layer's launches, graphed as ``training.cuda_graphs`` says: its ``attention`` half, its
    ``mlp`` half (``dense`` or ``moe``), or a Mamba mixer; its linear layers in ``precision``; its
    backward launches again what it recomputes (:func:`recomputed_launches`)."""
    model = s.model
    assert model is not None
    scopes = set(s.training.cuda_graphs)
    if "full_iteration" in scopes:
        return Launches()
    t, q = s.tensor_parallel, quantize(precision)

    def graphed(launches: Launches, scope: str) -> Launches:
        if scope not in scopes:
            return launches
        return Launches(float(launches.forward > 0), float(launches.backward > 0))

    total = graphed(mamba_launches(q, t), "mamba") if mamba else Launches()
    if attention:
        total += graphed(attention_launches(model, q, t), "attn")
    if mlp == "moe":
        router, preprocess, rest = expert_launches(s, model, precision)
        total += graphed(router, "moe_router") + graphed(preprocess, "moe_preprocess") + graphed(rest, "moe")
    elif mlp == "dense":
        total += graphed(mlp_launches(q, t), "mlp")
    if recompute == "full":
        return Launches(total.forward, total.backward + total.forward)
    again = recomputed_launches(s, precision, selective_modules(recompute, s.training.recompute_modules),
                                attention=attention, mlp=mlp, mamba=mamba)
    return Launches(total.forward, total.backward + again)


def recomputed_launches(s: Scenario, precision: LowPrecision | None, modules: frozenset[str], *, attention: bool,
                        mlp: str | None, mamba: bool) -> float:
    """What selective recomputation of ``modules`` launches again in a layer's backward (eager
    modules only: a graphed one replays inside its graph): each module's forward launches."""
    model, scopes, q = s.model, set(s.training.cuda_graphs), quantize(precision)
    assert model is not None
    again = 0.0
    if attention and "attn" not in scopes:
        mla = model.mla is not None
        again += CORE_ATTENTION[0] * ("core_attn" in modules)
        again += NORM[0] * (3 if mla else 1) * ("layernorm" in modules)
        again += 2 * linear(q)[0] * (mla and "mla_up_proj" in modules)
    if mlp == "dense" and "mlp" not in scopes:
        again += mlp_launches(q, s.tensor_parallel).forward if "mlp" in modules else NORM[0] * ("layernorm" in modules)
    if mlp == "moe" and "moe" not in scopes:
        assert model.moe is not None
        if "moe" in modules:
            router, preprocess, rest = expert_launches(s, model, precision)
            again += (router + preprocess + rest).forward
        else:
            again += NORM[0] * ("layernorm" in modules) + ACTIVATION[0] * ("moe_act" in modules)
            if "shared_experts" in modules and model.moe.shared_experts:
                again += 2 * linear(q)[0] + ACTIVATION[0]
    if mamba and "mamba" not in scopes:
        again += 2 * NORM[0] * ("layernorm" in modules)
    return again


def launched(layer: LayerCost, launches: Launches) -> LayerCost:
    """``layer`` with ``launches``."""
    return replace(layer, forward_launches=launches.forward, backward_launches=launches.backward)


def launch_time_us(s: Scenario, device: Device) -> float | None:
    """The host's microseconds per launch: ``hardware.launch_us`` where the scenario gives it, else
    the device's measured figure (None: not known, launches not priced)."""
    if s.hardware.launch_us is not None:
        return s.hardware.launch_us
    return device.launch.us if device.launch else None


def launch_wait(launches: float, launch_us: float | None, gpu_ms: float) -> float:
    """How long a pass of ``gpu_ms`` on the GPU waits for the host to launch its ``launches``
    kernels at ``launch_us`` each: the host's time beyond the GPU's (0 where the launch time is
    not known)."""
    host_ms = launches * launch_us / 1e3 if launch_us else 0.0
    return max(0.0, host_ms - gpu_ms)
