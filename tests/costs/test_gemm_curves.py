"""Per-GEMM efficiency: the device catalogue's measured curves, the GEMMs of a layer, their pricing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import gpt
from ppsim.costs import build_workload
from ppsim.costs.analytic import matmul_ms
from ppsim.costs.gemms import Gemm, block_gemms, head_gemms
from ppsim.costs.layers import gpt_layers
from ppsim.errors import ScenarioError
from ppsim.inputs.hardware import DEVICES, Curve, read_devices
from ppsim.inputs.scenario import ModelSpec, parse_scenario

A100 = DEVICES["a100-80g"]
SIZES = st.floats(min_value=1e3, max_value=1e18, allow_nan=False, allow_infinity=False)


def test_the_a100_curves_are_in_the_catalogue_with_their_source() -> None:
    for name in ("a100-40g", "a100-80g"):
        d = DEVICES[name]
        assert d.gemm is not None and d.attention is not None
        assert "2401.14489" in d.gemm.source and "EleutherAI/cookbook" in d.gemm.source
        assert "h_sweep.out" in d.attention.source
        assert d.gemm.dtypes == ("fp16", "bf16")
        assert d.efficiency == 0.6  # the flat fallback stays
    for name in ("b200", "gb200", "cpu"):  # no measured sweep: no curve
        assert DEVICES[name].gemm is None and DEVICES[name].attention is None
    for name in ("b300", "gb300"):  # one published bf16 figure (tests/costs/test_measured_fp8_and_memory.py)
        assert DEVICES[name].gemm is not None and DEVICES[name].attention is None
    h200 = DEVICES["h200"]  # measured here with `ppexec device` (tests/ppexec/test_device_curves.py)
    assert h200.gemm is not None and h200.attention is not None and h200.gemm.dtypes == ("bf16",)
    assert "bench/measured/h200-2026-12-04.csv" in h200.gemm.source and h200.efficiency == 0.55
    for name in ("h100-sxm", "h800"):  # the same Hopper compute: the H200's curves, said so where they are given
        assert DEVICES[name].gemm == h200.gemm and DEVICES[name].attention == h200.attention


@pytest.mark.parametrize("curve", [A100.gemm, A100.attention], ids=["gemm", "attention"])
def test_the_curve_is_its_table_at_its_points_and_flat_beyond(curve: Curve) -> None:
    for size, fraction in curve.points:
        assert curve(size) == pytest.approx(fraction, rel=1e-12)
    first, last = curve.points[0], curve.points[-1]
    assert curve(first[0] / 1e3) == first[1] and curve(last[0] * 1e3) == last[1]


def test_between_two_points_it_is_linear_in_log_size() -> None:
    c = Curve(points=((1e9, 0.5), (1e12, 0.8)), source="hand")
    assert c(math.sqrt(1e9 * 1e12)) == pytest.approx(0.65)  # the geometric middle: the mean
    assert c(1e10) == pytest.approx(0.6)  # a third of the way in log: 0.5 + 0.3 / 3
    assert c(1e11) == pytest.approx(0.7)


@settings(max_examples=200, deadline=None)
@given(a=SIZES, b=SIZES)
def test_the_catalogue_curves_are_monotone_in_size(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    for curve in (A100.gemm, A100.attention):
        assert curve(lo) <= curve(hi) + 1e-12
        assert 0 < curve(lo) <= 1


def test_a_gemm_efficiency_comes_from_its_flops_and_dtype() -> None:
    # (8192 x 12288) x (12288 x 4608): GPT-3 175B's QKV on one of 8 tensor ranks, 4 sequences of 2048
    flops = 2 * 8192 * 12288 * 4608
    assert A100.gemm_efficiency(8192, 12288, 4608, "fp16") == A100.gemm(flops)
    assert A100.gemm_efficiency(4608, 8192, 12288, "bf16") == A100.gemm(flops)  # any order of the same FLOPs
    assert A100.gemm_efficiency(8192, 12288, 4608, "fp32") == 0.6  # not measured in fp32: the flat figure
    # 9.28e11 FLOPs lies between the table's 5.50e11 (0.765) and 1.10e12 (0.782)
    w = math.log(flops / 5.50e11) / math.log(1.10e12 / 5.50e11)
    assert A100.gemm(flops) == pytest.approx(0.765 + w * (0.782 - 0.765))
    assert A100.attention_efficiency(128, "fp16") == pytest.approx(0.396)
    # no curve: the flat figure, the step's share of its best bf16 matmul (1,745 of 2,250 TFLOP/s)
    assert DEVICES["b200"].gemm_efficiency(8192, 12288, 4608, "bf16") == pytest.approx(0.55 / (794.5 / 989) * 1745 / 2250)
    assert DEVICES["h100-sxm"].gemm_efficiency(8192, 12288, 4608, "fp16") == 0.55  # the curve is bf16 only


def test_a_hand_computed_gemm_time() -> None:
    from dataclasses import replace

    dev = replace(DEVICES["a100-80g"], gemm=Curve(points=((1e9, 0.5), (1e12, 0.8)), source="hand"),
                  attention=Curve(points=((64, 0.2), (256, 0.4)), source="hand"))
    # 4096^3: 2 x 4096^3 = 1.374e11 FLOPs; log10 = 11.138, 0.7127 of the way from 1e9 to 1e12
    g = Gemm(4096, 4096, 4096)
    eff = 0.5 + 0.3 * (math.log10(2 * 4096**3) - 9) / 3
    assert eff == pytest.approx(0.71382, abs=1e-5)
    assert matmul_ms((g,), dev, "fp16") == pytest.approx(2 * 4096**3 / (312e12 * eff) * 1e3)  # 0.6171 ms
    assert matmul_ms((g,), dev, "fp16") == pytest.approx(0.61712, abs=1e-5)
    # attention matmuls: 96 heads of head dimension 128 (the middle, in log, of 64 and 256: 0.3)
    scores = Gemm(2048, 128, 2048, count=96, head_dim=128)
    assert matmul_ms((scores,), dev, "bf16") == pytest.approx(96 * 2 * 2048 * 128 * 2048 / (312e12 * 0.3) * 1e3)
    # FlashAttention's fused kernel has no curve: the flat efficiency
    assert matmul_ms((scores,), dev, "bf16", flash_attention=True) == pytest.approx(
        96 * 2 * 2048 * 128 * 2048 / (312e12 * 0.6) * 1e3)


@settings(max_examples=60, deadline=None)
@given(hidden=st.sampled_from([256, 1024, 2048, 5120]), heads=st.sampled_from([8, 16]), kv=st.sampled_from([1, 2, 8]),
       mlp=st.sampled_from(["gelu", "swiglu"]), t=st.sampled_from([1, 2, 4, 8]), b=st.integers(1, 4),
       recompute=st.sampled_from(["none", "selective", "full"]), flash=st.booleans(),
       window=st.sampled_from([None, 1, 100, 511, 4096]))
def test_the_gemms_of_each_pass_add_up_to_its_flops(hidden: int, heads: int, kv: int, mlp: str, t: int, b: int,
                                                     recompute: str, flash: bool, window: int | None) -> None:
    model = ModelSpec(layers=4, hidden=hidden, heads=heads, kv_heads=kv, seq_len=512, vocab=1024,
                      ffn_hidden=(8 * hidden // 3 if mlp == "swiglu" else 4 * hidden), mlp=mlp,
                      attention_window=window)
    _, block, head = gpt_layers(model, b, recompute, t, flash_attention=flash,  # type: ignore[arg-type]
                                windowed=window is not None)
    for layer in (block, head):
        g = layer.gemms
        assert sum(x.flops for x in g.forward) == pytest.approx(layer.forward_flops, rel=1e-12)
        assert sum(x.flops for x in g.input_grad) == pytest.approx(layer.input_grad_flops, rel=1e-12)
        assert sum(x.flops for x in g.weight_grad) == pytest.approx(layer.weight_grad_flops, rel=1e-12)


def test_the_gemm_shapes_of_a_block_and_the_head() -> None:
    # GPT-3 175B on 8 tensor ranks, one sequence of 2048: Megatron's per-rank GEMMs
    g = block_gemms(2048, 1, 12288, 96, 96, 4 * 12288, tensor_parallel=8)
    assert [(x.m, x.n, x.k) for x in g.forward if not x.head_dim] == [
        (2048, 12288, 4608), (2048, 1536, 12288), (2048, 12288, 6144), (2048, 6144, 12288)]
    assert [(x.m, x.n, x.k, x.count) for x in g.forward if x.head_dim] == [(2048, 128, 2048, 12), (2048, 2048, 128, 12)]
    assert [(x.m, x.n, x.k) for x in g.weight_grad] == [
        (12288, 2048, 4608), (1536, 2048, 12288), (12288, 2048, 6144), (6144, 2048, 12288)]
    h = head_gemms(2048, 1, 12288, 51200, 8)
    assert (h.forward[0].m, h.forward[0].n, h.forward[0].k) == (2048, 12288, 6400)


def _with(**hardware: object):
    data = gpt().model_dump(exclude_none=True)
    data["hardware"] = {**data["hardware"], **hardware}
    return parse_scenario(data)


def test_the_curves_are_off_by_default_and_the_flat_efficiency_overrides_them() -> None:
    flat = build_workload(_with()).costs.stages
    assert build_workload(_with(gemm_curves=False)).costs.stages == flat
    assert build_workload(_with(gemm_curves=True, efficiency=0.6)).costs.stages == flat
    curved = build_workload(_with(gemm_curves=True)).costs.stages
    # gpt.yaml (13B, h = 5120, bf16, one sequence of 2048): dense GEMMs of 1.1e11 to 1.7e11 FLOPs run at
    # about 0.68 on the A100's curve, the attention (head dimension 128) at 0.396: faster than 0.6 on the whole
    assert all(c.forward_ms < f.forward_ms for c, f in zip(curved, flat))
    assert all(c.backward_ms < f.backward_ms for c, f in zip(curved, flat))


def test_the_stage_time_is_the_sum_of_its_gemms_on_the_curve() -> None:
    s = _with(gemm_curves=True)
    w = build_workload(s)
    _, block, _ = gpt_layers(s.model, 1)
    blocks = w.partition[1]
    mid = w.costs.stages[1]  # a middle stage: blocks only
    per_block = matmul_ms(block.gemms.forward, A100, "bf16")
    assert mid.forward_ms == pytest.approx(blocks * (per_block + block.forward_bytes / 1610e6))  # the measured copy
    assert mid.weight_grad_ms == pytest.approx(blocks * matmul_ms(block.gemms.weight_grad, A100, "bf16"))


def test_with_a_curve_tensor_parallel_gemms_run_further_from_peak() -> None:
    one = _with(gemm_curves=True, efficiency=None)
    data = one.model_dump(exclude_none=True)
    data["tensor_parallel"] = 4
    four = parse_scenario(data)
    _, b1, _ = gpt_layers(one.model, 1)
    _, b4, _ = gpt_layers(four.model, 1, tensor_parallel=4)
    t1, t4 = matmul_ms(b1.gemms.forward, A100, "bf16"), matmul_ms(b4.gemms.forward, A100, "bf16")
    assert t4 > t1 / 4  # a quarter of the FLOPs, in GEMMs a quarter the size: each further from peak


def test_a_flat_curve_prices_like_the_flat_efficiency(tmp_path: Path) -> None:
    dev = tmp_path / "gpu.yaml"
    dev.write_text("""
flat:
  description: an A100 whose curves are flat at 0.6
  peak_tflops: {bf16: 312, fp16: 312, fp32: 19.5}
  memory_gb: 80
  hbm_gb_s: 2039
  efficiency: 0.6
  gemm: {source: "hand", points: [[1.0e+6, 0.6], [1.0e+15, 0.6]]}
  attention: {source: "hand", points: [[8, 0.6], [512, 0.6]]}
  intra_node: {bandwidth_gb_s: 300, latency_us: 3}
  inter_node: {bandwidth_gb_s: 25, latency_us: 5}
""")
    flat = build_workload(_with()).costs.stages
    curved = build_workload(_with(device="flat", device_file=str(dev), gemm_curves=True)).costs.stages
    for c, f in zip(curved, flat):
        assert c.forward_ms == pytest.approx(f.forward_ms, rel=1e-9)
        assert c.backward_ms == pytest.approx(f.backward_ms, rel=1e-9)
        assert c.weight_grad_ms == pytest.approx(f.weight_grad_ms, rel=1e-9)


@pytest.mark.parametrize(("curve", "message"), [
    ("{points: [[1.0e+9, 0.5], [1.0e+12, 0.8]]}", "gemm needs a source"),
    ("{source: x, points: [[1.0e+12, 0.5], [1.0e+9, 0.8]]}", "strictly increasing sizes"),
    ("{source: x, points: [[1.0e+9, 0.5], [1.0e+12, 1.5]]}", r"point \[1000000000000.0, 1.5\] must be"),
    ("{source: x, points: [[1.0e+9, 0.5]]}", "at least two"),
    ("{source: x, dtypes: [fp8], points: [[1.0e+9, 0.5], [1.0e+12, 0.8]]}", "dtypes is"),
    ("{source: x, measure: flops, points: [[1.0e+9, 0.5], [1.0e+12, 0.8]]}", "unknown key 'measure'"),
    ("[1, 2]", "is a mapping"),
])
def test_a_device_file_refuses_a_bad_curve_naming_it(tmp_path: Path, curve: str, message: str) -> None:
    dev = tmp_path / "gpu.yaml"
    dev.write_text(f"""
mine:
  peak_tflops: {{bf16: 312, fp16: 312, fp32: 19.5}}
  memory_gb: 80
  hbm_gb_s: 2039
  efficiency: 0.6
  gemm: {curve}
  intra_node: {{bandwidth_gb_s: 300, latency_us: 3}}
  inter_node: {{bandwidth_gb_s: 25, latency_us: 5}}
""")
    with pytest.raises(ScenarioError, match=message):
        read_devices(dev)


def test_the_fused_attention_kernel_runs_the_causal_half_at_its_measured_figure_per_pass() -> None:
    """One block of h = 4096 (32 heads of 128) over 2,048 tokens: FlashAttention's score and context
    matmuls run the causal half, 2bs^2h = 68.7 GFLOP forward and 5bs^2h backward (both grads, and
    the scores again); each query attends 1,024 keys on average, the shape of cuDNN's measured 2K
    point: on the H200 with its curves, 0.490 and 0.375 of 989 TFLOP/s; on the B200, the GB200's
    0.353 backward; with a flat efficiency, at that."""
    from ppsim.costs.analytic import matmul_ms
    from ppsim.costs.gemms import block_gemms
    from ppsim.inputs.hardware import get_device

    b, s, h = 1, 2048, 4096
    gemms = block_gemms(s, b, h, 32, 32, 4 * h, flash_attention=True)
    forward = tuple(g for g in gemms.forward if g.head_dim)
    backward = tuple(g for g in gemms.input_grad if g.head_dim)
    assert sum(g.flops for g in forward) == pytest.approx(2 * b * s * s * h)
    assert sum(g.flops for g in backward) == pytest.approx(5 * b * s * s * h)
    assert {(g.head_dim, g.keys) for g in forward + backward} == {(128, 1024)}
    h200 = get_device("h200")
    assert matmul_ms(forward, h200, "bf16", flash_attention=True) == pytest.approx(2 * b * s * s * h / (989e9 * 0.490))
    assert matmul_ms(backward, h200, "bf16", flash_attention=True, backward=True) == pytest.approx(
        5 * b * s * s * h / (989e9 * 0.375))
    assert matmul_ms(forward, h200, "bf16", flash_attention=True, efficiency=0.55) == pytest.approx(
        2 * b * s * s * h / (989e9 * 0.55))
    assert matmul_ms(backward, get_device("b200"), "bf16", flash_attention=True, backward=True) == pytest.approx(
        5 * b * s * s * h / (2250e9 * 0.353))  # the GB200's cuDNN 9.22 figure
    a100 = get_device("a100-80g")
    assert a100.flash_attention is None and matmul_ms(forward, a100, "bf16", flash_attention=True) == pytest.approx(
        2 * b * s * s * h / (312e9 * a100.efficiency))  # no measured figure: the flat efficiency


def test_a_batched_gemm_is_priced_at_its_batch_s_flops_on_the_curve() -> None:
    """Mamba-2's chunked scan runs a pass's chunks in one kernel: 4,096 GEMMs of 2 x 256 x 128 x 256
    FLOPs (1.7e7 each, where the A100's curve is a call's fixed cost) are one call of 6.9e10."""
    from dataclasses import replace

    dev = replace(A100, gemm=Curve(points=((1e9, 0.1), (1e11, 0.6)), source="hand"))
    one = 2 * 256 * 128 * 256
    batched = Gemm(256, 128, 256, count=4096, batched=True)
    eff = 0.1 + 0.5 * math.log10(4096 * one / 1e9) / 2
    assert matmul_ms((batched,), dev, "bf16") == pytest.approx(4096 * one / (312e12 * eff) * 1e3)
    separate = Gemm(256, 128, 256, count=4096)  # separate calls: each at the curve's floor
    assert matmul_ms((separate,), dev, "bf16") == pytest.approx(4096 * one / (312e12 * 0.1) * 1e3)
    assert batched.times(2).batched and batched.times(2).count == 8192
