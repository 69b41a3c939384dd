"""DeepSpeed configs in a scenario: what is imported, DeepSpeed's batch rule, and the keys it ignores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from ppsim.cli import app
from ppsim.errors import ScenarioError
from ppsim.inputs.ds_config import batch_sizes
from ppsim.inputs.scenario import load, load_with_notes

runner = CliRunner()

#: the three-stage example DeepSpeed's pipeline tutorials show
TUTORIAL = {
    "train_batch_size": 32,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 8,
    "fp16": {"enabled": True},
    "zero_optimization": {"stage": 0},
    "pipeline": {"stages": 3, "stage_id": 0},
}

SCENARIO = """\
name: three-stage
model: {layers: 6, hidden: 256, heads: 4, seq_len: 128, vocab: 1024}
pipeline: {stages: 3, schedule: 1f1b, partition: uniform}
hardware: {device: a100-80g}
deepspeed: ds_config.json
"""


def write(tmp_path: Path, ds: dict, scenario: str = SCENARIO) -> Path:
    (tmp_path / "ds_config.json").write_text(json.dumps(ds))
    path = tmp_path / "scenario.yaml"
    path.write_text(scenario)
    return path


def test_the_tutorial_config_is_imported(tmp_path: Path) -> None:
    s, notes = load_with_notes(write(tmp_path, TUTORIAL))
    assert (s.training.micro_batch, s.microbatches, s.global_batch) == (4, 8, 32)
    assert s.model is not None and s.model.dtype == "fp16"
    assert s.training.zero_stage == 0
    text = " ".join(notes)
    assert "DeepSpeed ignores pipeline.stages (here 3, as the scenario's pipeline.stages)" in text
    assert "DeepSpeed ignores pipeline.stage_id" in text and "PipelineModule(num_stages=...)" in text


@given(st.integers(1, 64), st.integers(1, 64), st.integers(1, 16))
def test_any_two_batch_sizes_give_the_third(micro: int, acc: int, dp: int) -> None:
    train = micro * acc * dp
    assert batch_sizes(train, micro, None, dp, "c") == (train, micro, acc)
    assert batch_sizes(train, None, acc, dp, "c") == (train, micro, acc)
    assert batch_sizes(None, micro, acc, dp, "c") == (train, micro, acc)
    assert batch_sizes(train, micro, acc, dp, "c") == (train, micro, acc)


def test_contradictory_batch_sizes_name_the_three_numbers(tmp_path: Path) -> None:
    path = write(tmp_path, {**TUTORIAL, "train_batch_size": 64})
    with pytest.raises(ScenarioError, match=r"train_batch_size \(64\) != 4 x 8 x 1 = 32"):
        load(path)
    res = runner.invoke(app, ["run", str(path)])
    assert res.exit_code == 1 and "error: deepspeed:" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("change, words", [
    ({"bf16": {"enabled": True}}, "fp16 and bf16 are both enabled"),
    ({"zero_optimization": {"stage": 3}}, "zero_optimization.stage is 3, and DeepSpeed's pipeline engine refuses"),
    ({"train_micro_batch_size_per_gpu": 0}, "must be a positive integer"),
    ({"train_batch_size": None, "train_micro_batch_size_per_gpu": None}, "gives none of"),
])
def test_bad_configs_are_one_clear_error(tmp_path: Path, change: dict, words: str) -> None:
    ds = {**TUTORIAL, **change}
    res = runner.invoke(app, ["run", str(write(tmp_path, ds))])
    assert res.exit_code == 1, res.output
    assert words in " ".join(res.output.split()) and "Traceback" not in res.output


def test_the_scenario_and_the_config_must_agree(tmp_path: Path) -> None:
    scenario = SCENARIO.replace("pipeline: {", "training: {micro_batch: 2}\npipeline: {")
    with pytest.raises(ScenarioError, match=r"training.micro_batch: the scenario says training.micro_batch: 2 but "
                                            r"ds_config.json says train_micro_batch_size_per_gpu = 4"):
        load(write(tmp_path, TUTORIAL, scenario))


def test_checkpointing(tmp_path: Path) -> None:
    s, _ = load_with_notes(write(tmp_path, {**TUTORIAL, "pipeline": {"activation_checkpoint_interval": 1}}))
    assert s.training.recompute == "full"
    s, notes = load_with_notes(write(tmp_path, {**TUTORIAL, "activation_checkpointing": {"partition_activations": True}}))
    assert s.training.recompute == "none"
    assert any("checkpoints its layers when pipeline.activation_checkpoint_interval" in n for n in notes)


def test_ds_config_option_and_notes_on_the_command_line(tmp_path: Path) -> None:
    path = write(tmp_path, TUTORIAL, SCENARIO.replace("deepspeed: ds_config.json\n", ""))
    res = runner.invoke(app, ["run", str(path), "--ds-config", str(tmp_path / "ds_config.json"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output[res.output.index("{"):])
    assert (doc["microbatches"], doc["samples_per_step"]) == (8, 32)
    assert "note:" in res.output and "pipeline.stages" in res.output
    missing = runner.invoke(app, ["run", str(path), "--ds-config", str(tmp_path / "nope.json")])
    assert missing.exit_code == 1 and "does not exist" in missing.output


def test_a_config_that_is_not_json(tmp_path: Path) -> None:
    path = write(tmp_path, TUTORIAL)
    (tmp_path / "ds_config.json").write_text("{'not': json")
    with pytest.raises(ScenarioError, match="not valid JSON at line 1"):
        load(path)


def test_zero_overlap_and_bucket_size_are_imported(tmp_path: Path) -> None:
    ds = {**TUTORIAL, "zero_optimization": {"stage": 1, "overlap_comm": True, "reduce_bucket_size": 5e8}}
    s = load(write(tmp_path, ds))
    assert s.training.zero_stage == 1 and s.training.overlap_grad_reduce is True
    assert s.training.bucket_mb == pytest.approx(1000.0)  # 5e8 fp16 elements


@pytest.mark.parametrize("flag, reduce", [(True, "allreduce"), (False, "reduce_scatter"), (None, "allreduce")])
def test_zero_gradient_reduction_is_imported(tmp_path: Path, flag: bool | None, reduce: str) -> None:
    zero = {"stage": 1} | ({} if flag is None else {"use_multi_rank_bucket_allreduce": flag})
    s = load(write(tmp_path, {**TUTORIAL, "zero_optimization": zero}))
    assert s.training.zero_reduce == reduce


# ----- every key read is checked: one line naming it (issue 21) -------------------------------------
@pytest.mark.parametrize("change, key", [
    ({"gradient_clipping": "abc"}, "gradient_clipping"),
    ({"gradient_clipping": None}, "gradient_clipping"),
    ({"gradient_clipping": -1.0}, "gradient_clipping"),
    ({"gradient_clipping": float("nan")}, "gradient_clipping"),
    ({"gradient_clipping": True}, "gradient_clipping"),
    ({"fp16": {"enabled": "yes"}}, "fp16.enabled"),
    ({"fp16": True}, "fp16"),
    ({"bf16": [1]}, "bf16"),
    ({"train_batch_size": "32"}, "train_batch_size"),
    ({"train_micro_batch_size_per_gpu": 2.5}, "train_micro_batch_size_per_gpu"),
    ({"gradient_accumulation_steps": float("inf")}, "gradient_accumulation_steps"),
    ({"zero_optimization": 1}, "zero_optimization"),
    ({"zero_optimization": {"stage": "1"}}, "zero_optimization.stage"),
    ({"zero_optimization": {"stage": 7}}, "zero_optimization.stage"),
    ({"zero_optimization": {"stage": True}}, "zero_optimization.stage"),
    ({"zero_optimization": {"stage": 1, "overlap_comm": "yes"}}, "zero_optimization.overlap_comm"),
    ({"zero_optimization": {"stage": 1, "use_multi_rank_bucket_allreduce": 1}},
     "zero_optimization.use_multi_rank_bucket_allreduce"),
    ({"zero_optimization": {"stage": 1, "reduce_bucket_size": -5}}, "zero_optimization.reduce_bucket_size"),
    ({"zero_optimization": {"stage": 1, "reduce_bucket_size": None}}, "zero_optimization.reduce_bucket_size"),
    ({"zero_optimization": {"stage": 1, "reduce_bucket_size": "big"}}, "zero_optimization.reduce_bucket_size"),
    ({"pipeline": ["stages", 3]}, "pipeline"),
    ({"pipeline": {"activation_checkpoint_interval": -1}}, "pipeline.activation_checkpoint_interval"),
    ({"pipeline": {"activation_checkpoint_interval": "2"}}, "pipeline.activation_checkpoint_interval"),
    ({"activation_checkpointing": 3}, "activation_checkpointing"),
])
def test_a_bad_value_of_any_key_read_is_one_line_naming_it(tmp_path: Path, change: dict, key: str) -> None:
    path = write(tmp_path, {**TUTORIAL, **change})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(ScenarioError, match=rf"ds_config.json: {key.replace('.', '[.]')} must be "):
        load(path)
    res = runner.invoke(app, ["run", str(path)])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    message = [line for line in res.output.splitlines() if line.strip()]
    assert len(message) <= 3 and message[0].startswith("error: deepspeed: ds_config.json: " + key), res.output
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_bad_ds_config_value_is_one_line_in_ppexec_too(tmp_path: Path) -> None:
    from ppexec.cli import app as ppexec_app

    path = write(tmp_path, {**TUTORIAL, "gradient_clipping": "abc"})
    res = runner.invoke(ppexec_app, ["run", str(path), "--out", str(tmp_path / "run")])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert "gradient_clipping must be a number >= 0" in res.output and not (tmp_path / "run").exists()


def test_auto_leaves_the_scenarios_value(tmp_path: Path) -> None:
    scenario = SCENARIO.replace("pipeline: {", "training: {grad_clip: 0.5}\npipeline: {")
    ds = {**TUTORIAL, "gradient_clipping": "auto", "fp16": {"enabled": "auto"},
          "zero_optimization": {"stage": 0, "reduce_bucket_size": "auto"}}
    s = load(write(tmp_path, ds, scenario))
    assert s.training.grad_clip == 0.5
    assert s.model is not None and s.model.dtype == load(write(tmp_path, {}, SCENARIO.replace(
        "deepspeed: ds_config.json\n", ""))).model.dtype  # the scenario's own dtype


def test_gradient_clipping_is_imported(tmp_path: Path) -> None:
    assert load(write(tmp_path, {**TUTORIAL, "gradient_clipping": 1})).training.grad_clip == 1.0
