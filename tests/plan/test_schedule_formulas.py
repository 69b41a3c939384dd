"""Every schedule against its paper: idle time with F = I = W (or the paper's general formula) and
free, non-blocking communication, and the peak activations each declares (``peak_activations``)."""

from __future__ import annotations

import pytest

from conftest import run_schedule, uniform_costs
from ppsim.plan import schedules
from ppsim.trace import Trace
from ppsim.trace.metrics import summarize


def _run(name: str, p: int, m: int, v: int = 1, f: float = 1.0, i: float = 1.0, w: float = 1.0) -> Trace:
    """Chunk costs f, i, w (a rank with v chunks does v times the work per micro-batch)."""
    return run_schedule(name, p, m, v, forward=f * v, backward=(i + w) * v,
                        weight_grad=w * v if schedules.get(name).splits_backward else 0.0, comm="async")


def idle_per_rank(trace: Trace) -> list[float]:
    """Each rank's idle time in the step (step time minus its compute)."""
    s = summarize(trace)
    return [s.step_time_ms - r.busy_ms for r in s.per_rank]


def span_idle(trace: Trace) -> list[float]:
    """Each rank's gaps between its first compute and its last: the bubble the zero-bubble papers
    count (steps that follow each other without a barrier overlap the rest)."""
    out = []
    for r in range(trace.num_ranks):
        spans = [s for s in trace.spans if s.rank == r and s.lane == "compute"]
        out.append(max(s.end for s in spans) - min(s.start for s in spans) - sum(s.end - s.start for s in spans))
    return out


ZB_COSTS = [(1.0, 1.0, 1.0), (1.0, 1.0, 0.5), (2.0, 1.0, 1.0), (1.0, 2.0, 1.0), (1.0, 1.2, 0.8)]


@pytest.mark.parametrize("f,i,w", ZB_COSTS)
@pytest.mark.parametrize("p,m", [(4, 8), (4, 16), (8, 16), (8, 32)])
def test_zb_h1_bubble_is_the_papers(f: float, i: float, w: float, p: int, m: int) -> None:
    # Qi et al. 2024, Table 2: ZB-H1 idles (p - 1)(T_F + T_B - T_W) per stage, T_B the input grad
    for idle in idle_per_rank(_run("zb-h1", p, m, f=f, i=i, w=w)):
        assert idle == pytest.approx((p - 1) * (f + i - w), abs=1e-9)


@pytest.mark.parametrize("f,i,w", ZB_COSTS)
@pytest.mark.parametrize("p,m", [(4, 8), (4, 16), (8, 16), (8, 32)])
def test_zb_h2_bubble_is_the_papers(f: float, i: float, w: float, p: int, m: int) -> None:
    # Table 2: ZB-H2 idles (p - 1)(T_F + T_B - 2 T_W) within a stage's span (m >= 2p - 1, 2W <= F + I)
    trace = _run("zb-h2", p, m, f=f, i=i, w=w)
    assert max(span_idle(trace)) == pytest.approx((p - 1) * (f + i - 2 * w), abs=1e-9)
    # one isolated step still pays the warm-up: its makespan is m (F + I + W) + (p - 1) F
    assert summarize(trace).step_time_ms == pytest.approx(m * (f + i + w) + (p - 1) * f, abs=1e-9)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 16), (8, 16), (8, 32)])
def test_zb_v_has_no_bubble_in_a_span(p: int, m: int) -> None:
    # ZB-V (Qi et al. 2024, sec. 6): with F = I = W and m >= 2p - 1 every rank computes without a
    # gap; one isolated step idles (p - 1) chunk-units on every rank
    trace = _run("zb-v", p, m, 2)
    assert max(span_idle(trace)) == pytest.approx(0.0, abs=1e-9)
    for idle in idle_per_rank(trace):
        assert idle == pytest.approx(p - 1, abs=1e-9)


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (4, 16, 3), (8, 16, 2), (8, 32, 4)])
def test_interleaved_zb_has_zb_h1_bubble_over_chunks(p: int, m: int, v: int) -> None:
    # ZB-H1's (p - 1)(F + I - W) with chunk costs: a v-th of ZB-H1's on the same model
    trace = _run("interleaved-zb", p, m, v)
    for idle in idle_per_rank(trace):
        assert idle == pytest.approx(p - 1, abs=1e-9)


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (4, 16, 3), (8, 16, 2)])
def test_looped_bfs_has_gpipes_bubble_over_chunks(p: int, m: int, v: int) -> None:
    # breadth first: the fill and drain of GPipe once, at chunk granularity, (p - 1)(F + B)
    for idle in idle_per_rank(_run("looped-bfs", p, m, v)):
        assert idle == pytest.approx((p - 1) * 3, abs=1e-9)


BOUNDED = [name for name, info in schedules.SCHEDULES.items() if info.peak_activations is not None]


@pytest.mark.parametrize("name", BOUNDED)
@pytest.mark.parametrize("p,m", [(1, 1), (2, 1), (2, 4), (4, 3), (4, 8), (4, 6), (8, 16), (8, 32)])
def test_peak_activations_are_the_declared_bound(name: str, p: int, m: int) -> None:
    info = schedules.get(name)
    for v in sorted({info.chunks.minimum, info.chunks.default, 3} if not info.chunks.fixed else {info.chunks.default}):
        if not info.allows_chunks(p, v) or info.microbatches.nearest(p, m, v) is not None:
            continue
        peaks = [r.peak_activation_microbatches for r in summarize(_run(name, p, m, v)).per_rank]
        assert max(peaks) == pytest.approx(info.peak_activations(p, m, v), abs=1e-9), (name, p, m, v, peaks)


# Qi et al. 2024, Fig. 3 (p = 4, m = 8), the first and the last stage, 1-indexed micro-batches, B
# their input-grad pass: warm-up as in 1F1B (ZB-H1) or longer (ZB-H2), then the W's deferred
PAPER_FIGURE_3 = {
    ("zb-h1", 0): "F1 F2 F3 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 F8 B5 W5 B6 W6 B7 W7 B8 W8",
    ("zb-h1", 3): "F1 B1 F2 B2 F3 B3 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 F8 B8 W5 W6 W7 W8",
    ("zb-h2", 0): "F1 F2 F3 F4 F5 F6 F7 B1 W1 F8 B2 W2 B3 W3 B4 W4 B5 W5 B6 W6 B7 W7 B8 W8",
    ("zb-h2", 3): "F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 W1 F8 B8 W2 W3 W4 W5 W6 W7 W8",
}


@pytest.mark.parametrize("name, rank", list(PAPER_FIGURE_3), ids=lambda x: str(x))
def test_zero_bubble_orders_are_the_papers(name: str, rank: int) -> None:
    expected = [f"{rank}{'I' if t[0] == 'B' else t[0]}{int(t[1:]) - 1}" for t in PAPER_FIGURE_3[name, rank].split()]
    assert [str(a) for a in schedules.build(name, 4, 8).actions[rank]] == expected


@pytest.mark.parametrize("name, claim, ceiling", [("v-half", 0.5, 0.68), ("v-min", 2 / 3, 0.76)])
@pytest.mark.parametrize("p", [4, 6, 8, 12])
def test_controllable_memory_schedules_trade_memory_for_bubble(name: str, claim: float, ceiling: float, p: int) -> None:
    # Qi et al. 2024 ("Pipeline Parallelism with Controllable Memory"): V-Half holds half of
    # 1F1B's activations for about half its bubble, V-Min a third for about two thirds. ppsim's
    # plain repeated building block (ends not repacked) measures at most ``ceiling`` of 1F1B's idle
    m = 3 * p
    trace = _run(name, p, m, 2)
    one = _run("1f1b", p, m, f=2.0, i=2.0, w=2.0)  # the same model on one chunk per rank
    ratio = max(idle_per_rank(trace)) / max(idle_per_rank(one))
    assert claim - 0.25 < ratio <= ceiling
    holds = max(r.peak_activation_microbatches for r in summarize(trace).per_rank)
    assert holds == schedules.get(name).peak_activations(p, m, 2) <= p / (2 if name == "v-half" else 3) + 1.34


def _dualpipev(p: int, m: int, f: float, i: float, w: float, f_comm: float = 0.0, b_comm: float = 0.0,
               name: str = "dualpipev") -> Trace:
    """DualPipeV (or DualPipe) with chunk costs f, i (+ w = its full backward), w, each pass
    holding the given communication (what the other pass of an overlapped action hides)."""
    from dataclasses import replace

    from ppsim.plan import lower
    from ppsim.sim import compute_ms, simulate

    base = uniform_costs(2 * p, f, i + w, w)
    costs = replace(base, stages=tuple(replace(c, forward_comm_ms=f_comm, backward_comm_ms=b_comm,
                                               forward_overlap_ms=f_comm, backward_overlap_ms=b_comm)
                                       for c in base.stages))
    plan = lower(schedules.build(name, p, m), 1, compute_ms(costs), rendezvous=False)
    return simulate(plan, costs, "async")


@pytest.mark.parametrize("f,i,w", [(1.0, 1.0, 1.0), (1.0, 1.0, 0.5), (2.0, 2.0, 1.0), (1.0, 1.0, 0.2)])
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (8, 16), (8, 40)])
def test_dualpipev_bubble_is_the_papers(f: float, i: float, w: float, p: int, m: int) -> None:
    # DeepSeek-V3 (2024), Table 2 / DualPipe's README: DualPipeV idles (PP/2 - 1)(F&B + B - 3W) with
    # PP = 2p stages, F&B the overlapped pass, B the full backward; nothing hidden: F&B = F + B. The
    # formula holds for a forward as long as the input grad; with F != I the warm-up's critical path
    # differs (e.g. F = 2, I = W = 1, p = 2: 4 units where the formula says 3)
    b = i + w
    idle = idle_per_rank(_dualpipev(p, m, f, i, w))
    assert max(idle) == pytest.approx((p - 1) * ((f + b) + b - 3 * w), abs=1e-9)


@pytest.mark.parametrize("f,i,w", [(1.0, 1.0, 1.0), (1.0, 1.0, 0.5), (2.0, 2.0, 1.0), (1.0, 1.0, 0.2)])
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (8, 16), (8, 40), (16, 64)])
@pytest.mark.parametrize("f_comm,b_comm", [(0.0, 0.0), (0.3, 0.4)])
def test_dualpipe_bubble_is_the_papers(f: float, i: float, w: float, p: int, m: int, f_comm: float,
                                       b_comm: float) -> None:
    # DeepSeek-V3 (2024), Table 2: DualPipe idles (PP/2 - 1)(F&B + B - 3W) on PP ranks, F, B, W
    # those of a chunk (here every stage of both copies costs the same), F&B the overlapped pass
    b = i + w
    hidden = min(f_comm, b - b_comm) + min(b_comm, f - f_comm)
    idle = idle_per_rank(_dualpipev(p, m, f, i, w, f_comm, b_comm, name="dualpipe"))
    assert max(idle) == pytest.approx((p // 2 - 1) * ((f + b - hidden) + b - 3 * w), abs=1e-9)


@pytest.mark.parametrize("f_comm,b_comm", [(0.3, 0.0), (0.0, 0.4), (0.3, 0.4), (0.9, 0.9)])
@pytest.mark.parametrize("p", [2, 4, 8])
def test_dualpipev_overlap_hides_each_passs_communication_under_the_others_compute(
        f_comm: float, b_comm: float, p: int) -> None:
    f, i, w = 1.0, 1.0, 1.0
    trace = _dualpipev(p, 3 * p, f, i, w, f_comm, b_comm)
    b = i + w
    hidden = min(f_comm, b - b_comm) + min(b_comm, f - f_comm)
    overlapped = [s.duration for s in trace.spans if s.action.kind.value == "OVERLAP_F_B"]
    assert overlapped and all(d == pytest.approx(f + b - hidden) for d in overlapped)
    assert max(idle_per_rank(trace)) == pytest.approx((p - 1) * ((f + b - hidden) + b - 3 * w), abs=1e-9)


def _combined(name: str, p: int, m: int, v: int, f: float, b: float, f_comm: float, b_comm: float,
              hideable: bool = True) -> Trace:
    """``name`` with chunk costs f and b, each pass holding the given communication: all-to-alls
    an overlapped action can hide, or (``hideable`` False) collectives it cannot."""
    from dataclasses import replace

    from ppsim.plan import lower
    from ppsim.sim import compute_ms, simulate

    base = uniform_costs(p * v, f, b, 0.0)
    k = 1.0 if hideable else 0.0
    costs = replace(base, stages=tuple(replace(c, forward_comm_ms=f_comm, backward_comm_ms=b_comm,
                                               forward_overlap_ms=k * f_comm, backward_overlap_ms=k * b_comm)
                                       for c in base.stages))
    plan = lower(schedules.build(name, p, m, v), 1, compute_ms(costs), rendezvous=False)
    return simulate(plan, costs, "async")


@pytest.mark.parametrize("f_comm,b_comm", [(0.0, 0.0), (0.3, 0.4), (0.9, 0.2)])
@pytest.mark.parametrize("m", [1, 2, 5, 16])
def test_combined_1f1b_without_a_pipeline_is_megatrons_phases(f_comm: float, b_comm: float, m: int) -> None:
    """Megatron-Core's combined 1F1B on one stage (combined_1f1b_schedule_for_no_pipelining): F0
    alone, then each forward with the previous micro-batch's backward, each pass's communication
    hidden under the other's compute, then the last backward alone."""
    f, b = 1.0, 2.0
    hidden = min(f_comm, b - b_comm) + min(b_comm, f - f_comm)
    step = summarize(_combined("combined-1f1b", 1, m, 1, f, b, f_comm, b_comm)).step_time_ms
    assert step == pytest.approx(f + (m - 1) * (f + b - hidden) + b, abs=1e-9)


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (4, 16, 2), (2, 8, 3)])
def test_combined_1f1b_hides_what_interleaved_1f1b_exposes(p: int, m: int, v: int) -> None:
    """On a pipeline it is interleaved 1F1B with one more warm-up forward: without communication
    in the passes it takes the same step; with it, every steady-state pair hides some of it."""
    same = [summarize(_combined(name, p, m, v, 1.0, 2.0, 0.0, 0.0)).step_time_ms
            for name in ("combined-1f1b", "interleaved-1f1b")]
    assert same[0] == pytest.approx(same[1], abs=1e-9)
    hiding = [summarize(_combined(name, p, m, v, 1.0, 2.0, 0.3, 0.4)).step_time_ms
              for name in ("combined-1f1b", "interleaved-1f1b")]
    assert hiding[0] < hiding[1] - 0.3 * (m * v - p * v)  # at least the forward's share of the steady pairs


@pytest.mark.parametrize("name,p,m,v", [("combined-1f1b", 1, 6, 1), ("combined-1f1b", 4, 8, 2), ("dualpipev", 4, 8, 2)])
def test_an_overlapped_action_hides_all_to_alls_not_tensor_parallel_collectives(name: str, p: int, m: int,
                                                                                  v: int) -> None:
    """DeepSeek's DualPipe and Megatron's combined 1F1B interleave one micro-batch's dispatch and
    combine with the other's attention and MLP; the tensor-parallel collectives run on the compute's
    own stream, inside the attention and MLP: an overlapped action does not hide them."""
    f, b = 1.0, 2.0
    exposed = _combined(name, p, m, v, f, b, 0.3, 0.4, hideable=False)
    overlapped = [s.duration for s in exposed.spans if s.action.kind.value == "OVERLAP_F_B"]
    assert overlapped and all(d == pytest.approx(f + b) for d in overlapped)
    hidden = _combined(name, p, m, v, f, b, 0.3, 0.4)
    assert all(s.duration == pytest.approx(f + b - 0.7) for s in hidden.spans if s.action.kind.value == "OVERLAP_F_B")


def test_each_ranks_all_to_all_time_is_what_its_passes_do_not_hide() -> None:
    """Per rank, the all-to-alls inside its passes: every forward's and backward's in full, an
    overlapped action's less what the other pass hides (predicted: meta["alltoall_ms"])."""
    from ppsim.sim.durations import alltoall_ms

    p, m = 2, 4
    plain = _combined("interleaved-1f1b", p, m, 2, 1.0, 2.0, 0.3, 0.4)
    overlapped = _combined("combined-1f1b", p, m, 2, 1.0, 2.0, 0.3, 0.4)
    base = uniform_costs(2 * p, 1.0, 2.0, 0.0)
    from dataclasses import replace

    costs = replace(base, stages=tuple(replace(c, forward_comm_ms=0.3, backward_comm_ms=0.4, forward_overlap_ms=0.3,
                                               backward_overlap_ms=0.4) for c in base.stages))
    plan = schedules.build("interleaved-1f1b", p, m, 2)
    assert [alltoall_ms(costs, r) for r in plan.actions] == pytest.approx([2 * m * (0.3 + 0.4)] * p)
    combined = schedules.build("combined-1f1b", p, m, 2)
    pairs = [sum(1 for a in r if a.kind.value == "OVERLAP_F_B") for r in combined.actions]
    want = [2 * m * 0.7 - k * 0.7 for k in pairs]  # each pair hides both of its passes' all-to-alls here
    assert [alltoall_ms(costs, r) for r in combined.actions] == pytest.approx(want)
    assert plain.spans and overlapped.spans
