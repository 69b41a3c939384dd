"""A mixture of experts in place of a block's MLP (``model.moe``): what one device holds and runs of
a MoE layer per micro-batch, as Megatron-Core lays it out.

The layout: a stage's t x cp x d devices (tensor, context, data parallel) are tiled a second way for
the experts, ETP x EP x EDP (expert tensor parallelism, default t; expert parallelism; the expert
data-parallel replicas that hold the same experts). Each device holds E / EP of the E routed
experts, each split ETP ways, the shared experts split t ways like a dense MLP, and the router whole.

Per MoE block and micro-batch, a device has T = b s / t tokens (s / cp of each sequence; split t
ways by sequence parallelism, which expert parallelism with t > 1 needs), each sent to k experts:

- the router: a (T x h) x (h x E) GEMM in each pass;
- dispatch: an all-to-all over the EP group of the T x k token copies of h values, a device sending
  (EP - 1) / EP of them and receiving as many; combine sends them back. The forward runs both, the
  backward both again in reverse (and a fully recomputed forward both once more). The busiest rank
  (``skew``: its routed tokens over the mean, given, or found from a seeded draw of the experts'
  loads: :func:`routing_skew`) receives skew times as much, and its link sets the pace;
- the experts: on average a device's experts run T x k token copies (with ETP, ETP times the
  tokens at 1 / ETP of the width: the same FLOPs); the busiest rank skew x T x k, and it sets the
  layer's time. In FLOPs, activations and elementwise traffic that is a dense MLP of width
  k x skew x f_e (f_e: one expert's width) over the device's tokens, plus the shared experts
  (n_s x f_s); as GEMMs, grouped: one per local expert of (skew x T x k x ETP / (E / EP)) tokens;
- permute and unpermute: each token copy written to and read from its expert's buffer on the way
  out and back (HBM work: 4 k x skew T h values forward, twice that backward); NCCL's all-to-all
  dispatcher (Megatron's ``alltoall``) permutes twice each way where a device holds more than one
  expert: the global permute into per-device order before the all-to-all, and the sort of the
  received chunks by local expert after it (``sort_chunks_by_idxs``); DeepEP's and HybridEP's
  kernels gather the tokens themselves, leaving the local permute;
- held for the backward: besides the dense-MLP equivalent, the permuted copies' inputs
  ((k x skew - 1) T h values beyond the block's own input) and the router's probabilities (fp32).

A latent MoE (``moe.latent`` L: Nemotron 3 Super's and Ultra's) projects each token from h to L
before the dispatch and back after the combine (two linear layers, whole on every tensor rank: 2 x
2 T h L FLOPs a pass); its routed experts work in L (weights L x f_e), so the all-to-alls, the
permutation and the copies the experts keep are L wide; the router and the shared experts stay at h.

The experts' parameters are sharded and their gradients reduced over the EDP replicas (not the
stage's d x cp); :func:`reduced_params` gives a one-group reduction of a stage's parameters the
same ring traffic per device. Tensor parallelism's collectives: a MoE block keeps the attention's
(half a dense block's) and the shared experts' (the other half), not the routed experts' (their
tokens move by the all-to-all); with ETP > 1 the dispatch all-gathers each device's dispatched
copies over its ETP group and the combine reduce-scatters them (Megatron's dispatcher), priced
with the all-to-alls (:func:`~ppsim.costs.analytic.expert_alltoalls`). Not modelled: dropped
tokens (capacity factors: ppsim is dropless), the router's auxiliary loss, DeepEP's and the flex
dispatcher's kernels (priced as the all-to-all they replace).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from ppsim.costs.gemms import Gemm, PassGemms
from ppsim.costs.table import Link
from ppsim.inputs.scenario import ModelSpec, MoESpec, RoutingSpec


@dataclass(frozen=True)
class ExpertShard:
    """A MoE model's experts as one device holds them; ``rank_skew``: the busiest rank's routed
    tokens over the mean when the caller worked it out (None: ``moe.skew``)."""

    moe: MoESpec
    expert_parallel: int = 1
    expert_tensor: int = 1
    rank_skew: float | None = None
    #: the tokens' dispatcher (``training.moe_dispatcher``): ``alltoall`` permutes twice each way
    dispatcher: str = "alltoall"

    @classmethod
    def of(cls, model: ModelSpec, expert_parallel: int = 1, expert_tensor: int = 1,
           dispatcher: str = "alltoall") -> ExpertShard:
        """The experts of ``model`` (which has some) laid out over ``expert_parallel`` ranks, the
        busiest one's load from its routing (:func:`busiest_rank_skew`)."""
        assert model.moe is not None
        return cls(model.moe, expert_parallel, expert_tensor,
                   busiest_rank_skew(model.moe, expert_parallel, model.moe_layer_count()), dispatcher)

    @property
    def skew(self) -> float:
        """The busiest expert-parallel rank's routed tokens over the mean."""
        return self.moe.stated_skew if self.rank_skew is None else self.rank_skew

    @property
    def local_experts(self) -> int:
        return self.moe.experts // self.expert_parallel

    def routed_width(self, hidden: int) -> int:
        """The width of a token at the routed experts: the latent width of a latent MoE, else ``hidden``."""
        return self.moe.latent or hidden

    def mlp_matmul_flops(self, tokens: float, hidden: int, swiglu: bool) -> float:
        """One pass of a MoE layer's MLP GEMMs on the busiest device, ``tokens`` of them there (b s / t):
        its routed experts' (k x skew copies a token at the routed width), the shared experts' (t
        ways split) and a latent MoE's two projections (each device its own tokens, whole); the
        router aside."""
        m, w = self.moe, self.routed_width(hidden)
        mats = 3 if swiglu else 2
        routed = 2 * mats * tokens * m.top_k * self.skew * w * m.ffn_hidden
        shared = 2 * mats * tokens * hidden * m.shared_experts * m.shared_ffn
        projections = 2 * 2 * tokens * hidden * w if m.latent else 0.0
        return routed + shared + projections

    def cast_linears(self, hidden: int, ffn: float, mats: int, tensor_parallel: int) -> list[tuple[float, float]]:
        """A MoE layer's linear layers as FP8's casts see them, (input, output) values per token of the
        micro-batch: the experts' up and down projections over every copy a token makes (the routed
        ones at the routed width, t ways split; the shared experts' once), and a latent MoE's two
        projections (each device its own tokens); ``ffn``: :meth:`mlp_width`."""
        t, m, w = tensor_parallel, self.moe, self.routed_width(hidden)
        inputs = m.top_k * self.skew / t * w + (hidden if m.shared_experts else 0.0)
        linears = [(inputs, (mats - 1) * ffn / t), (ffn / t, inputs)]
        if m.latent:
            linears += [(hidden / t, w / t), (w / t, hidden / t)]
        return linears

    def mlp_width(self) -> float:
        """The width of the dense MLP that does a MoE layer's expert work on the busiest rank:
        k x skew x f_e of routed experts and the shared experts' n_s x f_s."""
        m = self.moe
        return m.top_k * self.skew * m.ffn_hidden + m.shared_experts * m.shared_ffn

    def params(self, model: ModelSpec, tensor_parallel: int) -> tuple[int, int]:
        """(all, routed experts') parameters of one MoE layer's MLP on a device: its E / EP experts at
        1 / ETP each, the shared experts at 1 / t, the router whole."""
        m, h = self.moe, model.hidden
        mats = 3 if model.mlp == "swiglu" else 2
        experts = self.local_experts * mats * self.routed_width(h) * m.ffn_hidden // self.expert_tensor
        shared = m.shared_experts * mats * h * m.shared_ffn // tensor_parallel
        projections = 2 * h * m.latent if m.latent else 0  # whole on every tensor rank
        return experts + shared + projections + h * m.experts, experts

    def tokens(self, seq_len: int, micro_batch: int, tensor_parallel: int) -> float:
        """A device's tokens of a micro-batch at the MoE layer (``seq_len``: its share of each sequence)."""
        return micro_batch * seq_len / tensor_parallel

    def dispatch_bytes(self, tokens: float, hidden: int, dtype_bytes: int) -> float:
        """One all-to-all's bytes (dispatch or combine) of the busiest device: its token copies, each
        of the routed width."""
        return tokens * self.moe.top_k * self.skew * self.routed_width(hidden) * dtype_bytes

    def extra_activation_bytes(self, tokens: float, hidden: int, dtype_bytes: int) -> float:
        """What a MoE layer holds for its backward beyond a dense MLP of :meth:`mlp_width`: the
        permuted copies beyond the layer's own input, and the router's probabilities (fp32); a latent
        MoE's copies are latent-wide, all of them beyond its input, and its up projection keeps its
        latent-wide input too."""
        m = self.moe
        probabilities = 4 * tokens * m.experts
        if m.latent:
            return (m.top_k * self.skew + 1) * tokens * m.latent * dtype_bytes + probabilities
        return (m.top_k * self.skew - 1) * tokens * hidden * dtype_bytes + probabilities

    @property
    def permutes(self) -> int:
        """Permutations of the token copies each way: two with NCCL's all-to-all between devices that
        hold more than one expert each (the global permute, then the sort by local expert), else one."""
        sorts = self.dispatcher == "alltoall" and self.expert_parallel > 1 and self.local_experts > 1
        return 2 if sorts else 1

    def permute_bytes(self, tokens: float, hidden: int, dtype_bytes: int) -> float:
        """The forward's HBM bytes of permuting the token copies to their experts and back."""
        return 4 * self.permutes * self.moe.top_k * self.skew * tokens * self.routed_width(hidden) * dtype_bytes

    def gemms(self, tokens: float, hidden: int, tensor_parallel: int, swiglu: bool, recomputed: bool) -> PassGemms:
        """The router's, the routed experts' (grouped: one GEMM per local expert) and the shared
        experts' GEMMs of one MoE layer, pass by pass; a recomputed forward's go with the input grad."""
        m, h, t, etp = self.moe, hidden, tensor_parallel, self.expert_tensor
        w = self.routed_width(h)
        per_expert = tokens * m.top_k * self.skew * etp / self.local_experts
        up = 2 if swiglu else 1
        weights = ([(per_expert, w, m.ffn_hidden / etp, self.local_experts)] * up
                   + [(per_expert, m.ffn_hidden / etp, w, self.local_experts)])
        if m.latent:  # down to the latent width before the dispatch, up after the combine
            weights += [(tokens, h, w, 1), (tokens, w, h, 1)]
        if m.shared_experts:  # the shared experts' tokens are all-gathered over the t ranks, as a dense MLP's
            width = m.shared_experts * m.shared_ffn / t
            weights += [(tokens * t, h, width, 1)] * up + [(tokens * t, width, h, 1)]
        forward = tuple(Gemm(n, i, o, c, linear=True) for n, i, o, c in weights) + (Gemm(tokens, h, m.experts),)
        input_grad = tuple(Gemm(n, o, i, c, linear=True) for n, i, o, c in weights) + (Gemm(tokens, m.experts, h),)
        weight_grad = tuple(Gemm(i, n, o, c, linear=True) for n, i, o, c in weights) + (Gemm(h, tokens, m.experts),)
        return PassGemms(forward, input_grad + (forward if recomputed else ()), weight_grad)


def busiest_rank_skew(moe: MoESpec, expert_parallel: int, moe_layers: int) -> float:
    """The busiest of ``expert_parallel`` ranks' routed tokens over the mean: ``moe.skew``, or drawn
    from ``moe.routing`` (:func:`routing_skew`)."""
    if moe.routing is None:
        return moe.stated_skew
    return routing_skew(moe.routing, moe.experts, expert_parallel, moe_layers)


@lru_cache(maxsize=512)
def routing_skew(routing: RoutingSpec, experts: int, expert_parallel: int, moe_layers: int) -> float:
    """The busiest rank's routed tokens over the mean, averaged over ``moe_layers`` MoE layers
    (a stage's time adds its layers'). Each layer draws its experts' loads from a gamma
    distribution of shape 1 / cv^2 (coefficient of variation ``routing.load_cv``: normalised, a
    Dirichlet draw of the experts' shares) seeded by ``routing.seed`` and the layer; rank r holds
    experts r E / EP to (r + 1) E / EP - 1, as Megatron numbers them. More ranks, fewer experts
    each: the busiest rank's excess grows. The token draw's own noise (thousands of copies per
    expert) is left out."""
    if expert_parallel <= 1:
        return 1.0
    shape, per_rank = 1 / routing.load_cv**2, experts // expert_parallel
    total = 0.0
    for layer in range(max(moe_layers, 1)):
        draw = random.Random(f"{routing.seed}:{layer}")
        loads = [draw.gammavariate(shape, 1.0) for _ in range(experts)]
        ranks = [sum(loads[r * per_rank:(r + 1) * per_rank]) for r in range(expert_parallel)]
        total += max(ranks) * expert_parallel / sum(ranks)
    return total / max(moe_layers, 1)


def measured_skew(routed: list[list[int]], expert_parallel: int) -> float | None:
    """The busiest rank's routed token copies over the mean, averaged over MoE layer forwards whose
    copies per expert (each of ``routed``: the model's every expert, in order) were counted, were the
    experts split over ``expert_parallel`` ranks as Megatron numbers them (rank r: experts r E / EP
    to (r + 1) E / EP - 1); None without a forward that routed any copy."""
    ratios = []
    for loads in routed:
        per_rank = len(loads) // expert_parallel
        ranks = [sum(loads[r * per_rank:(r + 1) * per_rank]) for r in range(expert_parallel)]
        if sum(ranks):
            ratios.append(max(ranks) * expert_parallel / sum(ranks))
    return sum(ratios) / len(ratios) if ratios else None


def router_flops(tokens: float, hidden: int, experts: int) -> float:
    """One pass of the router's GEMM (forward, input grad and weight grad alike)."""
    return 2 * tokens * hidden * experts


def alltoall_ms(nbytes: float, ranks: int, link: Link) -> float:
    """An all-to-all of ``nbytes`` per device over ``ranks`` devices on ``link``: a device sends
    (ranks - 1) / ranks of its bytes, one latency per peer."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return link.latency_ms * (ranks - 1) + link.serialization_ms(nbytes * (ranks - 1) / ranks)


def reduced_params(dense: float, experts: float, replicas: int, expert_replicas: int) -> float:
    """The parameters whose ring reduction over ``replicas`` devices moves what the stage's really
    does: ``dense`` over ``replicas``, ``experts`` over ``expert_replicas`` (a ring moves
    (n - 1) / n of the bytes per device)."""
    if replicas <= 1:
        return dense + experts
    share = (expert_replicas - 1) / expert_replicas / ((replicas - 1) / replicas)
    return dense + experts * share
