"""Shared helpers for the tests: paths, the CLI runner, uniform costs, and the docs' command blocks."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest
import typer
from hypothesis import reject, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from ppsim.costs import CostTable, Link, StageCost
from ppsim.errors import ScenarioError, ScheduleError
from ppsim.gc_pause import allow_gc_pauses
from ppsim.inputs.scenario import Scenario, load
from ppsim.plan import Plan, lower, schedules
from ppsim.search.tune.space import SearchSpace
from ppsim.sim import compute_ms, simulate
from ppsim.trace import Trace

#: no per-example deadline: these are not timing tests, and on a shared two-core machine running the
#: suite on both cores one example may take several times its usual 200 ms (a flaky failure)
settings.register_profile("ppsim", deadline=None)
#: CI's: the same examples on every run (a failure there reproduces), printed so they can be replayed
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("PPSIM_HYPOTHESIS_PROFILE", "ppsim"))

#: the test processes are ppsim's own, as the command's is: ppsim may pause their collector around its
#: passes (tests/cli/test_gc_pause.py checks the library's default, which does not)
allow_gc_pauses()

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
DATA = Path(__file__).resolve().parent / "data"
GPT_YAML = SCENARIOS / "gpt.yaml"  #: GPT-3 13B on 64 A100s, 8 stages x 8 replicas, 1F1B


@st.composite
def built_plans(draw: st.DrawFn) -> Plan:
    """A registered schedule's compute-only plan at sizes it takes: p = 1-5 ranks (or the ranks it
    runs), 1-3 chunks as it takes them, and p x chunks micro-batches or up to 6 more, moved to the
    nearest count it takes."""
    name = draw(st.sampled_from(sorted(schedules.SCHEDULES)))
    info = schedules.get(name)
    p = info.ranks or info.pipes * draw(st.integers(1, 5 // info.pipes))  # each pipe over every rank
    v = info.chunks_for(draw(st.integers(1, 3)))
    m = p * v + draw(st.integers(0, 6))
    m = info.microbatches.nearest(p, m, v) or m
    try:
        return info.build(p, m, v)
    except ScheduleError:  # none today at these sizes; a schedule that refuses some is not a passing example
        reject()


def bench_module(name: str) -> ModuleType:
    """bench/NAME.py loaded as a module (its rules and data, to check them by hand)."""
    path = ROOT / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def device_entry(extra: str) -> str:
    """A device file of one H100-like entry, ``mine``, with ``extra`` (indented YAML lines) added:
    what a test of the catalogue's checks writes around the key it tries."""
    return ("mine:\n  peak_tflops: {bf16: 989, fp16: 989, fp32: 67, fp8: 1979}\n  memory_gb: 80\n"
            "  hbm_gb_s: 3350\n  efficiency: 0.55\n  intra_node: {bandwidth_gb_s: 450, latency_us: 3}\n"
            f"  inter_node: {{bandwidth_gb_s: 50, latency_us: 5}}\n{extra}\n")


def refused_device_file(tmp_path: Path, extra: str, message: str) -> ScenarioError:
    """The error reading a device file of :func:`device_entry` (``extra`` added) raises, its text
    matching ``message``: what a test of the catalogue's checks asserts."""
    from ppsim.inputs.hardware import read_devices

    path = tmp_path / "devices.yaml"
    path.write_text(device_entry(extra))
    with pytest.raises(ScenarioError, match=message) as err:
        read_devices(path)
    return err.value


@cache
def gpt() -> Scenario:
    """scenarios/gpt.yaml, loaded once (a Scenario is immutable)."""
    return load(GPT_YAML)


def invoke(app: typer.Typer, *args: str | Path, **kwargs: object) -> Result:
    """Run a command of ``app`` (ppsim's or ppexec's) in-process, as its console script would."""
    return CliRunner().invoke(app, [str(a) for a in args], **kwargs)  # type: ignore[arg-type]


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
    plan = lower(schedules.build(name, p, m, v), dp, compute_ms(costs), rendezvous=comm == "rendezvous")
    return simulate(plan, costs, comm)


def sh_commands(doc: Path, languages: str = "sh") -> list[str]:
    """Every command line of a Markdown file's code blocks in ``languages`` (``sh``, ``bash|sh``), in order."""
    blocks = re.findall(rf"```(?:{languages})\n(.*?)```", doc.read_text(encoding="utf-8"), flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def table_rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row in ``text`` (a ``\\|`` inside a cell does not split it)."""
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            for line in text.splitlines() if line.lstrip().startswith("|")]


# ----- a small tuner search, shared by the tune tests ----------------------------------------------------
def small_base() -> dict:
    """gpt.yaml's 13B model with a batch of 16 sequences: small enough to simulate every plan."""
    data = load(GPT_YAML).model_dump(exclude_none=True)
    data["training"]["global_batch"] = 16
    data["pipeline"].pop("microbatches", None)
    data["data_parallel"] = 1
    return data


SPACE = SearchSpace(gpus=8, micro_batches=(1, 2), schedules=("1f1b", "interleaved-1f1b", "zb-h1"))


@cache
def small_search() -> tuple:
    """(base, candidates, every candidate evaluated) of :data:`SPACE` on :func:`small_base`."""
    from ppsim.inputs.scenario import parse_scenario
    from ppsim.search.tune.executors import run_local
    from ppsim.search.tune.space import candidates

    base = small_base()
    cands = candidates(parse_scenario(base), SPACE)
    return base, cands, run_local(base, cands, 1)


@pytest.fixture(scope="module")
def small_yaml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`small_base` as a scenario file."""
    import yaml

    path = tmp_path_factory.mktemp("tune") / "small.yaml"
    path.write_text(yaml.safe_dump(small_base()))
    return path
