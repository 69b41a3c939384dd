"""The network model: max-min fair sharing of directed links, against hand-computed cases."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ppsim.sim.network import EPSILON_BYTES, Flow, Network, max_min_rates, run_flows


def test_two_flows_on_one_nic_each_get_half() -> None:
    ends = run_flows({"nic": 10.0}, [(0.0, Flow({"nic": 1}, 100)), (0.0, Flow({"nic": 1}, 100))])
    assert ends == pytest.approx([20.0, 20.0])


def test_a_flow_that_ends_speeds_the_other_up_at_that_instant() -> None:
    # both at 5 bytes/ms until the short one ends at 10 ms (50 bytes); the long one has 50 left at 10
    ends = run_flows({"nic": 10.0}, [(0.0, Flow({"nic": 1}, 50)), (0.0, Flow({"nic": 1}, 100))])
    assert ends == pytest.approx([10.0, 15.0])


def test_a_flow_that_starts_later_slows_the_first_from_then_on() -> None:
    # alone at 10 bytes/ms for 4 ms (40 bytes), then both at 5: the first's 60 left take 12 ms more
    ends = run_flows({"nic": 10.0}, [(0.0, Flow({"nic": 1}, 100)), (4.0, Flow({"nic": 1}, 100))])
    assert ends[0] == pytest.approx(16.0)
    assert ends[1] == pytest.approx(16.0 + 40 / 10)  # 60 sent by 16, the last 40 alone


def test_links_are_full_duplex_opposite_directions_do_not_share() -> None:
    capacity = {("a", "b"): 10.0, ("b", "a"): 10.0}
    ends = run_flows(capacity, [(0.0, Flow({("a", "b"): 1}, 100)), (0.0, Flow({("b", "a"): 1}, 100))])
    assert ends == pytest.approx([10.0, 10.0])


def test_three_flows_with_different_bottlenecks_are_max_min_fair() -> None:
    """L1 (10) carries x and y, L2 (4) carries y and z: L2 fills first at 2 each; x then takes
    the rest of L1, 8."""
    x, y, z = Flow({"L1": 1}, 1), Flow({"L1": 1, "L2": 1}, 1), Flow({"L2": 1}, 1)
    max_min_rates([x, y, z], {"L1": 10.0, "L2": 4.0})
    assert (x.rate, y.rate, z.rate) == pytest.approx((8.0, 2.0, 2.0))


def test_a_flow_of_weight_k_is_k_copies() -> None:
    one, two = Flow({"L": 2}, 1), Flow({"L": 1}, 1)
    max_min_rates([one, two], {"L": 9.0})
    assert (one.rate, two.rate) == pytest.approx((3.0, 3.0))  # 2 x 3 + 3 = 9


def test_latency_is_added_to_arrival_and_a_free_route_is_instant() -> None:
    ends = run_flows({"L": 10.0, "nvlink": math.inf},
                     [(1.0, Flow({"L": 1}, 100, latency_ms=0.5)), (2.0, Flow({"nvlink": 1}, 100, latency_ms=0.25))])
    assert ends == pytest.approx([11.5, 2.25])


def test_the_clock_cannot_go_back() -> None:
    net = Network({"L": 1.0})
    net.start(5.0, Flow({"L": 1}, 1))
    with pytest.raises(ValueError, match="cannot go back"):
        net.start(1.0, Flow({"L": 1}, 1))


@given(st.lists(st.tuples(st.floats(0, 50), st.floats(1, 1000), st.sampled_from(["a", "b", "ab"])), min_size=1, max_size=8))
def test_bytes_are_conserved_and_no_link_is_overfull(flows: list[tuple[float, float, str]]) -> None:
    """Every flow ends no sooner than alone on its slowest link, and the network never carries more
    than a link's capacity: the last end is at least the total bytes over each link's capacity."""
    capacity = {"a": 10.0, "b": 4.0}
    made = [(start, Flow({k: 1 for k in route}, n)) for start, n, route in flows]
    ends = run_flows(capacity, made)
    for (start, n, route), end in zip(flows, ends, strict=True):
        assert end >= start + n / min(capacity[k] for k in route) - 1e-6
    for link, cap in capacity.items():
        crossing = [(start, n) for start, n, route in flows if link in route]
        if crossing:
            first = min(s for s, _ in crossing)
            assert max(e for (s, n, r), e in zip(flows, ends, strict=True) if link in r) >= \
                first + sum(n for _, n in crossing) / cap - 1e-6


def _two_stages(fabric: bool):
    from ppsim.costs.table import CostTable, Fabric, FabricCollective, Link, Route, StageCost
    from ppsim.plan import lower, schedules
    from ppsim.sim import compute_ms, simulate

    stages = (StageCost(forward_ms=1, backward_ms=2), StageCost(forward_ms=1, backward_ms=2, allreduce_ms=30, grad_bytes=300))
    nic = Route({"nic": 1.0}, 0.0)
    table = CostTable(stages=stages, message_bytes=100, links=(Link(0.0, 10.0),), fabric=Fabric(
        {"nic": 10.0}, (nic,), (nic,), (None, FabricCollective(nic, 300, 0, 1))) if fabric else None)
    plan = lower(schedules.build("gpipe", 2, 1), 2, compute_ms(table), rendezvous=False)
    trace = simulate(plan, table, "async")
    return {(s.rank, s.action.kind.value): (s.start, s.end) for s in trace.spans}


def test_a_gradient_all_reduce_on_the_nic_of_a_message_slows_both_as_computed_by_hand() -> None:
    """Stage 1 ends its backward at 14 ms, posts the gradient message (100 bytes) and starts its
    all-reduce (300 bytes of ring traffic) on the same 10 bytes/ms NIC. Alone: the message arrives
    at 24, the all-reduce ends at 44. Sharing: both at 5 until the message ends at 34; the
    all-reduce's last 200 bytes then take 20 ms alone: 54."""
    static, flows = _two_stages(False), _two_stages(True)
    assert static[(1, "SEND_B")] == pytest.approx((14, 24))
    assert static[(1, "REDUCE_GRAD")] == pytest.approx((14, 44))
    assert flows[(1, "SEND_B")] == pytest.approx((14, 34))
    assert flows[(1, "REDUCE_GRAD")] == pytest.approx((14, 54))
    assert flows[(0, "RECV_B")][1] == pytest.approx(34) and flows[(0, "B")] == pytest.approx((34, 36))
    # before the overlap both agree: the activation crossed alone
    assert flows[(1, "RECV_F")] == static[(1, "RECV_F")]


def test_without_overlap_the_network_model_gives_the_static_trace() -> None:
    """A plan with no data parallelism: every message crosses its links alone or in order, so the
    flows and the static split give the same trace, span for span. (No gradient clipping: its norm's
    ring all-reduce runs on NCCL's channels through both NICs of a node on the fabric, at one
    boundary's link in the static model, 1e-7 ms apart here: the next test prices it.)"""
    from conftest import gpt
    from ppsim.inputs.scenario import parse_scenario
    from ppsim.prediction import predict

    data = gpt().model_dump(exclude_none=True)
    data["pipeline"].update(stages=4, microbatches=8, partition="uniform", schedule="1f1b")
    data["data_parallel"] = 1
    data["training"].pop("global_batch", None)
    data["training"]["grad_clip"] = 0
    data["hardware"] = {"device": "a100-80g"}
    data["cluster"] = {"nodes": 2, "devices_per_node": 2}
    spans = {}
    for network in ("static", "flows"):
        data["cluster"]["network"] = network
        trace = predict(parse_scenario(data)).trace
        assert trace.meta["network"] == network
        spans[network] = sorted((s.rank, s.lane, str(s.action), round(s.start, 9), round(s.end, 9)) for s in trace.spans)
    assert spans["static"] == spans["flows"]


def test_the_gradient_norm_all_reduce_is_a_flow_on_the_pipelines_ring() -> None:
    """Stage 0 (F 1, B 2, its norm 0.5 ms) and stage 1 (F 1, B 2, its norm 2 ms), one micro-batch,
    free messages: rank 0's backward ends at 6 and its norm at 6.5; rank 1's backward at 4 and its
    norm at 6. From 6.5 the norm's ring moves 30 bytes at 10 bytes/ms (3 ms) and pays 2 steps of
    0.5 ms: both ranks leave CLIP at 10.5, where a fixed clip_allreduce_ms of 1 would give 7.5."""
    from ppsim.costs.table import CostTable, Fabric, FabricCollective, Link, Route, StageCost
    from ppsim.plan import lower, schedules
    from ppsim.sim import compute_ms, simulate

    stages = (StageCost(forward_ms=1, backward_ms=2, clip_ms=0.5), StageCost(forward_ms=1, backward_ms=2, clip_ms=2))
    ring = Route({"nic": 1.0}, 0.5)
    ends = {}
    for fabric in (None, Fabric({"nic": 10.0}, (Route({}, 0.0),), (Route({}, 0.0),), (None, None),
                                FabricCollective(ring, 30, 2, 1))):
        table = CostTable(stages=stages, message_bytes=0, links=(Link(latency_ms=0.0),), clip_allreduce_ms=1.0, fabric=fabric)
        plan = lower(schedules.build("gpipe", 2, 1), 1, compute_ms(table), rendezvous=False, clip=True)
        trace = simulate(plan, table, "async")
        ends[fabric is not None] = {s.rank: (s.start, s.end) for s in trace.spans if s.action.kind.value == "CLIP"}
    assert ends[False] == {0: pytest.approx((6, 7.5)), 1: pytest.approx((4, 7.5))}
    assert ends[True] == {0: pytest.approx((6, 10.5)), 1: pytest.approx((4, 10.5))}


def _reference_arrivals(capacity: dict[str, float], flows: list[tuple[float, Flow]]) -> list[float]:
    """The plain algorithm the network's incremental one must match: at every start and every end,
    share out the rates of all active flows again; step to the next start or end."""
    from ppsim.sim.network import max_min_rates

    now, pending = 0.0, sorted(range(len(flows)), key=lambda i: flows[i][0])
    active: list[int] = []
    left = {i: float(f.nbytes) for i, (_, f) in enumerate(flows)}
    arrival: dict[int, float] = {}
    while pending or active:
        max_min_rates([flows[i][1] for i in active], capacity)
        rate = {i: flows[i][1].rate for i in active}
        ends = [now + (0.0 if rate[i] == float("inf") else left[i] / rate[i]) for i in active]
        next_end = min(ends, default=float("inf"))
        next_start = flows[pending[0]][0] if pending else float("inf")
        t = min(next_end, next_start)
        for i in active:
            left[i] -= 0.0 if rate[i] == float("inf") else rate[i] * (t - now)
        now = t
        for i, end in zip(list(active), ends, strict=True):
            if end <= now + 1e-12 * max(1.0, now):
                active.remove(i)
                arrival[i] = now + flows[i][1].latency_ms
        while pending and flows[pending[0]][0] <= now:
            active.append(pending.pop(0))
    return [arrival[i] for i in range(len(flows))]


@given(st.lists(st.tuples(st.floats(0, 50), st.floats(1, 1000), st.sampled_from(["a", "b", "c", "ab", "bc", "abc"]),
                          st.floats(0, 3)), min_size=1, max_size=10))
@example([(0.0, 1.0, "a", 0.0), (5.960464477539063e-08, 1.0, "a", 0.0)])
def test_sharing_only_the_changed_component_gives_what_sharing_everything_gives(
        flows: list[tuple[float, float, str, float]]) -> None:
    """The network shares out only the flows connected to a start or an end; the reference shares
    out every active flow at every event. Arrivals agree up to float rounding, and to the time a
    flow takes for the EPSILON_BYTES below which the network counts it finished (hypothesis found two
    1-byte flows 6e-8 ms apart on one link: the second's last 6e-7 bytes end it with the first)."""
    capacity = {"a": 10.0, "b": 4.0, "c": 7.0}

    def made() -> list[tuple[float, Flow]]:
        return [(start, Flow({k: 1 + (k == "b") for k in route}, n, lat)) for start, n, route, lat in flows]

    slowest = min(capacity.values()) / (2 * len(flows))  #: the least rate a flow gets: every flow on b, load 2
    assert run_flows(capacity, made()) == pytest.approx(_reference_arrivals(capacity, made()), rel=1e-9,
                                                         abs=max(1e-9, EPSILON_BYTES / slowest))
