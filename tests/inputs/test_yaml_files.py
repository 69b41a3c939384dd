"""Files users write are read strictly: a repeated key, or nesting too deep, is one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from conftest import GPT_YAML, device_entry
from ppsim.cli import app
from ppsim.errors import ScenarioError
from ppsim.inputs.hardware import read_devices
from ppsim.inputs.profile import load_profile
from ppsim.inputs.scenario import load


def _run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_a_key_given_twice_names_the_key_and_both_lines(tmp_path: Path) -> None:
    text = GPT_YAML.read_text()
    path = tmp_path / "twice.yaml"
    path.write_text(text + "pipeline:\n  stages: 2\n")
    first = 1 + next(i for i, line in enumerate(text.splitlines()) if line.startswith("pipeline:"))
    second = len(text.splitlines()) + 1
    with pytest.raises(ScenarioError, match=rf"key 'pipeline' appears twice \(lines {first} and {second}\); keep one"):
        load(path)
    before = path.read_text()
    res = _run("run", str(path))
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "appears twice" in res.output and len(res.output.strip().splitlines()) <= 3
    assert path.read_text() == before  # nothing the user wrote is touched


def test_nesting_too_deep_to_read_is_an_error_not_a_recursion_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("model: " + "[" * 20000 + "]" * 20000 + "\n")
    with pytest.raises(ScenarioError, match="nested too deeply"):
        load(path)
    res = _run("run", str(path))
    assert res.exit_code == 1 and "Traceback" not in res.output


def test_device_and_profile_files_refuse_repeated_keys_too(tmp_path: Path) -> None:
    devices = tmp_path / "devices.yaml"
    devices.write_text("mine:\n  memory_gb: 80\n  memory_gb: 40\n")
    with pytest.raises(ScenarioError, match=r"key 'memory_gb' appears twice \(lines 2 and 3\)"):
        read_devices(devices)
    profile = tmp_path / "p.yaml"
    profile.write_text("format: x\nformat: y\n")
    with pytest.raises(ScenarioError, match=r"key 'format' appears twice \(lines 1 and 2\)"):
        load_profile(profile)


@pytest.mark.parametrize("entry, key", [
    ("memory_gb: -1", "memory_gb"), ("memory_gb: 0", "memory_gb"), ("memory_gb: .nan", "memory_gb"),
    ("memory_gb: .inf", "memory_gb"), ("hbm_gb_s: 0", "hbm_gb_s"), ("hbm_gb_s: .nan", "hbm_gb_s"),
    ("efficiency: -1", "efficiency"), ("efficiency: 0", "efficiency"), ("efficiency: 1.5", "efficiency"),
    ("peak_tflops: {bf16: 0, fp16: 1, fp32: 1}", "peak_tflops.bf16"),
    ("peak_tflops: {bf16: .nan, fp16: 1, fp32: 1}", "peak_tflops.bf16"),
    ("inter_node: {bandwidth_gb_s: 0, latency_us: 5}", "inter_node.bandwidth_gb_s"),
    ("inter_node: {bandwidth_gb_s: 25, latency_us: -5}", "inter_node.latency_us"),
    ("descripton: typo", "descripton"),
    ("flash_attention: {source: x, forward: 1.5, backward: 0.3}", "flash_attention.forward"),
    ("flash_attention: {source: x, forward: 0.5}", "flash_attention.backward"),
    ("flash_attention: {forward: 0.5, backward: 0.3}", "flash_attention needs a source"),
    ("flash_attention: {source: x, forward: 0.5, backward: 0.3, causal: 1}", "flash_attention has an unknown key"),
])
def test_a_device_file_refuses_nonsense_naming_the_key(tmp_path: Path, entry: str, key: str) -> None:
    good = {"peak_tflops": "{bf16: 1, fp16: 1, fp32: 1}", "memory_gb": "80", "hbm_gb_s": "2000", "efficiency": "0.5",
            "intra_node": "{bandwidth_gb_s: 300, latency_us: 3}", "inter_node": "{bandwidth_gb_s: 25, latency_us: 5}"}
    name = entry.split(":")[0]
    lines = [f"  {k}: {v}" for k, v in good.items() if k != name] + [f"  {entry}"]
    path = tmp_path / "dev.yaml"
    path.write_text("mine:\n" + "\n".join(lines) + "\n")
    with pytest.raises(ScenarioError, match=key.replace(".", r"\.")):
        read_devices(path)


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_nan_and_inf_are_refused_in_a_scenario_by_name(tmp_path: Path, value: str) -> None:
    text = GPT_YAML.read_text().replace("pipeline:\n", "pipeline:\n  memory_budget: " + value + "\n", 1)
    path = tmp_path / "nan.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match="memory_budget"):
        load(path)


def test_a_device_file_of_one_entry_is_named_as_its_entry_in_the_costs_line(tmp_path: Path) -> None:
    """A scenario that names no device and gives a file of one (``mine``) is priced on that entry,
    and says so: the costs line names it, not the default device the scenario did not choose."""
    from ppsim.prediction import predict

    (tmp_path / "dev.yaml").write_text(device_entry(""))
    data = {"model": {"layers": 2, "hidden": 512, "heads": 8, "seq_len": 256, "vocab": 1000},
            "pipeline": {"stages": 2, "microbatches": 2}, "hardware": {"device_file": "dev.yaml"}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    meta = predict(load(path)).trace.meta
    assert meta["costs_source"].startswith("datasheet: mine's 989 TFLOP/s bf16 peak")
