"""``ppsim export``: every layer accounted for in each framework's files, the files read back the
way the framework reads them (Megatron's layout grammar, bash's arrays, TOML, torch's schedule
parser and lowering, DeepSpeed's partitioner), refusals in one line each, and nothing a user
wrote overwritten."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import tomllib
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import GPT_YAML, SCENARIOS, invoke
from ppsim.cli import app
from ppsim.frameworks import CannotExport, export
from ppsim.frameworks.deepspeed import parts, uniform_parts
from ppsim.frameworks.megatron import ARRAY
from ppsim.inputs.megatron_layout import blocks_per_stage, parse_layout
from ppsim.inputs.scenario import load, parse_scenario
from ppsim.plan import Kind, schedules
from ppsim.plan.schedules.from_file import from_torch_csv

TINY = load(SCENARIOS / "tiny-cpu.yaml")


def scenario(layers: int, stages: int, partition: list[int] | str = "balanced", **pipeline: Any) -> Any:
    data = TINY.model_dump(exclude_none=True)
    data["model"] = {**data["model"], "layers": layers}
    data["pipeline"] = {**data["pipeline"], "stages": stages, "partition": partition, **pipeline}
    return parse_scenario(data)


def megatron_flags(s: Any) -> dict[str, list[str]]:
    text = export(s, "megatron", "x", "ppsim export x --to megatron").files[".megatron.sh"]
    args = sourced(text)
    out: dict[str, list[str]] = {}
    for a in args:
        if a.startswith("--"):
            key = a
            out[key] = []
        else:
            out[key].append(a)
    return out


def sourced(text: str) -> list[str]:
    """The array the Megatron file sets, as bash reads it."""
    bash = shutil.which("bash")
    assert bash is not None
    run = subprocess.run([bash, "-c", f'{text}\nprintf "%s\\n" "${{{ARRAY}[@]}}"'], capture_output=True, text=True,
                         check=True)
    return run.stdout.splitlines()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_megatrons_layout_holds_every_block_of_any_partition(data: st.DataObject) -> None:
    """Uneven partitions of up to 48 blocks over 2-6 ranks, one or two chunks a rank, the first and
    last stages empty or not (as ppsim allows: the embedding or the head is their work): the layout
    string read back by Megatron's grammar gives ppsim's blocks per stage."""
    ranks = data.draw(st.integers(2, 6), "ranks")
    chunks = data.draw(st.sampled_from([1, 2]), "chunks")
    n = ranks * chunks
    ends = st.integers(0, 4)
    blocks = ([data.draw(ends, "first")] + data.draw(st.lists(st.integers(1, 4), min_size=n - 2, max_size=n - 2),
                                                     "inner") + [data.draw(ends, "last")])
    assume(sum(blocks) >= 1)
    s = scenario(sum(blocks), ranks, blocks, chunks=chunks, microbatches=ranks * 2,
                 schedule="interleaved-1f1b" if chunks > 1 else "1f1b")
    flags = megatron_flags(s)
    layout = parse_layout(flags["--pipeline-model-parallel-layout"][0])
    assert blocks_per_stage(layout) == blocks
    assert flags["--pipeline-model-parallel-size"] == [str(ranks)]
    assert flags["--num-layers"] == [str(sum(blocks))]


def test_megatron_gets_the_plans_batch_recompute_optimizer_and_precision() -> None:
    s = load(SCENARIOS / "llama31-405b-h100.yaml")
    flags = megatron_flags(s)
    assert flags["--global-batch-size"] == [str(s.global_batch)] and flags["--micro-batch-size"] == ["1"]
    assert flags["--tensor-model-parallel-size"] == ["8"] and flags["--context-parallel-size"] == ["2"]
    assert "--use-distributed-optimizer" in flags and flags["--fp8-recipe"] == ["tensorwise"]
    assert flags["--pipeline-model-parallel-layout"] == ["Et|(t*2|)*62tL"]  # the recipe's: one block at each end
    full = megatron_flags(scenario(4, 2).with_overrides(recompute="full"))
    assert full["--recompute-granularity"] == ["full"] and full["--recompute-method"] == ["uniform"]
    selective = megatron_flags(scenario(4, 2).with_overrides(recompute="selective"))
    assert selective["--recompute-modules"] == ["core_attn"]


def test_a_mixture_of_experts_layer_list_is_megatrons() -> None:
    flags = megatron_flags(load(SCENARIOS / "mixtral-8x7b.yaml"))
    assert flags["--moe-layer-freq"] == ["([1]*32)"] and flags["--num-experts"] == ["8"]
    from ppsim.frameworks.megatron import moe_layer_freq

    assert moe_layer_freq([False] * 3 + [True] * 58) == "([0]*3+[1]*58)"
    assert eval(moe_layer_freq([False, True, True, False])) == [0, 1, 1, 0]  # what Megatron's parser evaluates


@pytest.mark.parametrize("framework, schedule, says", [
    ("megatron", "zb-h1", "Megatron-Core has no zb-h1 schedule: export with --schedule 1f1b or interleaved-1f1b"),
    ("deepspeed", "gpipe", "DeepSpeed's pipeline runs 1F1B (its TrainSchedule) only, not gpipe"),
])
def test_a_schedule_the_framework_lacks_is_one_line(framework: str, schedule: str, says: str) -> None:
    with pytest.raises(CannotExport, match=re.escape(says)) as err:
        export(scenario(4, 2).with_overrides(schedule=schedule), framework, "x", "c")
    assert err.value.field == "--to" and len(err.value.reasons) == 1


def test_torchtitans_toml_names_each_stages_modules_once() -> None:
    s = scenario(10, 2, [3, 2, 1, 4], chunks=2, schedule="interleaved-1f1b", microbatches=4)
    result = export(s, "torchtitan", "x", "c")
    toml = tomllib.loads(result.files[".torchtitan.toml"])
    par = toml["parallelism"]
    assert par["pipeline_parallel_degree"] == 2 and par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert par["pipeline_parallel_schedule_csv"] == "x.schedule.csv"
    fqns = par["module_fqns_per_model_part"]
    assert [len([m for m in stage if m.startswith("layers.")]) for stage in fqns] == [3, 2, 1, 4]
    flat = [m for stage in fqns for m in stage]
    assert flat == ["tok_embeddings"] + [f"layers.{i}" for i in range(10)] + ["norm", "output"]
    assert toml["training"]["local_batch_size"] == 4 * 4  # micro-batch 4 x 4 micro-batches
    assert par["pipeline_parallel_microbatch_size"] == 4
    # the CSV is the plan's own order
    assert from_torch_csv(result.files[".schedule.csv"], "x").actions == schedules.build(
        "interleaved-1f1b", 2, 4, 2).actions


def test_a_v_shaped_plan_asks_torchtitan_for_v_placement() -> None:
    result = export(scenario(8, 2, schedule="zb-v", chunks=2, microbatches=4), "torchtitan", "x", "c")
    par = tomllib.loads(result.files[".torchtitan.toml"])["parallelism"]
    assert par["pipeline_parallel_schedule"] == "ZBVZeroBubble"
    fqns = par["module_fqns_per_model_part"]
    assert fqns[0][0] == "tok_embeddings" and fqns[-1][-2:] == ["norm", "output"] and len(fqns) == 4


TORCH_SCHEDULES = [n for n, info in schedules.SCHEDULES.items() if info.training and n not in ("auto", "dualpipe")]


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("name", TORCH_SCHEDULES)
def test_torch_reads_lowers_and_dry_runs_every_exported_csv(name: str, ranks: int) -> None:
    """The CSV as torch's runtime takes it in (compute only): every cell its action, the schedule
    valid by torch's rules, lowered by torch's own passes (sends, receives, gradient reduction),
    and torch's dry run finds no deadlock."""
    pytest.importorskip("torch")
    from torch.distributed.pipelining import schedules as ts

    info = schedules.get(name)
    chunks = info.chunks.default
    m = info.microbatches.nearest(ranks, 2 * ranks * chunks, chunks) or 2 * ranks * chunks
    s = scenario(8, ranks, schedule=name, chunks=chunks, microbatches=m)
    csv_text = export(s, "torchtitan", "x", "c").files[".schedule.csv"]
    actions = {r: [ts._Action.from_str(c) for c in row.split(",")] for r, row in enumerate(csv_text.splitlines())}
    stages = ranks * chunks
    stage_to_rank = ts._validate_schedule(actions, ranks, stages, m)
    full = {r: ts._add_reduce_grad(ts._add_unshard_reshard(a), m) for r, a in actions.items()}  # the runtime's passes
    ts._add_send_recv(full, stage_to_rank=lambda st: stage_to_rank[st], num_stages=stages)
    comms = ts._add_send_recv(actions, stage_to_rank=lambda st: stage_to_rank[st], num_stages=stages)  # type: ignore[arg-type]
    if not info.overlaps:  # torch's dry run takes no overlapped pair (its stage is -1): the real runs do
        ts._simulate_comms_compute(comms, lambda st: stage_to_rank[st], stages)  # no deadlock


@pytest.mark.parametrize("ranks", [2, 4])
def test_torchs_runtime_trains_every_exported_csv_as_one_process_does(tmp_path: Path, ranks: int) -> None:
    """Each schedule's CSV, loaded by torch's own _PipelineScheduleRuntime as torchtitan loads it,
    trains one step of an MLP on ``ranks`` gloo processes: every stage's gradients equal one
    process's unpipelined step to 1e-12 (float64), and the last stage's rank gets each
    micro-batch's loss, their sum the unpipelined loss."""
    pytest.importorskip("torch")
    import sys

    paths = []
    for name in TORCH_SCHEDULES:
        chunks = schedules.get(name).chunks.default
        s = scenario(8, ranks, schedule=name, chunks=chunks, microbatches=8)
        path = tmp_path / f"{name}.csv"
        path.write_text(export(s, "torchtitan", name, "c").files[".schedule.csv"])
        paths.append(path)
    run = subprocess.run([sys.executable, str(Path(__file__).with_name("run_torch_csv.py")), str(ranks), "8",
                          *map(str, paths)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(line) for line in run.stdout.splitlines()]
    assert {r["csv"] for r in rows} == {p.name for p in paths} and len(rows) == ranks * len(paths)
    for r in rows:
        assert r["grad_gap"] < 1e-12, r
        assert r["loss_gap"] < 1e-9, r
    for p in paths:  # one rank holds the last stage and has every micro-batch's loss
        assert sorted(r["losses"] for r in rows if r["csv"] == p.name) == [0] * (ranks - 1) + [8], p.name


def test_the_measured_run_of_an_exported_csv_reads_into_compare(tmp_path: Path) -> None:
    """ZB-V's CSV run by torch's runtime under torch's profiler: the Kineto traces read as a measured
    Trace whose actions on each rank are the plan's, in its order, and `ppsim compare` sets it
    against ppsim's prediction of the same plan action by action."""
    pytest.importorskip("torch")
    import sys

    from ppsim.prediction import predict
    from ppsim.trace.kineto import load_kineto

    s = scenario(8, 2, schedule="zb-v", chunks=2, microbatches=8)
    csv = tmp_path / "zbv.csv"
    csv.write_text(export(s, "torchtitan", "zbv", "c").files[".schedule.csv"])
    (tmp_path / "prof").mkdir()
    run = subprocess.run([sys.executable, str(Path(__file__).with_name("run_torch_csv.py")), "2", "8", "--profile",
                          str(tmp_path / "prof"), str(csv)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    files = sorted((tmp_path / "prof").glob("rank*.json"))
    measured = load_kineto(files)
    plan = from_torch_csv(csv.read_text(), "zbv")
    for r in range(2):
        ran = [sp.action for sp in measured.spans if sp.rank == r and sp.lane == "compute" and sp.action.kind in
               (Kind.F, Kind.B, Kind.I, Kind.W)]
        assert [str(a) for a in ran] == [str(a) for a in plan.actions[r]]
    predicted = tmp_path / "predicted.json"
    predict(s.with_overrides(schedule=f"file:{csv}")).trace.save(predicted)
    compared = invoke(app, "compare", predicted, *files, "--json")
    assert compared.exit_code == 0, compared.output
    doc = json.loads(compared.output)
    assert doc["measured_step_time_ms"] > 0 and doc["predicted_step_time_ms"] > 0
    compute = sum(len(r) for r in plan.actions)
    assert doc["matched"] >= compute  # every compute action found on both sides (and the messages torch adds)


def test_deepspeeds_parts_and_its_uniform_partition() -> None:
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.utils import partition_uniform

    for items in range(1, 40):
        for n in range(1, 9):
            assert uniform_parts(items, n) == partition_uniform(items, n)
    assert parts([3, 2, 0, 4]) == [0, 4, 6, 6, 11]  # the embedding with stage 0, the head with the last


def test_even_blocks_are_deepspeeds_balance_by_block_type() -> None:
    """partition_method type:<block class> weighs each block 1 and the embedding and head 0: DeepSpeed's
    balanced partition then gives every stage as many blocks, the ends with the embedding and head."""
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.utils import partition_balanced

    from ppsim.frameworks.deepspeed import BY_BLOCK_TYPE, partition_method
    from ppsim.frameworks.placement import StageLayers

    for stages in range(1, 9):
        for each in range(1, 6):
            weights = [0] + [1] * (stages * each) + [0]
            layers = [StageLayers(k, k, k * each, each, k == 0, k == stages - 1) for k in range(stages)]
            assert partition_balanced(weights, stages) == parts([each] * stages)
            assert partition_method(layers) in (BY_BLOCK_TYPE, "uniform")


def test_deepspeeds_config_reads_back_as_the_plan(tmp_path: Path) -> None:
    s = scenario(4, 2).with_overrides(recompute="full", data_parallel=2, zero_stage=1)
    result = export(s, "deepspeed", "x", "ppsim export c")
    config = json.loads(result.files[".ds_config.json"])
    assert config["train_batch_size"] == s.global_batch == 4 * 4 * 2
    assert config["gradient_accumulation_steps"] == 4 and config["zero_optimization"] == {"stage": 1}
    assert config["pipeline"] == {"activation_checkpoint_interval": 1}
    from ppsim.inputs.ds_config import read_ds_config

    path = tmp_path / "ds.json"
    path.write_text(result.files[".ds_config.json"])
    assert read_ds_config(path) == config
    laid = json.loads(result.files[".pipeline_parts.json"])
    assert laid["parts"] == [0, 3, 6] and laid["partition_method"] == "uniform"


def test_the_command_writes_the_files_and_never_a_users(tmp_path: Path) -> None:
    result = invoke(app, "export", GPT_YAML, "--to", "torchtitan", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpt.schedule.csv", "gpt.torchtitan.toml"]
    assert "layers: 40 blocks = 5 x 8 over 8 stages" in result.output
    again = invoke(app, "export", GPT_YAML, "--to", "torchtitan", "--out", tmp_path)
    assert again.exit_code == 0, again.output  # its own files, the CSV beside its TOML
    mine = tmp_path / "gpt.megatron.sh"
    mine.write_text("my own\n")
    refused = invoke(app, "export", GPT_YAML, "--to", "megatron", "--out", tmp_path)
    assert refused.exit_code == 1 and "exists and was not written by ppsim" in refused.output
    assert mine.read_text() == "my own\n"
    bad = invoke(app, "export", GPT_YAML, "--to", "jax", "--out", tmp_path)
    assert bad.exit_code == 2 and "is not a framework ppsim exports to" in bad.output
    cannot = invoke(app, "export", GPT_YAML, "--to", "deepspeed", "--schedule", "zb-h1", "--out", tmp_path)
    assert cannot.exit_code == 1 and "only, not zb-h1" in cannot.output
    assert not (tmp_path / "gpt.ds_config.json").exists()


def test_tune_writes_the_best_plan_the_framework_runs(small_yaml: Path, tmp_path: Path) -> None:
    """--write-for deepspeed: the scenario written is the best plan DeepSpeed runs as predicted (1F1B),
    the plans above it are said to be what DeepSpeed cannot run, and its files lie beside it."""
    out = tmp_path / "best.yaml"
    result = invoke(app, "tune", small_yaml, "--gpus", "8", "--micro-batch-sizes", "1",
                    "--schedules", "zb-h1,1f1b", "--write", out, "--write-for", "deepspeed", "--jobs", "1")
    assert result.exit_code == 0, result.output
    written = load(out)
    assert written.pipeline.schedule == "1f1b" or written.pipeline.stages == 1
    assert (tmp_path / "best.ds_config.json").exists() and (tmp_path / "best.pipeline_parts.json").exists()
    assert "for deepspeed" in result.output
    bad = invoke(app, "tune", small_yaml, "--write-for", "deepspeed")
    assert bad.exit_code == 2 and "give --write" in bad.output


def test_torchtitan_refuses_a_weight_gradient_store() -> None:
    s = scenario(8, 2, schedule="zb-h1", split_backward="store")
    with pytest.raises(CannotExport, match="export with pipeline.split_backward: autograd"):
        export(s, "torchtitan", "x", "c")
    assert export(scenario(8, 2, schedule="zb-h1"), "torchtitan", "x", "c").files  # torch's own is exported


def test_torchtitan_refuses_deepeps_dispatch_node_limits_and_fp8_dispatch_by_name() -> None:
    with pytest.raises(CannotExport) as err:
        export(load(SCENARIOS / "deepseek-v3.yaml"), "torchtitan", "x", "c")
    text = " ".join(err.value.reasons)
    for fix in ("training.moe_dispatcher: alltoall", "drop model.moe.node_limit", "drop training.moe_fp8_dispatch"):
        assert fix in text


def test_megatron_notes_the_sms_ppsim_charged_the_all_to_alls() -> None:
    data = load(SCENARIOS / "mixtral-8x7b.yaml").model_dump(exclude_none=True)
    data["training"]["moe_comm_sms"] = 24
    result = export(parse_scenario(data), "megatron", "x", "c")
    assert any("charged the dispatch and combine kernels 24 SMs" in n and "--moe-hybridep-num-sms" in n
               for n in result.notes)


def test_megatron_notes_a_routing_skew_only_where_the_scenario_gives_one() -> None:
    """A skew is ppsim's assumption about a run, not a Megatron setting: noted where the scenario
    gives an uneven one; a scenario that gives none (balanced, or its profile's) has nothing to note."""
    data = load(SCENARIOS / "mixtral-8x7b.yaml").model_dump(exclude_none=True)
    assert "skew" not in data["model"]["moe"]

    def noted(moe: dict[str, Any]) -> bool:
        data["model"]["moe"] = moe
        return any("routing skew is ppsim's assumption" in n for n in export(parse_scenario(data), "megatron", "x",
                                                                               "c").notes)

    plain = dict(data["model"]["moe"])
    assert not noted(plain) and not noted({**plain, "skew": 1.0})
    assert noted({**plain, "skew": 1.5}) and noted({**plain, "routing": {"load_cv": 0.3}})


def test_a_latent_moe_and_a_repeated_mtp_module_are_refused_by_name() -> None:
    data = load(SCENARIOS / "mixtral-8x7b.yaml").model_dump(exclude_none=True)
    data["model"]["moe"]["latent"] = 1024
    data["model"].update(mtp_layers=2, mtp_repeated=True)
    s = parse_scenario(data)
    with pytest.raises(CannotExport) as err:
        export(s, "megatron", "x", "c")
    assert any("model.moe.latent" in r for r in err.value.reasons)
    assert any("model.mtp_repeated" in r for r in err.value.reasons)
    with pytest.raises(CannotExport) as err:
        export(s, "torchtitan", "x", "c")
    assert any("a latent MoE: drop model.moe.latent" in r for r in err.value.reasons)


def test_torchtitan_and_deepspeed_refuse_a_multi_token_prediction_module_by_name() -> None:
    """DeepSeek-V3's MTP module is part of what ppsim priced; an export that has no key for it would
    run another model, so torchtitan and DeepSpeed refuse it, naming model.mtp_layers."""
    data = load(SCENARIOS / "gpt.yaml").model_dump(exclude_none=True)
    data["model"]["mtp_layers"] = 1
    s = parse_scenario(data)
    for framework in ("torchtitan", "deepspeed"):
        with pytest.raises(CannotExport) as err:
            export(s, framework, "x", "c")
        assert any("model.mtp_layers" in r for r in err.value.reasons), framework


@pytest.mark.parametrize(("zero", "ep", "refused"), [(0, 16, True), (3, 16, False), (0, 1, False)])
def test_torchtitan_s_experts_borrow_sharded_data_parallel_ranks(zero: int, ep: int, refused: bool) -> None:
    """torchtitan's ParallelDims: EP of whole experts takes its ranks from FSDP's shards, cp and tp
    (ep | dp_shard x cp x tp): replicated data parallelism lends none, so EP 16 needs ZeRO-3; the
    model is named as torchtitan's family with experts (qwen3: no latent attention)."""
    data = load(SCENARIOS / "qwen3-30b-a3b.yaml").model_dump(exclude_none=True)
    data["training"].update(zero_stage=zero, moe_dispatcher="alltoall", low_precision_params=False,
                            overlap_param_gather=False)
    data["expert_parallel"] = ep
    s = parse_scenario(data)
    if refused:
        with pytest.raises(CannotExport, match=r"takes its ranks from the sharded data parallelism.*--zero-stage 3"):
            export(s, "torchtitan", "q", "c")
        return
    result = export(s, "torchtitan", "q", "c")
    toml = tomllib.loads(result.files[".torchtitan.toml"])
    assert toml["model"]["name"] == "qwen3" and any("model.name qwen3" in n and "128 experts" in n for n in result.notes)


def test_torchtitan_refuses_the_host_s_graphs_and_fusions_ppsim_priced_by_name() -> None:
    data = load(SCENARIOS / "qwen3-30b-a3b.yaml").model_dump(exclude_none=True)
    data["training"].update(zero_stage=3, moe_dispatcher="alltoall", low_precision_params=False,
                            overlap_param_gather=False, cuda_graphs=["attn"], moe_router_fusion=True,
                            fused_grouped_mlp=True)
    with pytest.raises(CannotExport) as err:
        export(parse_scenario(data), "torchtitan", "q", "c")
    text = " ".join(err.value.reasons)
    for fix in ("training.cuda_graphs: []", "training.moe_router_fusion: false", "training.fused_grouped_mlp: false"):
        assert fix in text
