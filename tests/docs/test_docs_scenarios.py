"""docs/scenarios.md stays in step with the schema, the device catalogue and the schedule registry."""

from __future__ import annotations

import re
import typing

import pytest
import yaml
from pydantic import BaseModel

from conftest import ROOT, table_rows
from ppsim.inputs import scenario as scenario_mod
from ppsim.inputs.hardware import DEVICES
from ppsim.inputs.scenario import Scenario, parse_scenario
from ppsim.plan.schedules import SCHEDULES

DOC = ROOT / "docs" / "scenarios.md"


@pytest.fixture(scope="module")
def doc() -> str:
    assert DOC.is_file(), f"{DOC} is missing"
    return DOC.read_text(encoding="utf-8")


def _nested_models(ann: object) -> list[type[BaseModel]]:
    """Pydantic model classes inside an annotation (through Optional, Union, list ...)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(ann):
        found += _nested_models(arg)
    return found


def _all_models() -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = []
    todo: list[type[BaseModel]] = [Scenario]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.append(cls)
        for field in cls.model_fields.values():
            todo += _nested_models(field.annotation)
    return seen


def test_model_walk_reaches_every_section() -> None:
    names = {cls.__name__ for cls in _all_models()}
    expected = {
        name
        for name, obj in vars(scenario_mod).items()
        if isinstance(obj, type) and issubclass(obj, BaseModel) and obj.__module__ == scenario_mod.__name__
        and not name.startswith("_")
    }
    assert expected <= names, f"models not reachable from Scenario: {sorted(expected - names)}"


@pytest.mark.parametrize("cls", _all_models(), ids=lambda c: c.__name__)
def test_every_key_is_documented(doc: str, cls: type[BaseModel]) -> None:
    assert cls.model_fields, f"{cls.__name__} has no fields"
    missing = [key for key in cls.model_fields if f"`{key}`" not in doc]
    assert not missing, f"{cls.__name__} keys not documented as `key` in {DOC.name}: {missing}"


def test_device_catalogue_matches(doc: str) -> None:
    rows = table_rows(doc)
    header = next((r for r in rows if "bf16" in r and any("device" in c for c in r)), None)
    assert header is not None, "no device catalogue table with a bf16 column"
    col = header.index("bf16")
    by_name = {r[0].strip("`"): r for r in rows if r and r[0].startswith("`") and len(r) == len(header)}
    for name, device in DEVICES.items():
        assert name in by_name, f"device {name!r} has no row in the catalogue table"
        cell = by_name[name][col]
        assert float(cell) == pytest.approx(device.peak_tflops["bf16"]), (
            f"device {name!r}: doc says bf16 {cell}, catalogue says {device.peak_tflops['bf16']}"
        )
        # the flat efficiency: bf16's, and FP8's after a slash where the device's best FP8 matmul gives its own
        figures = [float(x) for x in by_name[name][header.index("efficiency")].split("/")]
        own_fp8 = device.matmul_best is not None and device.matmul_best.get("fp8") is not None
        expected = [device.flat_efficiency("bf16")] + ([device.flat_efficiency("fp8")] if own_fp8 else [])
        assert figures == pytest.approx(expected, abs=5e-4), f"device {name!r}: doc says efficiency {figures}"


def test_every_schedule_is_documented(doc: str) -> None:
    assert SCHEDULES
    missing = [name for name in SCHEDULES if f"`{name}`" not in doc]
    assert not missing, f"schedules not documented: {missing}"


def _yaml_blocks(doc: str) -> list[str]:
    return re.findall(r"^```ya?ml[ \t]*\n(.*?)^```", doc, flags=re.MULTILINE | re.DOTALL)


def _scenario_blocks(doc: str) -> list[str]:
    out = []
    for block in _yaml_blocks(doc):
        data = yaml.safe_load(block)
        if isinstance(data, dict) and ("model" in data or "costs" in data):
            out.append(block)
    return out


def test_doc_has_scenario_examples(doc: str) -> None:
    blocks = _scenario_blocks(doc)
    assert len(blocks) >= 2, "expected at least a model example and a costs example"
    assert any("model" in yaml.safe_load(b) for b in blocks)
    assert any("costs" in yaml.safe_load(b) for b in blocks)


def test_scenario_examples_parse(doc: str) -> None:
    failures = []
    for i, block in enumerate(_scenario_blocks(doc)):
        try:
            parse_scenario(yaml.safe_load(block), source=f"{DOC.name} YAML block {i}")
        except Exception as exc:  # report every failing block at once
            failures.append(f"block {i}: {exc}")
    assert not failures, "\n".join(failures)
