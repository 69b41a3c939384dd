"""``ppsim import``: a framework's files read back into the scenario they came from (exported by
``ppsim export`` and imported over the same base: the same plan and the same predicted step),
Megatron command lines as users write them, and bad input in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import GPT_YAML, SCENARIOS, invoke
from ppsim.cli import app
from ppsim.errors import ScenarioError
from ppsim.frameworks import CannotExport, export
from ppsim.frameworks.importing import import_scenario
from ppsim.frameworks.megatron_read import argument_tokens, flags, moe_layers
from ppsim.inputs.scenario import load, parse_scenario
from ppsim.prediction import build, predict
from ppsim.trace.metrics import step_time_ms


def round_trip(path: Path, framework: str, tmp_path: Path, **plan: object) -> tuple[object, object]:
    s = load(path).with_overrides(**plan) if plan else load(path)
    result = export(s, framework, path.stem, "ppsim export", tmp_path)
    for sfx, text in result.files.items():
        (tmp_path / f"{path.stem}{sfx}").write_text(text)
    files = [tmp_path / f"{path.stem}{sfx}" for sfx in result.files if sfx != ".schedule.csv"]
    data, _, _ = import_scenario(files, s.model_dump(exclude_none=True), s.devices)
    return s, parse_scenario(data)


def same_plan(a: object, b: object) -> None:
    pa, pb = build(a), build(b)  # type: ignore[arg-type]
    assert pb.plan.actions == pa.plan.actions and pb.plan.stage_to_rank == pa.plan.stage_to_rank
    assert pb.workload.partition == pa.workload.partition
    for key in ("tensor_parallel", "context_parallel", "data_parallel", "expert_parallel", "global_batch"):
        assert getattr(b, key) == getattr(a, key), key


@pytest.mark.parametrize("name", ["gpt", "megatron-gpt3-175b", "llama31-405b-h100", "mixtral-8x7b"])
def test_megatrons_arguments_come_back_as_the_plan_they_left(name: str, tmp_path: Path) -> None:
    s, back = round_trip(SCENARIOS / f"{name}.yaml", "megatron", tmp_path)
    same_plan(s, back)
    assert step_time_ms(predict(back).trace) == pytest.approx(step_time_ms(predict(s).trace), rel=1e-9)  # type: ignore[arg-type]


@pytest.mark.parametrize("plan", [{}, {"schedule": "zb-v", "chunks": 2}, {"schedule": "v-min", "chunks": 2},
                                  {"schedule": "interleaved-1f1b", "chunks": 2, "recompute": "full"}])
def test_torchtitans_toml_and_csv_come_back_as_the_plan(plan: dict, tmp_path: Path) -> None:
    s, back = round_trip(GPT_YAML, "torchtitan", tmp_path, **plan)
    same_plan(s, back)
    assert back.pipeline.schedule == s.pipeline.schedule  # type: ignore[attr-defined]  # named, not file:


def test_deepspeeds_config_and_parts_come_back_as_the_plan(tmp_path: Path) -> None:
    s, back = round_trip(GPT_YAML, "deepspeed", tmp_path, recompute="full", zero_stage=1)
    same_plan(s, back)
    assert back.training.recompute == "full" and back.training.zero_stage == 1  # type: ignore[attr-defined]


def test_a_megatron_command_line_as_users_write_it() -> None:
    text = """# Llama 3 8B on 16 GPUs
torchrun --nproc-per-node 8 pretrain_gpt.py \\
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \\
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 \\
    --ffn-hidden-size 14336 --seq-length 8192 --max-position-embeddings 8192 --vocab-size 128256 --swiglu \\
    --position-embedding-type rope --untie-embeddings-and-output-weights --bf16 \\
    --micro-batch-size 1 --global-batch-size 128 --recompute-granularity selective \\
    --use-distributed-optimizer --lr 3e-4 --data-path /data/x
"""
    data, framework, _ = import_scenario_text(text)
    s = parse_scenario(data)
    assert framework == "megatron"
    assert (s.tensor_parallel, s.pipeline.stages, s.data_parallel, s.microbatches) == (2, 2, 4, 32)
    assert s.model is not None and (s.model.kv, s.model.mlp, s.model.tie_embeddings) == (8, "swiglu", False)
    assert s.training.recompute == "selective" and s.training.zero_stage == 1
    assert s.pipeline.partition == "uniform" and s.pipeline.schedule == "1f1b"


def import_scenario_text(text: str, gpus: int = 16) -> tuple[dict, str, list[str]]:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "args.sh"
        path.write_text(text)
        return import_scenario([path], {}, gpus)


def test_the_argument_words_and_values() -> None:
    words = argument_tokens("X=(\n  --a 1 --b\n  --c 'E|t*2' # note\n)\n")
    assert words == ["--a", "1", "--b", "--c", "E|t*2"]
    assert flags(["--bf16", "--recompute-modules", "core_attn", "mlp", "--seq-length=4096"]) == {
        "--bf16": [], "--recompute-modules": ["core_attn", "mlp"], "--seq-length": ["4096"]}


def test_moe_layer_lists_are_read_without_evaluating_them() -> None:
    assert moe_layers("([0]*3+[1]*58)", 61) == (3, 1)
    assert moe_layers("[0,1,0,1,0,1]", 6) == (1, 2)  # one dense layer, then every second
    assert moe_layers("2", 8) == (0, 2)
    with pytest.raises(ScenarioError, match="this pattern is not one"):
        moe_layers("[1,1,0,1]", 4)
    with pytest.raises(ScenarioError, match="reads an int or runs"):
        moe_layers("__import__('os')", 4)


def test_without_gpus_megatron_says_which_option_to_give(tmp_path: Path) -> None:
    path = tmp_path / "a.sh"
    path.write_text("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 256\n")
    with pytest.raises(ScenarioError, match="give --gpus") as err:
        import_scenario([path], {}, None)
    assert err.value.field == "--gpus"


def test_the_command_prints_or_writes_and_never_overwrites_a_users_file(tmp_path: Path) -> None:
    assert invoke(app, "export", GPT_YAML, "--to", "megatron", "--out", tmp_path).exit_code == 0
    args = tmp_path / "gpt.megatron.sh"
    shown = invoke(app, "import", args, "--base", GPT_YAML)
    assert shown.exit_code == 0, shown.output
    assert "# written by ppsim import from megatron's configuration" in shown.output
    out = tmp_path / "back.yaml"
    wrote = invoke(app, "import", args, "--base", GPT_YAML, "--write", out)
    assert wrote.exit_code == 0 and f"ppsim run {out}" in wrote.output
    assert invoke(app, "import", args, "--base", GPT_YAML, "--write", out).exit_code == 0  # its own file
    mine = tmp_path / "mine.yaml"
    mine.write_text("name: mine\n")
    refused = invoke(app, "import", args, "--base", GPT_YAML, "--write", mine)
    assert refused.exit_code == 1 and mine.read_text() == "name: mine\n"
    titan = invoke(app, "import", GPT_YAML.with_suffix(".toml"))
    assert titan.exit_code == 1


@given(st.lists(st.integers(0, 8), min_size=1, max_size=32))
def test_deepspeed_parts_round_trip_every_partition(blocks: list[int]) -> None:
    """Any blocks per stage (1-32 stages, empty ones too) -> parts -> blocks: each block once, the
    embedding on the first stage and the head on the last."""
    from ppsim.frameworks.deepspeed import blocks_of_parts, parts

    cuts = parts(blocks)
    assert cuts[0] == 0 and cuts[-1] == sum(blocks) + 2 and len(cuts) == len(blocks) + 1
    assert blocks_of_parts(cuts) == blocks


def test_a_shard_degree_of_minus_one_takes_the_gpus_left_over(tmp_path: Path) -> None:
    toml = tmp_path / "t.toml"
    toml.write_text("[parallelism]\npipeline_parallel_degree = 2\ntensor_parallel_degree = 2\n")
    base = load(GPT_YAML).model_dump(exclude_none=True)
    data, _, notes = import_scenario([toml], base, 16)
    assert data["data_parallel"] == 4 and data["training"]["zero_stage"] == 3
    assert any("the GPUs left over of 16" in n for n in notes)
    with pytest.raises(ScenarioError, match="give --gpus"):
        import_scenario([toml], {**base, "data_parallel": 1, "tensor_parallel": 1, "pipeline": {"stages": 3}}, None)


def test_deepeps_dispatch_and_node_limited_routing_go_to_megatron_and_back(tmp_path: Path) -> None:
    """DeepSeek-V3's EP 64 over nodes of 8: --moe-token-dispatcher-type flex with DeepEP, 8 expert
    groups (a node each) of which 4 a token; read back as the same dispatcher and node limit. Its
    FP8 dispatch has no Megatron argument ppsim knows: refused until dropped."""
    data = load(SCENARIOS / "deepseek-v3.yaml").model_dump(exclude_none=True)
    data["pipeline"].update(schedule="interleaved-1f1b", microbatches=128)
    data["training"].pop("global_batch")
    with pytest.raises(CannotExport, match="moe_fp8_dispatch"):
        export(parse_scenario(data), "megatron", "ds", "c")
    data["training"]["moe_fp8_dispatch"] = False
    s = parse_scenario(data)
    text = export(s, "megatron", "ds", "c").files[".megatron.sh"]
    words = argument_tokens(text)
    for flag, value in (("--moe-token-dispatcher-type", "flex"), ("--moe-flex-dispatcher-backend", "deepep"),
                        ("--moe-router-num-groups", "8"), ("--moe-router-group-topk", "4")):
        assert words[words.index(flag) + 1] == value
    (tmp_path / "ds.megatron.sh").write_text(text)
    back, _, _ = import_scenario([tmp_path / "ds.megatron.sh"], {}, s.devices)
    assert back["training"]["moe_dispatcher"] == "deepep" and back["model"]["moe"]["node_limit"] == 4
    # HybridEP's kernels: the flex dispatcher with its backend named, read back as HybridEP's
    data["training"]["moe_dispatcher"] = "hybridep"
    text = export(parse_scenario(data), "megatron", "ds", "c").files[".megatron.sh"]
    words = argument_tokens(text)
    assert words[words.index("--moe-flex-dispatcher-backend") + 1] == "hybridep"
    (tmp_path / "ds.megatron.sh").write_text(text)
    back, _, _ = import_scenario([tmp_path / "ds.megatron.sh"], {}, s.devices)
    assert back["training"]["moe_dispatcher"] == "hybridep"
    (tmp_path / "ds.megatron.sh").write_text(text.replace("--moe-flex-dispatcher-backend hybridep",
                                                          "--moe-flex-dispatcher-backend nixl"))
    back, _, notes = import_scenario([tmp_path / "ds.megatron.sh"], {}, s.devices)
    assert back["training"]["moe_dispatcher"] == "deepep"
    assert any("--moe-flex-dispatcher-backend nixl is read as DeepEP's kernels" in n for n in notes)


def test_the_layers_kept_out_of_fp8_go_to_megatron_and_back(tmp_path: Path) -> None:
    """training.high_precision_first_layers 0 / _last_layers 3 (Nemotron 3 Super's NVFP4 recipe keeps
    its last 14 so): --first-last-layers-bf16 with both counts written (Megatron keeps one at each
    end unless told), read back as given; an argument file with the switch alone keeps one at each
    end; torchtitan refuses it by name."""
    data = load(SCENARIOS / "llama31-405b-h100.yaml").model_dump(exclude_none=True)
    data["training"].update(fp8="tensorwise", high_precision_last_layers=3)
    s = parse_scenario(data)
    text = export(s, "megatron", "ll", "c").files[".megatron.sh"]
    words = argument_tokens(text)
    assert "--first-last-layers-bf16" in words
    assert words[words.index("--num-layers-at-start-in-bf16") + 1] == "0"
    assert words[words.index("--num-layers-at-end-in-bf16") + 1] == "3"
    (tmp_path / "ll.megatron.sh").write_text(text)
    back, _, _ = import_scenario([tmp_path / "ll.megatron.sh"], {}, s.devices)
    assert (back["training"]["high_precision_first_layers"], back["training"]["high_precision_last_layers"]) == (0, 3)
    mapping, _, _ = import_scenario([tmp_path / "ll.megatron.sh"], s.model_dump(exclude_none=True), s.devices)
    assert step_time_ms(predict(parse_scenario(mapping)).trace) == pytest.approx(step_time_ms(predict(s).trace), rel=1e-9)
    alone = text.replace("--num-layers-at-start-in-bf16 0", "").replace("--num-layers-at-end-in-bf16 3", "")
    (tmp_path / "alone.megatron.sh").write_text(alone)
    back, _, _ = import_scenario([tmp_path / "alone.megatron.sh"], {}, s.devices)
    assert (back["training"]["high_precision_first_layers"], back["training"]["high_precision_last_layers"]) == (1, 1)
    with pytest.raises(CannotExport) as refused:
        export(s, "torchtitan", "ll", "c")
    assert any("high_precision_first_layers" in r for r in refused.value.reasons)


def test_the_attention_kernel_goes_to_megatron_and_back(tmp_path: Path) -> None:
    """cuDNN's fused attention is --attention-backend fused; FlashAttention-2 is flash with
    --flash-attention-version 2; each read back as written. flash alone is read as FlashAttention-2
    with a note (Transformer Engine takes FlashAttention-3 where installed), a version not measured
    here as cuDNN's, auto as cuDNN's (Transformer Engine's choice on Hopper and Blackwell)."""
    data = load(SCENARIOS / "llama31-405b-h100.yaml").model_dump(exclude_none=True)
    path = tmp_path / "ll.megatron.sh"
    for kernel, backend in (("cudnn", "fused"), ("flash2", "flash")):
        data["training"].update(flash_attention=True, attention_kernel=kernel)
        s = parse_scenario(data)
        text = export(s, "megatron", "ll", "c").files[".megatron.sh"]
        words = argument_tokens(text)
        assert words[words.index("--attention-backend") + 1] == backend
        assert ("--flash-attention-version" in words) == (kernel == "flash2")
        path.write_text(text)
        back, _, notes = import_scenario([path], {}, s.devices)
        assert back["training"]["attention_kernel"] == kernel and back["training"]["flash_attention"]
        assert not any("flash" in n.lower() and "attention" in n.lower() for n in notes)
    text = path.read_text()
    for edited, kernel, said in ((text.replace("  --flash-attention-version 2\n", ""), "flash2",
                                  "read as FlashAttention-2"),
                                 (text.replace("--flash-attention-version 2", "--flash-attention-version 3"), "cudnn",
                                  "version 3 is not measured"),
                                 (text.replace("--attention-backend flash\n  --flash-attention-version 2",
                                               "--attention-backend auto"), "cudnn", None)):
        assert edited != text
        path.write_text(edited)
        back, _, notes = import_scenario([path], {}, s.devices)
        assert back["training"]["attention_kernel"] == kernel, edited
        assert said is None or any(said in n for n in notes), notes
    # an unfused attention read over a base scenario that ran flash2: the kernel goes back to the default
    path.write_text(text.replace("--attention-backend flash\n  --flash-attention-version 2", "--attention-backend unfused"))
    back, _, _ = import_scenario([path], s.model_dump(exclude_none=True), s.devices)
    assert back["training"]["flash_attention"] is False and back["training"]["attention_kernel"] == "cudnn"
    parse_scenario(back)
    # torchtitan asks torch's SDPA for cuDNN's kernel first: a scenario priced with flash2 says so
    titan = s.model_dump(exclude_none=True)
    titan["training"]["zero_stage"] = 3
    notes = export(parse_scenario(titan), "torchtitan", "ll", "c").notes
    assert any("cuDNN's kernel first" in n and "ppsim priced flash2" in n for n in notes)


def test_megatron_s_gradient_buckets_are_read_as_megatron_sizes_them(tmp_path: Path) -> None:
    """--ddp-bucket-size is written (the buckets ppsim priced) and read back; without it Megatron-Core
    takes max(40M, 1M x d) parameters a bucket (2 bytes each in bf16), and without
    --overlap-grad-reduce one bucket of every gradient."""
    data = load(GPT_YAML).model_dump(exclude_none=True)
    data["training"]["overlap_grad_reduce"] = True
    s = parse_scenario(data)
    text = export(s, "megatron", "b", "c").files[".megatron.sh"]
    words = argument_tokens(text)
    written = str(round(s.training.bucket_mb * 1e6 / 2))
    assert words[words.index("--ddp-bucket-size") + 1] == written

    def bucket_mb(args: str) -> float:
        (tmp_path / "b.megatron.sh").write_text(args)
        back, _, _ = import_scenario([tmp_path / "b.megatron.sh"], data, s.devices)
        return float(back["training"]["bucket_mb"])

    assert bucket_mb(text) == s.training.bucket_mb
    dropped = text.replace(f"--ddp-bucket-size {written}", "")
    assert s.data_parallel * 1_000_000 < 40_000_000 and bucket_mb(dropped) == 80.0  # 40M parameters of 2 bytes
    assert bucket_mb(dropped.replace("--overlap-grad-reduce", "")) == 1e6
    # without the overlap Megatron takes one bucket; the size ppsim priced is written and read back, and said
    assert bucket_mb(text.replace("--overlap-grad-reduce", "")) == s.training.bucket_mb
    data["training"]["overlap_grad_reduce"] = False
    notes = export(parse_scenario(data), "megatron", "b", "c").notes
    assert any("Megatron reduces every gradient in one bucket" in n and "training.bucket_mb: 1000000" in n for n in notes)
    data["training"]["overlap_grad_reduce"] = True
    (tmp_path / "b.megatron.sh").write_text(text.replace(f"--ddp-bucket-size {written}", "--ddp-bucket-size 100000"))
    back, _, notes = import_scenario([tmp_path / "b.megatron.sh"], data, s.devices)
    assert back["training"]["bucket_mb"] == 1.0
    assert any("--ddp-bucket-size 100000 is 0.2 MB of gradients, priced as 1 MB" in n for n in notes)


def test_fp8_attention_without_an_fp8_recipe_is_read_as_16_bit_attention(tmp_path: Path) -> None:
    """--fp8-dot-product-attention beside an FP4 recipe: ppsim prices FP8 attention under training.fp8
    only, so the attention stays in 16 bits and a note says so; torchtitan's files never carry it."""
    data = load(GPT_YAML).model_dump(exclude_none=True)
    s = parse_scenario(data)
    text = export(s, "megatron", "f", "c").files[".megatron.sh"]
    (tmp_path / "f.megatron.sh").write_text(text + " --fp4-format e2m1 --fp4-recipe nvfp4 --fp8-dot-product-attention")
    back, _, notes = import_scenario([tmp_path / "f.megatron.sh"], data, s.devices)
    assert back["training"]["fp8_attention"] is False and back["training"]["fp4"] == "nvfp4"
    assert any("--fp8-dot-product-attention without an FP8 recipe" in n for n in notes)


def test_a_torchtitan_import_drops_the_base_s_fp8_attention(tmp_path: Path) -> None:
    """torchtitan runs the attention in 16 bits: its files read over a base with FP8 attention leave none."""
    round_trip(GPT_YAML, "torchtitan", tmp_path)
    files = [p for p in tmp_path.iterdir() if p.suffix != ".csv"]
    base = load(GPT_YAML).model_dump(exclude_none=True)
    base["training"].update(fp8="tensorwise", fp8_attention=True, flash_attention=True)
    back, _, _ = import_scenario(files, base, None)
    assert "fp8_attention" not in back["training"]


def _qwen(**training: object) -> dict:
    data = load(SCENARIOS / "qwen3-30b-a3b.yaml").model_dump(exclude_none=True)
    data["training"].update(training)
    return data


def test_a_one_stage_combined_1f1b_goes_to_megatron_and_back(tmp_path: Path) -> None:
    """On one stage Megatron runs the combined 1F1B where --overlap-moe-expert-parallel-comm says so
    (with delayed weight grads); read back over a base of plain 1F1B, the same plan and step."""
    data = _qwen(delay_wgrad=True)
    data["pipeline"].update(schedule="combined-1f1b", chunks=1)
    s = parse_scenario(data)
    text = export(s, "megatron", "q", "c").files[".megatron.sh"]
    words = argument_tokens(text)
    assert "--overlap-moe-expert-parallel-comm" in words and "--delay-wgrad-compute" in words
    (tmp_path / "q.megatron.sh").write_text(text)
    base = _qwen()  # pipeline.schedule: 1f1b
    back, _, _ = import_scenario([tmp_path / "q.megatron.sh"], base, s.devices)
    assert back["pipeline"]["schedule"] == "combined-1f1b" and back["training"]["delay_wgrad"] is True
    assert step_time_ms(predict(parse_scenario(back)).trace) == pytest.approx(step_time_ms(predict(s).trace), rel=1e-9)
    # the same arguments without the overlap over a combined-1f1b base: one stage of plain accumulation
    (tmp_path / "p.megatron.sh").write_text(text.replace("--overlap-moe-expert-parallel-comm", "")
                                            .replace("--delay-wgrad-compute", ""))
    back, _, _ = import_scenario([tmp_path / "p.megatron.sh"], data, s.devices)
    assert back["pipeline"]["schedule"] == "1f1b" and back["training"]["delay_wgrad"] is False


@pytest.mark.parametrize("graphs", [[], ["full_iteration"], ["attn", "moe_router", "moe_preprocess"]])
def test_the_host_s_launches_go_to_megatron_and_back(graphs: list[str], tmp_path: Path) -> None:
    """CUDA graphs (--cuda-graph-impl and --cuda-graph-modules), the router's fusion and Transformer
    Engine's fused grouped MLP (--use-transformer-engine-op-fuser beside --moe-grouped-gemm) leave
    and come back as they were, whatever the base said; each moves the step where the host binds."""
    s = parse_scenario(_qwen(cuda_graphs=graphs, moe_router_fusion=True, fused_grouped_mlp=True))
    text = export(s, "megatron", "q", "c").files[".megatron.sh"]
    words = argument_tokens(text)
    assert "--moe-router-fusion" in words and "--use-transformer-engine-op-fuser" in words
    impl = words[words.index("--cuda-graph-impl") + 1] if graphs else None
    assert impl == {0: None, 1: "full_iteration", 3: "transformer_engine"}[len(graphs)]
    (tmp_path / "q.megatron.sh").write_text(text)
    base = _qwen(cuda_graphs=["attn"], moe_router_fusion=False, fused_grouped_mlp=False)
    back, _, notes = import_scenario([tmp_path / "q.megatron.sh"], base, s.devices)
    got = back["training"]
    assert (got["cuda_graphs"], got["moe_router_fusion"], got["fused_grouped_mlp"]) == (graphs, True, True)
    assert step_time_ms(predict(parse_scenario(back)).trace) == pytest.approx(step_time_ms(predict(s).trace), rel=1e-9)


def test_megatron_s_defaults_are_read_where_its_arguments_are_silent(tmp_path: Path) -> None:
    """No FP8 flag is 16-bit training and no graphs or fusions, over a base that had them; whole-layer
    graphs (no modules named) are read as what a dropless MoE layer can capture; flags ppsim does
    not read are named in one note."""
    s = parse_scenario(_qwen(fp8=None, low_precision_params=False))
    text = export(s, "megatron", "q", "c").files[".megatron.sh"]
    (tmp_path / "q.megatron.sh").write_text(text)
    base = _qwen(cuda_graphs=["full_iteration"], moe_router_fusion=True)  # fp8: tensorwise
    back, _, notes = import_scenario([tmp_path / "q.megatron.sh"], base, s.devices)
    got = back["training"]
    assert got["fp8"] is None and got["cuda_graphs"] == [] and got["moe_router_fusion"] is False
    assert not any(n.startswith("not read") for n in notes)
    (tmp_path / "w.megatron.sh").write_text(text.replace("--bf16", "--bf16 --cuda-graph-impl local --lr 3e-4 "
                                                                   "--train-iters 10"))
    back, _, notes = import_scenario([tmp_path / "w.megatron.sh"], base, s.devices)
    assert back["training"]["cuda_graphs"] == ["attn", "moe_router", "moe_preprocess"]
    assert any("graphs whole layers: read as attn, moe_router, moe_preprocess" in n for n in notes)
    assert any(n.startswith("not read") and n.endswith("--lr, --train-iters") for n in notes)
    (tmp_path / "x.megatron.sh").write_text(text.replace("--bf16", "--bf16 --cuda-graph-impl transformer_engine "
                                                                   "--cuda-graph-modules attn router"))
    with pytest.raises(ScenarioError, match="--cuda-graph-modules router: ppsim knows attn, mlp, moe, moe_router"):
        import_scenario([tmp_path / "x.megatron.sh"], base, s.devices)


def test_an_import_the_device_cannot_run_is_refused_before_it_is_written(tmp_path: Path) -> None:
    """MXFP8 on the H100 base: refused as ppsim run refuses it (exit 1, the key named), nothing written."""
    qwen = SCENARIOS / "qwen3-30b-a3b.yaml"
    assert invoke(app, "export", qwen, "--to", "megatron", "--out", tmp_path).exit_code == 0
    args = tmp_path / "qwen3-30b-a3b.megatron.sh"
    args.write_text(args.read_text().replace("--fp8-recipe tensorwise", "--fp8-recipe mxfp8"))
    out = tmp_path / "back.yaml"
    refused = invoke(app, "import", args, "--base", qwen, "--write", out)
    assert refused.exit_code == 1 and "training.fp8" in refused.output and "Blackwell" in refused.output
    assert "Traceback" not in refused.output and not out.exists()


def test_sliding_windows_go_to_megatron_and_back(tmp_path: Path) -> None:
    """GPT-OSS's windows: --window-size 128,0 and --window-attn-skip-freq 2 (every second layer
    attends to every key), read back over a base without them as the same step; Megatron's other
    forms are refused by name."""
    s = load(SCENARIOS / "gpt-oss-120b.yaml")
    text = export(s, "megatron", "oss", "c").files[".megatron.sh"]
    words = argument_tokens(text)
    assert words[words.index("--window-size") + 1] == "128,0" and words[words.index("--window-attn-skip-freq") + 1] == "2"
    (tmp_path / "oss.megatron.sh").write_text(text)
    base = s.model_dump(exclude_none=True)
    base["model"] = {k: v for k, v in base["model"].items() if k not in ("attention_window", "full_attention_every")}
    back, _, _ = import_scenario([tmp_path / "oss.megatron.sh"], base, s.devices)
    assert (back["model"]["attention_window"], back["model"]["full_attention_every"]) == (128, 2)
    assert step_time_ms(predict(parse_scenario(back)).trace) == pytest.approx(step_time_ms(predict(s).trace), rel=1e-9)
    for was, now, says in (("--window-size 128,0", "--window-size 128,4", "whose right side is 0"),
                           ("--window-attn-skip-freq 2", "--window-attn-skip-freq '[1,1,0]*12'", "not a list")):
        (tmp_path / "bad.megatron.sh").write_text(text.replace(was, now))
        with pytest.raises(ScenarioError, match=says):
            import_scenario([tmp_path / "bad.megatron.sh"], base, s.devices)
