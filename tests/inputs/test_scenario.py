"""Scenario loading: every documented key, and bad input named with its fix."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import SCENARIOS
from ppsim.costs import build_workload
from ppsim.errors import PpsimError, ScenarioError
from ppsim.inputs.scenario import load, parse_scenario
from ppsim.prediction import predict
from ppsim.trace.metrics import summarize

BASE = {
    "model": {"layers": 8, "hidden": 256, "heads": 4, "seq_len": 128, "vocab": 1000},
    "training": {"global_batch": 32, "micro_batch": 2},
    "pipeline": {"stages": 4, "schedule": "1f1b"},
    "data_parallel": 2,
}


def _with(path: str, value: object) -> dict:
    import copy

    data = copy.deepcopy(BASE)
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return data


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_scenarios_simulate_their_whole_plan(path: Path) -> None:
    """Every shipped scenario runs to the end: each rank executes exactly its lowered plan's actions,
    one after another on the compute lane, and the figures are finite and positive."""
    prediction = predict(load(path))
    trace, plan = prediction.trace, prediction.plan
    for r, planned in enumerate(plan.actions):
        ran = [sp for sp in trace.spans if sp.rank == r]
        assert sorted(str(sp.action) for sp in ran) == sorted(map(str, planned)), "each rank runs its whole plan"
        compute = sorted((sp for sp in ran if sp.lane == "compute"), key=lambda sp: (sp.start, sp.end))
        assert [sp.action for sp in compute] == [a for a in planned if a.lane == "compute"], "in plan order"
        assert all(a.end <= b.start + 1e-9 for a, b in zip(compute, compute[1:])), "one thing at a time"
    summary = summarize(trace)
    assert summary.step_time_ms > 0 and 0 <= summary.bubble_fraction < 1
    assert summary.num_ranks == load(path).pipeline.stages
    if summary.mfu is not None:
        assert 0 < summary.mfu < 1


def test_microbatches_follow_from_the_global_batch() -> None:
    s = parse_scenario(BASE)
    assert s.microbatches == 32 // (2 * 2)
    assert s.global_batch == 32


@pytest.mark.parametrize(
    "path,value,field,words",
    [
        ("model.layerz", 3, "model.layerz", "unknown key in the scenario; did you mean layers?"),
        ("training.fp8_atention", True, "training.fp8_atention", "did you mean fp8_attention?"),
        ("training.zzz", 1, "training.zzz", "unknown key in the scenario; remove it or use one of: global_batch"),
        ("training", "abc", "training", "must be a section of keys (a mapping), got 'abc'"),
        ("pipeline.stages", "four", "pipeline.stages", "integer"),
        ("pipeline.stages", 0, "pipeline.stages", "greater than 0"),
        ("model.dtype", "int8", "model.dtype", "bf16"),
        ("pipeline.partition", "uniformish", "pipeline.partition", "uniform"),
        ("model.heads", 3, "model", "multiple of heads"),
        ("hardware.device", "tpu-v9", "hardware.device", "a100-80g"),
        ("training.global_batch", 30, "training.global_batch", "not a multiple"),
        ("pipeline.comm", "carrier-pigeon", "pipeline.comm", "rendezvous"),
    ],
)
def test_bad_values_name_the_field(path: str, value: object, field: str, words: str) -> None:
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(_with(path, value))
    assert exc.value.field == field
    assert words in str(exc.value)


def test_stages_not_dividing_layers_with_uniform_partition() -> None:
    data = _with("pipeline.partition", "uniform")
    data["pipeline"]["stages"] = 3
    with pytest.raises(ScenarioError, match="not divisible by stages x chunks") as exc:
        parse_scenario(data)
    assert exc.value.field == "pipeline.partition"
    assert "balanced" in str(exc.value)


def test_contradictory_batch_sizes_show_the_three_numbers() -> None:
    data = _with("pipeline.microbatches", 4)
    with pytest.raises(ScenarioError, match=r"2 x 4 x 2 = 16") as exc:
        parse_scenario(data)
    assert exc.value.field == "training.global_batch"


def test_explicit_partition_must_cover_the_layers() -> None:
    with pytest.raises(ScenarioError, match="sum to 7"):
        parse_scenario(_with("pipeline.partition", [2, 2, 2, 1]))
    with pytest.raises(ScenarioError, match="one count per virtual stage"):
        parse_scenario(_with("pipeline.partition", [4, 4]))


def test_costs_lists_need_one_value_per_stage() -> None:
    data = {"pipeline": {"stages": 4}, "costs": {"forward_ms": [1, 1, 1], "backward_ms": 2}}
    with pytest.raises(ScenarioError, match="give one number or 4 values") as exc:
        parse_scenario(data)
    assert exc.value.field == "costs.forward_ms"


def test_weight_grad_cannot_exceed_backward() -> None:
    data = {"pipeline": {"stages": 2}, "costs": {"forward_ms": 1, "backward_ms": 2, "weight_grad_ms": 3}}
    with pytest.raises(ScenarioError, match="exceeds backward_ms"):
        parse_scenario(data)


def test_a_scenario_needs_a_model_or_costs() -> None:
    with pytest.raises(ScenarioError, match="'model' section or a 'costs' section"):
        parse_scenario({"pipeline": {"stages": 2}})


def test_file_problems(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="does not exist"):
        load(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  layers: [1, 2\n")
    with pytest.raises(ScenarioError, match=r"malformed YAML at line \d+"):
        load(bad)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ScenarioError, match="is empty"):
        load(empty)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ScenarioError, match="must be a mapping"):
        load(listy)
    with pytest.raises(ScenarioError, match="is a directory"):
        load(tmp_path)


def test_overrides_replace_pipeline_keys_and_are_checked() -> None:
    s = parse_scenario(BASE)
    t = s.with_overrides(schedule="gpipe", microbatches=16, stages=2)
    assert (t.pipeline.schedule, t.microbatches, t.pipeline.stages) == ("gpipe", 16, 2)
    assert t.global_batch == 2 * 16 * 2
    with pytest.raises(ScenarioError, match="smaller than stages x chunks"):
        s.with_overrides(stages=16)


def test_interleaved_with_too_few_microbatches_is_refused() -> None:
    s = parse_scenario(BASE).with_overrides(schedule="interleaved-1f1b", chunks=2, microbatches=2)
    with pytest.raises(PpsimError, match="multiple of p"):
        predict(s)


def test_costs_replace_the_model_estimate() -> None:
    data = dict(BASE, costs={"forward_ms": [1, 2, 3, 4], "backward_ms": 5, "p2p_ms": 0.5})
    w = build_workload(parse_scenario(data))
    assert [c.forward_ms for c in w.costs.stages] == [1, 2, 3, 4]
    assert all(c.backward_ms == 5 for c in w.costs.stages)
    assert w.costs.p2p_ms(0) == pytest.approx(0.5)
    # with two chunks every chunk costs half its rank's figure
    w2 = build_workload(parse_scenario(data).with_overrides(schedule="interleaved-1f1b", chunks=2))
    assert [c.forward_ms for c in w2.costs.stages] == [0.5, 1, 1.5, 2, 0.5, 1, 1.5, 2]


# ----- declared ranges and sizes (issue 21) -----------------------------------------------------
_SECTIONS = {"Scenario": "## Top level", "ModelSpec": "## model", "TrainingSpec": "## training",
             "PipelineSpec": "## pipeline", "HardwareSpec": "## hardware", "LinkSpec": "### link",
             "CostsSpec": "## costs", "ClusterSpec": "## cluster"}


def _numeric_keys() -> list[tuple[type, str, str]]:
    from ppsim.inputs import scenario as mod

    out = []
    for name in _SECTIONS:
        cls = getattr(mod, name)
        out += [(cls, key, r) for key in cls.model_fields if (r := mod.valid_range(cls, key))]
    return out


def test_the_docs_state_each_numbers_declared_range() -> None:
    """docs/scenarios.md's type cell of every numeric key starts with the range the schema declares."""
    import re

    from conftest import ROOT

    lines = (ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8").splitlines()
    keys = _numeric_keys()
    assert len(keys) >= 25
    wrong = []
    for cls, key, expected in keys:
        start = lines.index(_SECTIONS[cls.__name__])
        row = next((line for line in lines[start:] if line.startswith(f"| `{key}` |")), None)
        cell = re.split(r"(?<!\\)\|", row)[2].strip() if row else None
        if cell is None or not cell.startswith(expected):
            wrong.append(f"{cls.__name__}.{key}: doc {cell!r}, schema {expected!r}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("cls, key, expected", _numeric_keys(), ids=lambda x: getattr(x, "__name__", str(x)))
def test_each_declared_range_is_what_is_checked(cls: type, key: str, expected: str) -> None:
    """Just inside each bound is accepted by the key's model, just outside refused."""
    import re

    from pydantic import ValidationError

    numbers = [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", expected)]
    is_int = expected.startswith("integer")
    low, high = numbers[0], numbers[-1] if len(numbers) > 1 else None
    strict_low = "<" in expected.split("x")[0] if "x ≤" in expected else expected.startswith("number >")
    required = {n: f for n, f in cls.model_fields.items() if f.is_required()}
    fill = {"forward_ms": 1, "backward_ms": 1, "bandwidth_gb_s": 1, "nodes": 1, "layers": 1, "hidden": 2**20,
            "heads": 2**16 if key == "kv_heads" else 1, "seq_len": 1, "vocab": 1}
    base = {n: fill[n] for n in required if n != key}
    if key == "full_attention_every":  # it says which layers skip the window, which must exist
        base["attention_window"] = 1
    if cls.__name__ == "Scenario":
        base["costs"] = {"forward_ms": 1, "backward_ms": 1}
    step = 1 if is_int else 1e-9 * max(1.0, abs(low))

    def ok(value: float) -> bool:
        try:
            cls.model_validate({**base, key: int(value) if is_int else value})
            return True
        except ValidationError:
            return False

    assert ok(low + step) and ok(low) is not strict_low and not ok(low - step)
    if high is not None:
        assert ok(high) and not ok(high + (1 if is_int else high * 1e-6))
    if not is_int:
        assert not ok(float("nan")) and not ok(float("inf"))


def test_a_plan_too_big_to_simulate_is_refused_at_once_naming_the_key() -> None:
    import time

    from ppsim.inputs.scenario import MAX_PLAN_ACTIONS

    for path, value, key in (("training.global_batch", 10**9, "training.global_batch"),
                             ("pipeline.microbatches", 10**8, "pipeline.microbatches")):
        data = _with(path, value)
        if path == "pipeline.microbatches":
            data["training"].pop("global_batch")
        t0 = time.perf_counter()
        with pytest.raises(ScenarioError, match=r"about \d(\.\d)? x 10\^\d+ actions .* at most 5 x 10\^6 .*reduce "
                                                + key.replace(".", r"\.")) as exc:
            parse_scenario(data)
        assert exc.value.field == key and time.perf_counter() - t0 < 1.0
    # just under the limit is accepted (and so not refused by the size alone)
    m = MAX_PLAN_ACTIONS // (6 * 4)
    data = _with("pipeline.microbatches", m)
    data["training"].pop("global_batch")
    assert parse_scenario(data).microbatches == m
    with pytest.raises(ScenarioError, match="reduce pipeline.microbatches"):
        parse_scenario(_with("pipeline.microbatches", m + 1) | {"training": {"micro_batch": 2}})


def test_a_cluster_too_big_is_refused_naming_its_size() -> None:
    data = _with("cluster", {"nodes": 20_000, "devices_per_node": 8})
    with pytest.raises(ScenarioError, match=r"20,000 nodes x 8 = 160,000 devices; at most 131,072") as exc:
        parse_scenario(data)
    assert exc.value.field == "cluster.nodes"
    with pytest.raises(ScenarioError, match=r"nics; at most 131,072.*cluster\.nics_per_node"):
        parse_scenario(_with("cluster", {"nodes": 1_000, "devices_per_node": 8, "nics_per_node": 1_000}))


def test_huge_counts_overrides_and_sweeps_are_refused_by_the_cli_within_a_second() -> None:
    import time

    from conftest import GPT_YAML, invoke
    from ppsim.cli import app

    for args in (["run", GPT_YAML, "--microbatches", "100000000"], ["plan", GPT_YAML, "--microbatches", "100000000"],
                 ["compare-schedules", GPT_YAML, "--microbatches", "100000000"], ["plan", GPT_YAML, "--stages", "99999"]):
        t0 = time.perf_counter()
        res = invoke(app, *args)
        assert res.exit_code == 1 and "Traceback" not in res.output, res.output
        assert ("at most 5 x 10^6" in res.output or "less than or equal to 10000" in res.output), res.output
        assert time.perf_counter() - t0 < 1.5


@pytest.mark.parametrize("key, value", [("link", 2.2250738585072e-309), ("efficiency", 5e-324)])
def test_a_rate_too_small_to_give_a_finite_time_is_refused_naming_its_key(key: str, value: float) -> None:
    """A subnormal bandwidth or efficiency passed "> 0" and made every transfer (or pass) infinite;
    the least value is now far below any machine's and above what overflows."""
    data = dict(BASE, hardware={"device": "a100-80g", **({"link": {"bandwidth_gb_s": value}} if key == "link"
                                                         else {"efficiency": value})})
    field = "hardware.link.bandwidth_gb_s" if key == "link" else "hardware.efficiency"
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
        parse_scenario(data)
    data["hardware"] = {"device": "a100-80g", **({"link": {"bandwidth_gb_s": 1e-6}} if key == "link"
                                                  else {"efficiency": 1e-6})}
    assert math.isfinite(summarize(predict(parse_scenario(data)).trace).step_time_ms)
