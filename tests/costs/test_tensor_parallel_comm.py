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


# ----- the userbuffers overlap (training.tp_comm_overlap) -----------------------------------------
def test_an_overlapped_collective_exposes_what_its_gemm_cannot_cover() -> None:
    """t chunks around the ring: the pair takes max(comm, GEMM) + min(comm, GEMM) / t."""
    from ppsim.costs.tensor_parallel import overlapped_ms

    assert overlapped_ms(2.0, 8.0, 4) == pytest.approx(2.0 / 4)  # hidden but for one chunk
    assert overlapped_ms(8.0, 2.0, 4) == pytest.approx(8.0 + 2.0 / 4 - 2.0)  # the GEMM too short
    assert overlapped_ms(0.0, 5.0, 4) == 0.0


def test_the_overlap_hides_a_blocks_collectives_behind_its_linear_layers() -> None:
    """GPT block, h = 4096, t = 4, sequence parallel, flat efficiency 0.5 on the H100, its NVLink at
    450 GB/s: per pass each of the four linear layers hides a quarter of the pass's collectives;
    the stage's forward shrinks by its blocks x (whole - exposed)."""
    from ppsim.costs.tensor_parallel import overlapped_ms
    from ppsim.inputs.scenario import parse_scenario
    from ppsim.prediction import build

    def stage(overlap: bool):
        return build(parse_scenario({
            "name": "ub", "model": {"layers": 8, "hidden": 4096, "heads": 32, "seq_len": 2048, "vocab": 32768,
                                    "dropout": False},
            "pipeline": {"stages": 2, "microbatches": 4, "partition": "uniform"},
            "training": {"micro_batch": 1, "flash_attention": True, "sequence_parallel": True,
                         "tp_comm_overlap": overlap},
            "tensor_parallel": 4, "hardware": {"device": "h100-sxm", "efficiency": 0.5}})).workload.costs.stages[1]

    plain, hidden = stage(False), stage(True)
    tokens, h, f, t = 2048, 4096, 4 * 4096, 4
    gemm_ms = [2 * tokens * i * o / t / (989e12 * 0.5 / 1e3) for i, o in ((h, 3 * h), (h, h), (h, f), (f, h))]
    per_block = plain.forward_comm_ms / 4
    exposed = sum(overlapped_ms(per_block / 4, g, t) for g in gemm_ms)
    assert hidden.forward_comm_ms == pytest.approx(4 * exposed)
    assert plain.forward_ms - hidden.forward_ms == pytest.approx(4 * (per_block - exposed))
    assert hidden.backward_comm_ms < plain.backward_comm_ms


def test_the_overlap_needs_sequence_parallelism() -> None:
    from ppsim.errors import ScenarioError
    from ppsim.inputs.scenario import parse_scenario

    with pytest.raises(ScenarioError, match="needs tensor_parallel > 1") as err:
        parse_scenario({"name": "ub", "model": {"layers": 4, "hidden": 1024, "heads": 16, "seq_len": 1024,
                                                "vocab": 1024},
                        "training": {"tp_comm_overlap": True}, "tensor_parallel": 2})
    assert err.value.field == "training.tp_comm_overlap"
