"""Every trace of every scenario, and of every schedule under every send semantics, is exactly what it
was when tests/data/trace_digests.json was written: spans in order with their floats to the last bit,
counters and meta. A refactor of the simulator or of the lowering must leave it alone; a change that
means to move a trace regenerates the file (``PPSIM_UPDATE_GOLDEN=1 pytest tests/sim/test_trace_digests.py``)
and says why in its commit. The same cases run every action through the engine's handlers
(``simulate(..., inline=False)``) and give the inline paths' traces exactly."""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path

import pytest

from conftest import DATA, SCENARIOS, run_schedule, uniform_costs
from ppsim.inputs.scenario import load
from ppsim.plan import lower, schedules
from ppsim.prediction import predict
from ppsim.sim import compute_ms, simulate
from ppsim.trace import Trace

DIGESTS = DATA / "trace_digests.json"
TRAINING = sorted(n for n, info in schedules.SCHEDULES.items() if info.training)
COMMS = ("async", "eager", "rendezvous")


def digest(trace: Trace) -> str:
    """SHA-256 of the spans in their order (floats as repr: every bit), the counters and the meta."""
    h = hashlib.sha256()
    for s in trace.spans:
        h.update(repr((s.rank, s.lane, str(s.action), s.start, s.end, s.bytes, s.peer)).encode())
    for c in trace.counters:
        h.update(repr((c.rank, c.name, c.unit, c.points)).encode())
    h.update(json.dumps(trace.meta, sort_keys=True, default=repr).encode())
    return h.hexdigest()


def _schedule_case(name: str, comm: str) -> Trace:
    info = schedules.get(name)
    v = info.chunks.default
    p = info.ranks or 4
    m = info.microbatches.nearest(p, 2 * p * v, v) or 2 * p * v
    return run_schedule(name, p, m, v, forward=1.3, backward=2.1, weight_grad=0.9 if info.splits_backward else 0.0,
                        p2p=0.2, comm=comm, dp=2)


def _simulated(case: object, inline: bool) -> Trace:
    """The case's step simulated with the rank's inline paths, or with every action through its handler."""
    if isinstance(case, tuple):
        name, comm = case
        info = schedules.get(name)
        v = info.chunks.default
        p = info.ranks or 4
        m = info.microbatches.nearest(p, 2 * p * v, v) or 2 * p * v
        costs = uniform_costs(p * v, 1.3, 2.1, 0.9 if info.splits_backward else 0.0, 0.2, v)
        plan = lower(schedules.build(name, p, m, v), 2, compute_ms(costs), rendezvous=comm == "rendezvous")
        return simulate(plan, costs, comm, inline=inline)
    prediction = predict(load(case))  # type: ignore[arg-type]  # a scenario's path
    return simulate(prediction.plan, prediction.workload.costs, prediction.scenario.pipeline.comm, inline=inline)


CASES = ([(f"scenario:{p.stem}", p) for p in sorted(SCENARIOS.glob("*.yaml"))]
         + [(f"schedule:{n}:{c}", (n, c)) for n in TRAINING for c in COMMS])


def _trace(case: object) -> Trace:
    if isinstance(case, tuple):
        return _schedule_case(*case)
    return predict(load(case)).trace  # type: ignore[arg-type]  # a scenario's path


@cache
def _stored() -> dict[str, str]:
    return json.loads(DIGESTS.read_text()) if DIGESTS.is_file() else {}


@pytest.mark.parametrize(("key", "case"), CASES, ids=[k for k, _ in CASES])
def test_the_trace_is_the_one_recorded(key: str, case: object) -> None:
    got = digest(_trace(case))
    if os.environ.get("PPSIM_UPDATE_GOLDEN") == "1":
        stored = json.loads(DIGESTS.read_text()) if DIGESTS.is_file() else {}
        stored[key] = got
        DIGESTS.write_text(json.dumps(dict(sorted(stored.items())), indent=1) + "\n")
        return
    assert key in _stored(), f"no digest recorded for {key}: run with PPSIM_UPDATE_GOLDEN=1"
    assert got == _stored()[key], f"{key}: the trace changed"


@pytest.mark.parametrize(("key", "case"), CASES, ids=[k for k, _ in CASES])
def test_the_handlers_give_the_inline_paths_trace(key: str, case: object) -> None:
    inline, handled = _simulated(case, True), _simulated(case, False)
    assert handled.spans == inline.spans  # in the same order, every float the same
    assert handled.counters == inline.counters and handled.meta == inline.meta
    assert digest(handled) == digest(inline)


def test_every_recorded_digest_has_its_case() -> None:
    assert set(_stored()) == {k for k, _ in CASES}


@pytest.mark.parametrize("seed", ["1", "2"])
def test_a_scenarios_trace_does_not_hang_on_pythons_hashing(seed: str) -> None:
    """Every scenario's trace under another ``PYTHONHASHSEED`` (a fresh process: string hashes, and
    so the order of sets of strings, change with it) is the one recorded: nothing the prediction
    picks may depend on that order (a stage of two MoE kinds once paired whichever came first)."""
    import subprocess
    import sys

    here = Path(__file__).resolve().parent
    code = (f"import sys, json; sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]; "
            "from test_trace_digests import CASES, _trace, digest; "
            "print(json.dumps({k: digest(_trace(c)) for k, c in CASES if k.startswith('scenario:')}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": seed})
    got = json.loads(done.stdout)
    assert got and got == {k: v for k, v in _stored().items() if k in got}
