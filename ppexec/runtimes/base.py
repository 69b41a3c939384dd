"""The seam between ppexec and the frameworks that run a plan: a Runtime says whether it can run a
Plan (and why not), which send semantics its plans are lowered for, and builds one rank of a run;
the rank it builds (a RankProgram) runs one training step at a time, every action timed by the
rank's ActionClock (``ppexec.worker.clock``), the run read from its ``RunSpec`` (``ppexec.worker.run_spec``).

Two runtimes: DeepSpeed's PipelineEngine (``ppexec.runtimes.deepspeed_pipe``) and
torch.distributed.pipelining's schedule runtime (``ppexec.runtimes.torch_pipelining``). Neither knows a
schedule name: each runs the lowered Plan's actions as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, get_args

from ppexec.runtimes import RuntimeChoice, RuntimeName
from ppexec.worker.clock import ActionClock
from ppexec.worker.run_spec import RunSpec
from ppsim.api import Plan, Scenario
from ppsim.errors import PpsimError

Batch = tuple[Any, Any]  #: (token ids, labels) of one micro-batch
BatchOf = Callable[[int], Batch]  #: micro-batch index -> its batch, for the step being run


@dataclass(frozen=True)
class RankContext:
    """What building one rank needs."""

    spec: RunSpec
    rank: int
    world: int
    run_dir: Path
    clock: ActionClock


class RankProgram(Protocol):
    """One rank of a run, built and ready to train."""

    pipe_rank: int  #: its rank in the Plan
    replica: int
    tp_rank: int

    def train_step(self, batch: BatchOf) -> float | None:
        """Run one training step of the plan (every action timed on the context's clock); the mean
        loss on the rank holding the last stage, else None."""

    def optimizer_state(self) -> dict[str, Any]:
        """The optimizer's class and how many elements its state holds (ZeRO-1 divides them)."""

    def saved_state(self) -> dict[str, Any]:
        """This rank's weights, named as the one-process reference names them (``"<layer>.<param>"``)."""


class Runtime(Protocol):
    name: RuntimeName
    #: the send semantics of its point-to-point calls, which the plan is lowered and predicted with
    comm: str

    def refuses(self, plan: Plan, s: Scenario) -> str | None:
        """Why this runtime cannot run ``plan`` (a compute-only or lowered plan) of ``s``; None if it can."""

    def start(self, ctx: RankContext) -> RankProgram:
        """Set up the process group and build this rank (in the worker process)."""


def runtimes() -> dict[str, Runtime]:
    """Every runtime, by name, in the order ``auto`` tries them."""
    from ppexec.runtimes.deepspeed_pipe import DeepSpeedRuntime
    from ppexec.runtimes.torch_pipelining import TorchRuntime

    return {"deepspeed": DeepSpeedRuntime(), "torch": TorchRuntime()}


RUNTIME_NAMES: tuple[str, ...] = get_args(RuntimeChoice)


def refuse_copies(plan: Plan) -> None:
    """A plan of several copies of the model (DualPipe), which ppexec builds nowhere, in one line."""
    if plan.pipes > 1:
        raise PpsimError(f"schedule {plan.schedule!r} runs {plan.pipes} copies of the model, which ppsim simulates "
                         "and neither runtime builds (each holds one copy per rank's stages); run dualpipev, DualPipe "
                         "folded onto one copy", field="pipeline.schedule")


def choose(name: str, plan: Plan, s: Scenario) -> Runtime:
    """The runtime ``name`` (or, for ``auto``, the first that can run the plan: DeepSpeed, then
    torch). A plan the runtime cannot run is one error naming what stands in the way; a plan of
    several copies of the model (DualPipe) none runs."""
    refuse_copies(plan)
    available = runtimes()
    if name != "auto":
        if name not in available:
            raise PpsimError(f"unknown runtime {name!r}; choose one of {', '.join(RUNTIME_NAMES)}", field="--runtime")
        runtime = available[name]
        why = runtime.refuses(plan, s)
        if why:
            raise PpsimError(f"{why}; the {_other(name)} runtime may run it (--runtime {_other(name)} or auto)",
                             field="--runtime")
        return runtime
    reasons = []
    for runtime in available.values():
        why = runtime.refuses(plan, s)
        if why is None:
            return runtime
        reasons.append(f"{runtime.name}: {why}")
    raise PpsimError("no runtime can run this plan: " + "; ".join(reasons), field="--runtime")


def _other(name: str) -> str:
    return "torch" if name == "deepspeed" else "deepspeed"
