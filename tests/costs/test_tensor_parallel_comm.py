"""The collectives tensor parallelism adds, against hand-computed ring costs."""

from __future__ import annotations

import pytest

from ppsim.costs.table import Link
from ppsim.costs.tensor_parallel import gathering, message_split, tensor_parallel_comm

NVLINK = Link.from_gb_s(300, 3)  # bytes per ms: 3e8; latency 3e-3 ms
ACT = 8 * 2**20  # one s x b x h activation, bytes
T = 4
# ring over 4: all-reduce 2 x 3/4 x bytes / bw + 6 x latency; all-gather half of it
ALLREDUCE = 2 * 3 / 4 * ACT / 3e8 + 6 * 3e-3
ALLGATHER = ALLREDUCE / 2


@pytest.mark.parametrize("sp, full, forward, backward", [
    (False, False, 2 * ALLREDUCE, 2 * ALLREDUCE),
    (False, True, 2 * ALLREDUCE, 4 * ALLREDUCE),
    # sequence parallelism: RS + AG per all-reduce, and the backward's two extra all-gathers
    (True, False, 2 * ALLREDUCE, 2 * ALLREDUCE + 2 * ALLGATHER),
    (True, True, 2 * ALLREDUCE, 4 * ALLREDUCE + 2 * ALLGATHER),
])
def test_a_blocks_collectives_per_pass(sp: bool, full: bool, forward: float, backward: float) -> None:
    comm = tensor_parallel_comm(ACT, T, NVLINK, sequence_parallel=sp, full_recompute=full, scatter_gather=True)
    assert comm.forward_ms == pytest.approx(forward)
    assert comm.backward_ms == pytest.approx(backward)
    assert comm.gather_ms == pytest.approx(0 if sp else ALLGATHER)


def test_one_rank_has_no_collectives_and_sends_the_whole_message() -> None:
    comm = tensor_parallel_comm(ACT, 1, NVLINK, sequence_parallel=True, full_recompute=True, scatter_gather=True)
    assert comm.forward_ms == comm.backward_ms == comm.gather_ms == 0
    assert message_split(1, sequence_parallel=True, scatter_gather=True) == 1
    assert message_split(T, sequence_parallel=False, scatter_gather=False) == 1
    assert message_split(T, sequence_parallel=False, scatter_gather=True) == T
    assert message_split(T, sequence_parallel=True, scatter_gather=False) == T


def test_the_gather_lands_on_every_stage_link_after_its_own_overhead() -> None:
    comm = tensor_parallel_comm(ACT, T, NVLINK, sequence_parallel=False, full_recompute=False, scatter_gather=True)
    links = (Link(0.01, 1e6, recv_overhead_ms=0.5), Link(0.02, 2e6))
    out = gathering(links, comm)
    assert [x.recv_overhead_ms for x in out] == pytest.approx([0.5 + ALLGATHER, ALLGATHER])
    assert [x.latency_ms for x in out] == [0.01, 0.02]
    none = tensor_parallel_comm(ACT, T, NVLINK, sequence_parallel=True, full_recompute=False, scatter_gather=True)
    assert gathering(links, none) is links
