"""The plans ``ppsim tune`` considers for a scenario's model and global batch on N devices."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ppsim.errors import PpsimError
from ppsim.inputs.overrides import drop_partial_recompute, sequence_parallel_for_experts
from ppsim.inputs.scenario import Scenario
from ppsim.plan import schedules as registry

MICRO_BATCHES = (1, 2, 4, 8)
RECOMPUTE = ("none", "selective", "full")
#: every training schedule but those that search on the costs themselves (auto: list it with --schedules)
SCHEDULES = tuple(name for name, info in registry.SCHEDULES.items() if info.training)
CHUNKS = (2, 4)
TENSOR = (1, 2, 4, 8)


@dataclass(frozen=True, order=True)
class Candidate:
    """One plan: parallel degrees, batch split, schedule, recompute, ZeRO."""

    stages: int
    data_parallel: int
    tensor_parallel: int
    micro_batch: int
    microbatches: int
    schedule: str
    chunks: int
    recompute: str
    zero_stage: int
    expert_parallel: int = 1
    expert_tensor: int | None = None  #: each expert's matrices split over this many devices (a MoE model's ETP)
    context_parallel: int = 1  #: each sequence's tokens split over this many devices

    @property
    def devices(self) -> int:
        return self.stages * self.data_parallel * self.tensor_parallel * self.context_parallel

    @property
    def pure_data_parallel(self) -> bool:
        return self.stages == 1 and self.tensor_parallel == 1 and self.context_parallel == 1

    def label(self) -> str:
        sched = self.schedule + (f" v={self.chunks}" if self.chunks > 1 else "")
        ep = f" cp={self.context_parallel}" if self.context_parallel > 1 else ""
        ep += f" ep={self.expert_parallel}" if self.expert_parallel > 1 else ""
        ep += f" etp={self.expert_tensor}" if self.expert_tensor not in (None, self.tensor_parallel) else ""
        return (f"p={self.stages} d={self.data_parallel} t={self.tensor_parallel}{ep} b={self.micro_batch} "
                f"m={self.microbatches} {sched} recompute={self.recompute} zero={self.zero_stage}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SearchSpace:
    """What may vary. ``None`` keeps every value the scenario's model and cluster allow."""

    gpus: int
    micro_batches: tuple[int, ...] = MICRO_BATCHES
    schedules: tuple[str, ...] = SCHEDULES
    recompute: tuple[str, ...] = RECOMPUTE
    tensor_parallel: tuple[int, ...] = TENSOR
    chunks: tuple[int, ...] = CHUNKS
    zero: tuple[int, ...] = (0, 1)
    max_stages: int | None = None
    context_parallel: tuple[int, ...] | None = None  #: None: the scenario's own


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def candidates(s: Scenario, space: SearchSpace) -> list[Candidate]:
    """Every plan of the space that the scenario's model, batch and cluster allow, in a fixed order.
    Raises a PpsimError naming the reason when there is none."""
    if s.model is None:
        raise PpsimError("tune needs a 'model' section: it prices plans from the model's FLOPs and memory",
                         field="model")
    gb = s.global_batch
    if space.gpus < 1:
        raise PpsimError(f"--gpus must be at least 1, got {space.gpus}", field="--gpus")
    per_domain = (s.cluster.nvlink_domain or s.cluster.devices_per_node) if s.cluster else 8  # TP's reach
    if s.cluster is not None and space.gpus > s.cluster.nodes * s.cluster.devices_per_node:
        raise PpsimError(f"--gpus {space.gpus} is more than the cluster's {s.cluster.nodes} x "
                         f"{s.cluster.devices_per_node} devices; enlarge cluster.nodes or ask for fewer", field="--gpus")
    m = s.model
    sizes = space.context_parallel or (s.context_parallel,)
    if not any(_splits_sequences(s, cp) for cp in sizes):
        raise PpsimError(f"no context parallel size of {'/'.join(map(str, sizes))} splits model.seq_len "
                         f"({m.seq_len}) into 2 x cp chunks{' of whole heads' if s.training.cp_comm != 'p2p' else ''} "
                         "(a hybrid pattern takes none); choose divisors of seq_len / 2",
                         field="--context-parallel-sizes")
    out: list[Candidate] = []
    for cp in sizes:
        if not _splits_sequences(s, cp):
            continue
        for t in space.tensor_parallel:
            if space.gpus % (t * cp) or t > per_domain or m.heads % t or m.ffn % t or m.kv % t:
                continue
            for p in _divisors(space.gpus // (t * cp)):
                if p > m.layers or (space.max_stages and p > space.max_stages):
                    continue
                d = space.gpus // (t * cp * p)
                for b in space.micro_batches:
                    if gb % (b * d):
                        continue
                    mb = gb // (b * d)
                    for schedule, v in _schedules(p, mb, m.layers, space, moe=m.moe is not None):
                        for rc in space.recompute:
                            for z in space.zero:
                                if z and d * cp == 1:
                                    continue  # ZeRO-1 shards over replicas: with one it is the same plan
                                out += [Candidate(p, d, t, b, mb, schedule, v, rc, z, ep, etp, cp)
                                        for ep, etp in _expert_layouts(s, t * cp * d, t)]
    if not out:
        raise PpsimError(
            f"no plan splits global_batch {gb} over {space.gpus} devices with micro-batches of "
            f"{'/'.join(map(str, space.micro_batches))} and tensor parallelism of "
            f"{'/'.join(map(str, space.tensor_parallel))}; choose another --gpus (a divisor-friendly count)",
            field="--gpus")
    return out


def _splits_sequences(s: Scenario, cp: int) -> bool:
    """Whether ``cp``-way context parallelism can split the scenario's sequences: into 2 x cp chunks
    (two a rank, for the causal mask's balance) and, by all-to-all, its heads (the rest of the rules
    are the scenario's: a plan that breaks one is counted invalid)."""
    m = s.model
    if cp == 1:
        return True
    if m is None or m.seq_len % (2 * cp) or (m.pattern is not None):
        return False
    a2a = {"a2a": cp, "a2a+p2p": s.training.cp_a2a_size or 0}.get(s.training.cp_comm, 1)
    if s.training.cp_comm == "a2a+p2p" and not (a2a and cp % a2a == 0 and 1 < a2a < cp):
        return False
    return a2a == 1 or not (m.heads % a2a or m.kv % a2a)


def _expert_layouts(s: Scenario, stage_devices: int, t: int) -> list[tuple[int, int | None]]:
    """The (expert parallelism, expert tensor parallelism) a plan may take: (1, None) without experts;
    else the scenario's ETP if it sets one, or each of 1 (each expert whole) and t (Megatron's
    default) that divides the experts' widths, with each power of two EP that divides the experts
    and, times the ETP, the stage's devices."""
    moe = s.model.moe if s.model else None
    if moe is None:
        return [(1, None)]
    choices = [s.expert_tensor_parallel] if s.expert_tensor_parallel else sorted({1, t})
    out: list[tuple[int, int | None]] = []
    for etp in choices:
        if moe.ffn_hidden % etp or moe.shared_ffn % etp:
            continue
        ep = 1
        while ep <= moe.experts:
            if moe.experts % ep == 0 and stage_devices % (ep * etp) == 0:
                out.append((ep, etp))
            ep *= 2
    return out


def _schedules(p: int, m: int, layers: int, space: SearchSpace, *, moe: bool = False) -> list[tuple[str, int]]:
    """(schedule, chunks) pairs for p stages and m micro-batches. On one stage every schedule is
    gradient accumulation on one chunk but, for a mixture of experts, those that overlap one
    micro-batch's forward with another's backward (combined 1F1B: it hides the all-to-alls of the
    one under the other's compute)."""
    if p == 1:
        return [(registry.DEFAULT, 1)] + [
            (name, 1) for name in (space.schedules if moe else ())
            if (info := registry.get(name)).overlaps and info.allows_chunks(1, 1)
            and info.microbatches.nearest(1, m, 1) is None]
    out = []
    for name in space.schedules:
        info = registry.get(name)
        for v in space.chunks if not info.chunks.fixed else (info.chunks.default,):
            if (info.allows_chunks(p, v) and layers >= p * v // info.pipes and p % info.pipes == 0
                    and info.microbatches.nearest(p, m, v) is None):
                out.append((name, v))
    return out


def apply(base: dict[str, Any], c: Candidate) -> dict[str, Any]:
    """The scenario mapping (``Scenario.model_dump``) with the candidate's plan."""
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    data["data_parallel"] = c.data_parallel
    data["tensor_parallel"] = c.tensor_parallel
    if c.context_parallel > 1 or "context_parallel" in data:
        data["context_parallel"] = c.context_parallel
    if c.expert_parallel > 1 or "expert_parallel" in data:
        data["expert_parallel"] = c.expert_parallel
    if c.expert_tensor is not None:
        data["expert_tensor_parallel"] = c.expert_tensor
    training = dict(data.get("training", {}))
    training.update(micro_batch=c.micro_batch, recompute=c.recompute, zero_stage=c.zero_stage)
    drop_partial_recompute(training)
    # what the scenario asks of tensor parallelism and ZeRO, where the candidate still has them
    training["tp_comm_overlap"] = bool(training.get("tp_comm_overlap")) and c.tensor_parallel > 1
    training["overlap_param_gather"] = bool(training.get("overlap_param_gather")) and c.zero_stage >= 1
    # Megatron's delayed weight grads, where the candidate still runs combined 1F1B's all-to-alls
    expert_tensor: int = c.expert_tensor or base.get("expert_tensor_parallel") or 1
    training["delay_wgrad"] = (bool(training.get("delay_wgrad")) and c.schedule == "combined-1f1b"
                               and c.expert_parallel * expert_tensor > 1)
    sequence_parallel_for_experts(data, training)
    training.pop("global_batch", None)
    data["training"] = training
    pipeline = dict(data.get("pipeline", {}))
    pipeline.update(stages=c.stages, microbatches=c.microbatches, schedule=c.schedule, chunks=c.chunks,
                    partition="balanced")
    data["pipeline"] = pipeline
    data.pop("deepspeed", None)
    return data
