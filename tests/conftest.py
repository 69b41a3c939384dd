"""Shared helpers for the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from ppsim import schedules
from ppsim.costs import CostTable, Link, StageCost
from ppsim.passes import lower
from ppsim.sim import simulate
from ppsim.trace import Trace

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"


def uniform_costs(num_stages: int, forward: float, backward: float, weight_grad: float = 0.0,
                  p2p: float = 0.0, chunks: int = 1, activation_bytes: int = 0) -> CostTable:
    """Every virtual stage costs forward/backward divided by the chunk count; p2p is pure latency."""
    stage = StageCost(
        forward_ms=forward / chunks,
        backward_ms=backward / chunks,
        weight_grad_ms=weight_grad / chunks,
        activation_bytes=activation_bytes,
    )
    return CostTable(stages=(stage,) * num_stages, message_bytes=0, links=(Link(latency_ms=p2p),))


def run_schedule(name: str, p: int, m: int, v: int = 1, *, forward: float = 1.0, backward: float = 2.0,
                 weight_grad: float = 0.0, p2p: float = 0.0, comm: str = "rendezvous", dp: int = 1) -> Trace:
    costs = uniform_costs(p * v, forward, backward, weight_grad, p2p, v)
    plan = lower(schedules.build(name, p, m, v), dp, costs.compute_ms, rendezvous=comm == "rendezvous")
    return simulate(plan, costs, comm)


@pytest.fixture
def gpt_yaml() -> Path:
    return SCENARIOS / "gpt.yaml"
