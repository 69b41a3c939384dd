"""One rank of a plan run alone, at full size: its stages built as the whole run builds them, its
lowered actions run exactly in plan order, receives fed, sends dropped, the optimizer stepping on
the rank's own shards; every action timed and the memory after it (and the most during it)
recorded.

- A receive gives a tensor of the message's true shape and dtype, made once (a copy of it per
  micro-batch, as a real receive allocates its buffer), when the prediction says the message
  arrives (the predicted end of the receive, from the step's start), or at once without waits.
- A send is dropped: its tensor stays held as long as the plan holds it (the output, for the
  backward; the input's gradient is freed).
- The optimizer: Adam on this rank's share of its stages' parameters (all of them; 1 / d of each
  under ZeRO-1, as a replica steps its shard), an fp32 master copy of that share when the weights
  are 16-bit: 2 + 2 + 12 bytes a parameter, as ppsim counts them.
- Memory: a GPU's allocated bytes (``torch.cuda.memory_allocated``) after each action and its most
  during it; on a CPU the allocator's bytes of live tensors from torch's profiler memory events of a
  step run under it (its times are not used: the profiler slows every operator), added to the
  bytes of what the rank held before that step (weights, optimizer state, the fed tensors), counted
  storage by storage. Either way what the program allocates, not the process's size.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ppexec.runtimes.model import TORCH_DTYPES, layer_factories, loss_fn, stage_boundaries, synthetic_batch
from ppexec.runtimes.torch_pipelining.program import StageModule
from ppsim.api import Action, Kind, Prediction, Scenario


@dataclass(frozen=True)
class ActionRecord:
    """One action as it ran: its text, start and end (ms from the step's start)."""

    action: str
    start_ms: float
    end_ms: float


@dataclass(frozen=True)
class MemoryRecord:
    """What the rank held after an action, and the most it held while the action ran (bytes)."""

    action: str
    after_bytes: int
    most_bytes: int


class ShardAdam:
    """Adam on a share of each parameter (its ``lo:hi`` elements), with an fp32 master copy of the
    share when the parameter is not fp32: what one of d ZeRO-1 replicas keeps and steps."""

    def __init__(self, params: list[nn.Parameter], share: int, of: int, lr: float = 1e-4) -> None:
        self.lr, self.beta1, self.beta2, self.eps, self.step_count = lr, 0.9, 0.95, 1e-8, 0
        self.slots: list[tuple[nn.Parameter, int, int, torch.Tensor | None, torch.Tensor, torch.Tensor]] = []
        for p in params:
            n = p.numel()
            lo, hi = n * share // of, n * (share + 1) // of
            master = p.detach().reshape(-1)[lo:hi].float().clone() if p.dtype != torch.float32 else None
            zeros = torch.zeros(hi - lo, dtype=torch.float32, device=p.device)
            self.slots.append((p, lo, hi, master, zeros, zeros.clone()))

    @torch.no_grad()
    def step(self) -> None:
        self.step_count += 1
        c1, c2 = 1 - self.beta1 ** self.step_count, 1 - self.beta2 ** self.step_count
        for p, lo, hi, master, m, v in self.slots:
            if p.grad is None or hi == lo:
                continue
            g = p.grad.reshape(-1)[lo:hi].float()
            m.mul_(self.beta1).add_(g, alpha=1 - self.beta1)
            v.mul_(self.beta2).addcmul_(g, g, value=1 - self.beta2)
            target = master if master is not None else p.data.reshape(-1)[lo:hi]
            target.addcdiv_(m / c1, (v / c2).sqrt_().add_(self.eps), value=-self.lr)
            if master is not None:
                p.data.reshape(-1)[lo:hi].copy_(master)

    def tensors(self) -> Iterator[torch.Tensor]:
        for _, _, _, master, m, v in self.slots:
            yield from ([master] if master is not None else []) + [m, v]


class RankRun:
    """Rank ``rank`` of ``prediction``'s plan, built on ``device`` and ready to run steps."""

    def __init__(self, s: Scenario, prediction: Prediction, rank: int, device: torch.device, seed: int = 1234,
                 replica: int = 0) -> None:
        assert s.model is not None
        self.s, self.rank, self.device, self.seed, self.replica = s, rank, device, seed, replica
        self.plan = prediction.plan
        self.actions: list[Action] = list(self.plan.actions[rank])
        partition = prediction.workload.partition or []
        bounds = stage_boundaries(partition)
        self.stages = list(self.plan.stages_of_rank(rank))
        self.num_stages = self.plan.num_stages
        factories = layer_factories(s.model, seed, s.training.recompute, fused=s.training.flash_attention)
        self.dtype = TORCH_DTYPES[s.model.dtype]
        full = s.training.recompute == "full"
        self.modules = {k: StageModule({i: factories[i][0](*factories[i][1]) for i in range(bounds[k], bounds[k + 1])},
                                       full).to(device=device, dtype=self.dtype) for k in self.stages}
        d = s.data_parallel
        sharded = s.training.zero_stage >= 1 and d > 1
        #: each stage's optimizer (its OPT steps it)
        self.optimizers = {k: ShardAdam(list(self.modules[k].parameters()), replica if sharded else 0,
                                        d if sharded else 1) for k in self.stages}
        m, b = s.model, s.training.micro_batch
        shape = (b, m.seq_len, m.hidden)
        g = torch.Generator().manual_seed(seed)
        #: what a receive of an activation or of a gradient delivers (made once; copied per micro-batch)
        self.fed = torch.randn(shape, generator=g).to(device=device, dtype=self.dtype)
        self.fed_grad = (torch.randn(shape, generator=g) * 1e-3).to(device=device, dtype=self.dtype)
        #: predicted arrival of each receive (ms from the step's start)
        self.arrivals = {str(sp.action): sp.end for sp in prediction.trace.spans
                         if sp.rank == rank and sp.action.kind in (Kind.RECV_F, Kind.RECV_B)}
        self.microbatches = self.plan.num_microbatches

    def held_bytes(self) -> int:
        """Bytes of every tensor the rank holds between steps: weights, buffers, gradients, the
        optimizer's state and the fed tensors, each storage once."""
        seen: dict[int, int] = {}
        tensors: list[torch.Tensor] = [self.fed, self.fed_grad]
        for optimizer in self.optimizers.values():
            tensors += list(optimizer.tensors())
        for module in self.modules.values():
            tensors += list(module.parameters()) + list(module.buffers())
            tensors += [p.grad for p in module.parameters() if p.grad is not None]
        for t in tensors:
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
        return sum(seen.values())

    def step(self, step: int, waits: bool, on_action: Callable[[str], Any] | None = None) -> list[ActionRecord]:
        """Run the rank's actions of one step in plan order; their records (ms from the step's start).
        ``on_action(text)``: a context manager entered around each action (the profiler's label)."""
        s = self.s
        assert s.model is not None
        for module in self.modules.values():
            module.zero_grad(set_to_none=True)
        inputs: dict[tuple[int, int], torch.Tensor] = {}
        outputs: dict[tuple[int, int], torch.Tensor] = {}
        grads: dict[tuple[int, int], torch.Tensor] = {}
        groups: dict[tuple[int, int], Any] = {}  #: a split backward's parameter groups, from I to W
        labels: dict[int, torch.Tensor] = {}
        records: list[ActionRecord] = []
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        sync()
        t0 = time.perf_counter()

        def forward(stage: int, mb: int) -> None:
            if stage == 0:
                ids, lab = synthetic_batch(s.model, s.training.micro_batch, self.seed, step, self.replica, mb)  # type: ignore[arg-type]
                x: torch.Tensor = ids.to(self.device)
                labels[mb] = lab.to(self.device)
            elif (stage, mb) in inputs:  # received
                x = inputs.pop((stage, mb)).requires_grad_(True)
            else:  # the stage before it on this rank handed its output over (a V's turn): no copy
                x = outputs[(stage - 1, mb)].detach().requires_grad_(True)
            out = self.modules[stage](x)
            if stage == self.num_stages - 1:
                if mb not in labels:
                    labels[mb] = synthetic_batch(s.model, s.training.micro_batch, self.seed, step,  # type: ignore[arg-type]
                                                 self.replica, mb)[1].to(self.device)
                out = loss_fn(out, labels.pop(mb)) / self.microbatches
            inputs[(stage, mb)] = x
            outputs[(stage, mb)] = out

        def backward(stage: int, mb: int, part: Kind) -> None:
            from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

            out = outputs[(stage, mb)]
            grad = None if stage == self.num_stages - 1 else grads[(stage, mb)]
            x = inputs[(stage, mb)]
            params = [p for p in self.modules[stage].parameters() if p.requires_grad]
            local = stage - 1 in self.modules  # the stage before on this rank takes the input's gradient as is
            if part is Kind.I:  # torch's split: the input's gradient, the intermediates' kept for the weights'
                if x.requires_grad:  # (a first stage's input is token ids: its weight grad does it all)
                    dx, groups[(stage, mb)] = stage_backward_input([out], None if grad is None else [grad],
                                                                    [x], self.modules[stage].parameters())
                    if local and dx[0] is not None:
                        grads[(stage - 1, mb)] = dx[0]
                return
            if part is Kind.W and (stage, mb) in groups:
                stage_backward_weight(self.modules[stage].parameters(), groups.pop((stage, mb)))
            elif part is Kind.W:
                torch.autograd.backward(out, grad, inputs=params)
            else:
                torch.autograd.backward(out, grad, inputs=params + ([x] if x.requires_grad else []))
                if local and x.grad is not None:
                    grads[(stage - 1, mb)] = x.grad
            outputs.pop((stage, mb))
            inputs.pop((stage, mb))
            grads.pop((stage, mb), None)

        def run(a: Action) -> None:
            kind = a.kind
            if kind is Kind.OVERLAP_F_B:
                for part in a.parts:
                    run(part)
            elif kind is Kind.F:
                forward(a.stage, a.microbatch)  # type: ignore[arg-type]
            elif kind in (Kind.B, Kind.I, Kind.W):
                backward(a.stage, a.microbatch, kind)  # type: ignore[arg-type]
            elif kind in (Kind.RECV_F, Kind.RECV_B):
                due = self.arrivals.get(str(a))
                if waits and due is not None:
                    left = due / 1e3 - (time.perf_counter() - t0)
                    if left > 0:
                        time.sleep(left)
                if kind is Kind.RECV_F:
                    inputs[(a.stage, a.microbatch)] = self.fed.clone()  # type: ignore[index]
                else:
                    grads[(a.stage, a.microbatch)] = self.fed_grad.clone()  # type: ignore[index]
            elif kind is Kind.OPT:
                for k in ([a.stage] if a.stage in self.optimizers else self.stages):
                    self.optimizers[k].step()
            # sends are dropped; a collective has no peers here

        for a in self.actions:
            start = time.perf_counter()
            with on_action(str(a)) if on_action else _nothing():
                run(a)
                sync()
            end = time.perf_counter()
            records.append(ActionRecord(str(a), (start - t0) * 1e3, (end - t0) * 1e3))
        return records

    def memory_step(self, step: int) -> list[MemoryRecord]:
        """One step with the memory the program holds recorded after each action and at its most
        during it: the GPU's allocator, or on a CPU torch's profiler memory events."""
        if self.device.type == "cuda":
            return self._cuda_memory_step(step)
        from torch.profiler import ProfilerActivity, profile, record_function

        for module in self.modules.values():  # the last step's gradients freed before counting: the
            module.zero_grad(set_to_none=True)  # profiler cannot see a free of what it did not see made
        base = self.held_bytes()
        labels: list[str] = []

        def label(text: str) -> Any:
            labels.append(text)
            return record_function(f"PP:{text}")

        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            self.step(step, waits=False, on_action=label)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(path))
            events = json.loads(path.read_text())["traceEvents"]
        return memory_by_action(events, base)

    def model_state_bytes(self) -> dict[str, int]:
        """What the rank's stages hold as weights, gradients and optimizer state (bytes, now)."""
        params = [p for module in self.modules.values() for p in module.parameters()]
        return {"weights": sum(p.nbytes for p in params),
                "gradients": sum(p.grad.nbytes for p in params if p.grad is not None),
                "optimizer": sum(t.nbytes for o in self.optimizers.values() for t in o.tensors())}

    def _cuda_memory_step(self, step: int) -> list[MemoryRecord]:
        out: list[MemoryRecord] = []

        @contextmanager
        def measured(text: str) -> Iterator[None]:
            torch.cuda.reset_peak_memory_stats(self.device)
            yield
            torch.cuda.synchronize(self.device)
            out.append(MemoryRecord(text, torch.cuda.memory_allocated(self.device),
                                    torch.cuda.max_memory_allocated(self.device)))

        self.step(step, waits=False, on_action=measured)
        return out


def memory_by_action(events: list[dict[str, Any]], base: int) -> list[MemoryRecord]:
    """Per ``PP:<action>`` window of a profiler trace, in order: the bytes held at its end and at
    most within it: ``base`` plus the running sum of the ``[memory]`` events' allocations and frees
    (not their ``Total Allocated``, which carries over what earlier profiling sessions left)."""
    windows = sorted((e["ts"], e["ts"] + e.get("dur", 0), e["name"][3:]) for e in events
                     if e.get("ph") == "X" and str(e.get("name", "")).startswith("PP:"))
    deltas = sorted((e["ts"], int(e["args"]["Bytes"])) for e in events if e.get("name") == "[memory]")
    memory, total = [], 0
    for ts, nbytes in deltas:
        total += nbytes
        memory.append((ts, total))
    out, i, held = [], 0, 0
    for t0, t1, text in windows:
        while i < len(memory) and memory[i][0] < t0:
            held = memory[i][1]
            i += 1
        most = held
        while i < len(memory) and memory[i][0] <= t1:
            held = memory[i][1]
            most = max(most, held)
            i += 1
        out.append(MemoryRecord(text, base + held, base + most))
    return out


@contextmanager
def _nothing() -> Iterator[None]:
    yield
