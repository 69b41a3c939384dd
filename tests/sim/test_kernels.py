"""The clock-free kernel (ppsim.sim.immediate), the lean clocked kernel (ppsim.sim.clocked) and
SimPy give the same trace wherever they apply: every schedule, every send semantics, with and
without overlapped gradient reduction, clipping, data parallelism and memory, and every scenario
under scenarios/ (a network model's flows on the two kernels with a clock)."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SCENARIOS
from ppsim.costs import CostTable, Link, StageCost
from ppsim.errors import PlanError, PpsimError
from ppsim.inputs.scenario import load
from ppsim.plan import Action, Plan, lower, schedules
from ppsim.prediction import build
from ppsim.prediction.path import lower_built
from ppsim.sim import simulate
from ppsim.trace import Trace

TRAINING = [n for n, info in schedules.SCHEDULES.items() if info.training]


def _same(a: Trace, b: Trace) -> None:
    def key(span):  # an overlapped action's parts are Actions, where a plain action has a micro-batch
        return span.rank, span.lane, span.start, str(span.action)

    assert sorted(a.spans, key=key) == sorted(b.spans, key=key)
    assert a.counters == b.counters
    assert a.meta == b.meta


def _costs(n: int, *, overlap: bool, clip: float, seed: int) -> CostTable:
    """Uneven stages (so ranks drift apart) with activations, gradient reduction and overheads."""
    stages = tuple(
        StageCost(forward_ms=1.0 + 0.3 * ((s * 7 + seed) % 5), backward_ms=2.0 + 0.5 * ((s * 3 + seed) % 4),
                  weight_grad_ms=0.7 + 0.1 * (s % 3), optimizer_ms=0.4, activation_bytes=1000 + 10 * s,
                  allreduce_ms=1.5 + 0.2 * s, allreduce_buckets=1 + s % 3, clip_ms=0.05)
        for s in range(n))
    link = replace(Link.from_gb_s(10.0, 2.0), send_overhead_ms=0.01 * (seed % 3), recv_overhead_ms=0.02)
    return CostTable(stages=stages, message_bytes=4 << 20, links=(link,), clip_allreduce_ms=clip,
                     overlap_grad_reduce=overlap)


def _both(plan: Plan, costs: CostTable, comm: str) -> tuple[Trace | PlanError, Trace | PlanError]:
    """(SimPy's run, the clock-free kernel's); the clocked kernel's must equal SimPy's, span for span."""
    out: list[Trace | PlanError] = []
    for kernel in ("simpy", "immediate", "clocked"):
        try:
            out.append(simulate(plan, costs, comm, kernel=kernel))
        except PlanError as exc:
            out.append(exc)
    simpy_run, clocked_run = out[0], out[2]
    if isinstance(simpy_run, PlanError):
        assert isinstance(clocked_run, PlanError) and str(clocked_run) == str(simpy_run)
    else:
        assert isinstance(clocked_run, Trace)
        assert clocked_run.spans == simpy_run.spans and clocked_run.counters == simpy_run.counters
    return out[0], out[1]


@pytest.mark.parametrize("name", TRAINING + ["inference"])
@pytest.mark.parametrize("comm", ["async", "eager", "rendezvous"])
def test_every_schedule_and_semantics(name: str, comm: str) -> None:
    info = schedules.get(name)
    p, m = 4, 8
    v = info.chunks.default
    for overlap, clip, dp in ((False, 0.0, 1), (True, 0.3, 2), (False, 0.3, 4)):
        plan = lower(schedules.build(name, p, m, v), dp, rendezvous=comm == "rendezvous", clip=clip > 0)
        costs = _costs(plan.num_stages, overlap=overlap, clip=clip, seed=p + m)
        simpy_run, immediate_run = _both(plan, costs, comm)
        if isinstance(simpy_run, PlanError):  # a deadlock is found by both, at the same actions
            assert isinstance(immediate_run, PlanError) and str(immediate_run) == str(simpy_run)
            continue
        assert isinstance(immediate_run, Trace)
        _same(simpy_run, immediate_run)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(TRAINING), p=st.integers(2, 5), extra=st.integers(0, 6),
       comm=st.sampled_from(["async", "eager", "rendezvous"]), overlap=st.booleans(), seed=st.integers(0, 20))
def test_random_plans(name: str, p: int, extra: int, comm: str, overlap: bool, seed: int) -> None:
    info = schedules.get(name)
    v = info.chunks.default
    p += p % info.pipes  # each pipe over every rank
    m = 2 * p + extra
    m = info.microbatches.nearest(p, m, v) or m
    plan = lower(schedules.build(name, p, m, v), 2, rendezvous=comm == "rendezvous")
    simpy_run, immediate_run = _both(plan, _costs(plan.num_stages, overlap=overlap, clip=0.0, seed=seed), comm)
    if isinstance(simpy_run, PlanError):
        assert str(immediate_run) == str(simpy_run)
    else:
        _same(simpy_run, immediate_run)  # type: ignore[arg-type]


@pytest.mark.parametrize("comm", ["rendezvous", "async"])
def test_a_deadlock_is_found_by_both(comm: str) -> None:
    """Each rank waits for the other's message before sending its own: stuck under any semantics."""
    rows = ["0F0 0RECV_B0 0SEND_F0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"]
    plan = Plan("deadlock", 2, 1, 1, (0, 1), tuple(tuple(Action.parse(t) for t in r.split()) for r in rows), lowered=True)
    simpy_run, immediate_run = _both(plan, _costs(plan.num_stages, overlap=False, clip=0.0, seed=1), comm)
    assert isinstance(simpy_run, PlanError) and "deadlocks" in str(simpy_run)
    assert isinstance(immediate_run, PlanError)
    assert str(immediate_run) == str(simpy_run)
    assert immediate_run.detail == simpy_run.detail


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_scenario(path) -> None:
    s = load(path)
    b = build(s)
    if b.workload.costs.fabric is not None:  # a network model needs the clock: run it as static links too
        costs = replace(b.workload.costs, fabric=None)
    else:
        costs = b.workload.costs
    plan = lower_built(b)
    _same(simulate(plan, costs, s.pipeline.comm, kernel="simpy"), simulate(plan, costs, s.pipeline.comm))


def test_a_fabric_needs_the_clock() -> None:
    s = load(SCENARIOS / "megatron-gpt3-175b.yaml")
    b = build(s)
    assert b.workload.costs.fabric is not None
    with pytest.raises(PpsimError, match="fabric") as raised:
        simulate(lower_built(b), b.workload.costs, s.pipeline.comm, kernel="immediate")
    assert raised.value.field == "simulator.kernel"


CLUSTERS = [p for p in sorted(SCENARIOS.glob("*.yaml")) if load(p).cluster is not None]


@pytest.mark.parametrize("path", CLUSTERS, ids=lambda p: p.stem)
@pytest.mark.parametrize("comm", ["async", "eager", "rendezvous"])
def test_the_clocked_kernel_runs_a_fabric_as_simpy_does(path, comm: str) -> None:
    """Flows starting and ending in the same order give the same spans in the same order."""
    s = load(path).with_overrides(comm=comm)
    b = build(s)
    assert b.workload.costs.fabric is not None
    plan = lower_built(b)
    simpy_run = simulate(plan, b.workload.costs, comm, kernel="simpy")
    clocked_run = simulate(plan, b.workload.costs, comm)  # auto: the clocked kernel
    assert clocked_run.spans == simpy_run.spans
    assert clocked_run.counters == simpy_run.counters
    assert clocked_run.meta == simpy_run.meta


def test_the_kernel_is_chosen_by_the_scenario_and_the_command_line(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """simulator.kernel and --kernel choose what runs the step: SimPy itself gives the same figures;
    without SimPy installed, choosing it is one line naming the extra; no clock on a fabric, one line too."""
    import json

    import yaml

    from conftest import invoke
    from ppsim.cli import app

    tiny = SCENARIOS / "tiny-cpu.yaml"
    default = json.loads(invoke(app, "run", tiny, "--json").stdout)
    with_simpy = json.loads(invoke(app, "run", tiny, "--json", "--kernel", "simpy").stdout)
    assert with_simpy == default
    data = yaml.safe_load(tiny.read_text())
    data["simulator"] = {"kernel": "simpy"}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    assert load(tmp_path / "s.yaml").simulator.kernel == "simpy"
    assert json.loads(invoke(app, "run", tmp_path / "s.yaml", "--json").stdout)["step_time_ms"] == default["step_time_ms"]
    monkeypatch.setitem(sys.modules, "simpy", None)  # as if the extra were not installed
    monkeypatch.delitem(sys.modules, "ppsim.sim.simpy_kernel", raising=False)
    res = invoke(app, "run", tiny, "--kernel", "simpy")
    assert res.exit_code == 1 and "pip install 'ppsim[reference]'" in res.output and "Traceback" not in res.output
    res = invoke(app, "run", SCENARIOS / "megatron-gpt3-175b.yaml", "--kernel", "immediate")
    assert res.exit_code == 1 and "simulator.kernel" in res.output and "fabric" in res.output
    assert invoke(app, "run", tiny, "--kernel", "nope").exit_code == 2
