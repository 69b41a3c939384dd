"""Where the plan puts each layer: the virtual stages in order, each its rank, its blocks, and the
embedding, the MTP modules and the LM head where ppsim placed them; and the sum check an export
prints (every block once, the ends where they belong)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ppsim.errors import PpsimError
from ppsim.prediction import Built


@dataclass(frozen=True)
class StageLayers:
    """One virtual stage of one copy of the model, as the plan runs it."""

    stage: int
    rank: int
    first_block: int  #: the model's index of its first block
    blocks: int
    embedding: bool
    head: bool  #: the final norm, the LM head and the loss (and the MTP modules before them)
    mtp: int = 0

    @property
    def block_range(self) -> range:
        return range(self.first_block, self.first_block + self.blocks)


def stage_layers(built: Built) -> list[StageLayers]:
    """The virtual stages of one copy of the model, in the model's order (DualPipe's second copy
    holds the same layers on the mirrored ranks: the framework exports do not run it)."""
    partition = built.workload.partition
    s = built.scenario
    if partition is None or s.model is None:
        raise PpsimError("an export places the model's layers: give the scenario a 'model' section", field="model")
    n = len(partition) // built.plan.pipes
    out, first = [], 0
    for k, blocks in enumerate(partition[:n]):
        last = k == n - 1
        out.append(StageLayers(k, built.plan.stage_to_rank[k], first, blocks, embedding=k == 0, head=last,
                               mtp=s.model.mtp_layers if last else 0))
        first += blocks
    return out


def layer_check(stages: list[StageLayers], layers: int) -> str:
    """The line that shows every block is placed once: the sum over the stages, and where the ends
    are. Raises if a block is lost or counted twice (a bug, never the user's input)."""
    total = sum(st.blocks for st in stages)
    covered = [b for st in stages for b in st.block_range]
    if total != layers or covered != list(range(layers)):
        raise AssertionError(f"the stages hold {total} blocks, the model {layers}")
    runs: list[list[int]] = []  # [count, how many stages in a row]
    for st in stages:
        if runs and runs[-1][0] == st.blocks:
            runs[-1][1] += 1
        else:
            runs.append([st.blocks, 1])
    counts = " + ".join(f"{n} x {times}" if times > 1 else str(n) for n, times in runs)
    first, last = stages[0], stages[-1]
    return (f"{layers} blocks = {counts} over {len(stages)} stages; the embedding on stage 0 (rank {first.rank}), "
            f"{f'{last.mtp} MTP module(s) and ' if last.mtp else ''}the LM head on stage {last.stage} "
            f"(rank {last.rank})")


def base_devices(base: dict[str, Any]) -> int | None:
    """The devices a scenario mapping's plan runs on, t x cp x d x p (None for no mapping): what an
    import takes for the job's GPUs when the framework's files do not say."""
    if not base:
        return None
    n = int((base.get("pipeline") or {}).get("stages") or 1)
    for key in ("tensor_parallel", "context_parallel", "data_parallel"):
        n *= int(base.get(key) or 1)
    return n
