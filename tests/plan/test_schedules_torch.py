"""ppsim's schedules against torch.distributed.pipelining's own generators: the same compute
order on every rank (torch's end-of-step REDUCE_GRAD and its bubble placeholders aside).

Not compared: torch's single-stage 1F1B, whose ``pipeline_order`` (a picture; the schedule itself
runs its own loop) shows the last rank starting at F1 and never running F0 — 1F1B is checked
against DeepSpeed's TrainSchedule in test_schedules.py instead; torch's interleaved 1F1B for m not
a multiple of p, which ppsim refuses as Megatron does."""

from __future__ import annotations

import pytest

from ppsim.errors import ScheduleError
from ppsim.plan import schedules

pytest.importorskip("torch")

TORCH_NAMES = {"gpipe": "GPipe", "interleaved-1f1b": "Interleaved1F1B", "looped-bfs": "LoopedBFS",
               "interleaved-zb": "InterleavedZeroBubble", "zb-v": "ZBVZeroBubble",
               "dualpipev": "DualPipeV"}


def _torch_order(name: str, p: int, m: int, v: int) -> list[list[str]] | None:
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    try:
        ops = get_schedule_ops(TORCH_NAMES[name], p, m, num_stages_per_rank=v if v > 1 else None)
    except (ValueError, AssertionError, RuntimeError):
        return None
    return [[str(a) for a in rank if a is not None and "REDUCE_GRAD" not in str(a)] for rank in ops]


def _cases() -> list[tuple[str, int, int, int]]:
    out = []
    for name in TORCH_NAMES:
        chunks = schedules.get(name).chunks
        for v in ([chunks.default] if chunks.fixed else [2, 3]):
            out += [(name, p, m, v) for p in (1, 2, 3, 4, 8) for m in sorted({1, 2, p, p + 1, 2 * p, 2 * p + 3, 3 * p})]
    return out


@pytest.mark.parametrize("name,p,m,v", _cases())
def test_compute_order_is_torchs(name: str, p: int, m: int, v: int) -> None:
    theirs = _torch_order(name, p, m, v)
    try:
        ours = [[str(a) for a in rank] for rank in schedules.build(name, p, m, v).actions]
    except ScheduleError:
        assert theirs is None or (name == "interleaved-1f1b" and m % p), f"only ppsim refuses {name} p={p} m={m} v={v}"
        return
    if theirs is None:
        pytest.skip(f"torch refuses {name} p={p} m={m} v={v}")
    assert ours == theirs
