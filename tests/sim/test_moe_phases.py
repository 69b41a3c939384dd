"""An overlapped forward and backward pair their MoE blocks phase by phase, as Megatron-Core's
combined 1F1B runs them (``TransformerLayerSchedulePlan.run``, after DeepSeek's DualPipe): what
each phase's communication hides is at most the compute beside it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import gpt
from ppsim.costs.table import CostTable, Link, MoEPhases, StageCost
from ppsim.costs.workload import block_kinds, build_workload, model_layers
from ppsim.inputs.scenario import parse_scenario
from ppsim.plan import Action, Kind, Overlap
from ppsim.sim.durations import overlapped_ms, paired_block_ms

LIGHT = MoEPhases(attention_forward=2, mlp_forward=3, attention_input_grad=4, attention_weight_grad=1,
                  mlp_input_grad=5, mlp_weight_grad=2, dispatch_forward=1, combine_forward=1, dispatch_backward=1,
                  combine_backward=1)
HEAVY = MoEPhases(**{**LIGHT.__dict__, "dispatch_forward": 6, "combine_forward": 6, "dispatch_backward": 6,
                     "combine_backward": 6})


def test_a_pair_of_blocks_by_hand() -> None:
    """Light all-to-alls (1 ms each): the backward's combine under the forward's attention (2), the
    forward's dispatch and the backward's under the experts' 5 + 2 + 3, the forward's combine under
    the backward's attention (4), then its weight grads (1): 2 + 10 + 4 + 1 = 17 of the 21 one after
    the other; every all-to-all hidden. Heavy ones (6 ms): 6 + (max(6, 5) + 6) + 6 + 1 = 25 of 41,
    16 of their 24 hidden. The compute beside a communication on 3/4 of the SMs: 2.25 + 10.5 + 4.25
    + 1. A split backward's input grad leaves its weight grads: 2 + (5 + 3) + 4 = 14."""
    assert LIGHT.forward_ms + LIGHT.backward_ms() == 21
    assert paired_block_ms(LIGHT, LIGHT) == pytest.approx(17)
    assert paired_block_ms(HEAVY, HEAVY) == pytest.approx(25)
    assert HEAVY.forward_ms + HEAVY.backward_ms() == 41
    assert paired_block_ms(LIGHT, LIGHT, sm_share=0.25) == pytest.approx(18.0)
    assert paired_block_ms(LIGHT, LIGHT, weight_grads=False) == pytest.approx(14)


phases = st.builds(MoEPhases, *[st.floats(0, 10) for _ in range(10)])


@given(phases, phases, st.floats(0, 0.5), st.booleans())
def test_a_pair_takes_at_least_its_longest_stream_and_at_most_both_passes(
        f: MoEPhases, b: MoEPhases, share: float, whole: bool) -> None:
    paired = paired_block_ms(f, b, share, whole)
    serial = f.forward_ms + b.backward_ms(whole)
    comm = f.dispatch_forward + f.combine_forward + b.dispatch_backward + b.combine_backward
    weights = b.mlp_weight_grad + b.attention_weight_grad if whole else 0.0
    compute = f.attention_forward + f.mlp_forward + b.attention_input_grad + b.mlp_input_grad + weights
    assert paired <= serial * (1 + 1e-12)
    assert paired >= max(comm, compute) * (1 - 1e-12)


def test_an_overlapped_action_hides_what_each_pair_of_blocks_hides() -> None:
    """A stage of 2 MoE blocks (and whatever else its passes run, here 5 ms forward and 8 backward
    beyond them): both passes less twice what one pair hides."""
    stage = StageCost(forward_ms=2 * HEAVY.forward_ms + 5, backward_ms=2 * HEAVY.backward_ms() + 8,
                      weight_grad_ms=2 * 3, moe_layers=2, moe_phases=HEAVY)
    costs = CostTable(stages=(stage,), message_bytes=0, links=(Link(latency_ms=0.0),))
    both = overlapped_ms(costs, Overlap.of(Action(0, Kind.F, 1), Action(0, Kind.B, 0)))
    assert both == pytest.approx(stage.forward_ms + stage.backward_ms - 2 * (41 - 25))


def _moe_scenario(schedule: str, chunks: int) -> dict:
    data = gpt().model_dump(exclude_none=True)
    data["model"].update(layers=8, moe={"experts": 8, "top_k": 2, "ffn_hidden": 4096})
    data["pipeline"].update(stages=2, chunks=chunks, schedule=schedule, microbatches=8)
    data["training"].pop("global_batch", None)
    data.update(data_parallel=4, tensor_parallel=1, expert_parallel=4)
    data.pop("costs", None)
    return data


def test_a_moe_blocks_halves_are_the_block_and_only_an_overlapping_schedule_splits_it() -> None:
    """The attention half (with its norm) and the experts' half add up to the block: its FLOPs, its
    GEMMs' FLOPs, its memory-bound bytes. 1F1B pairs nothing, so its stages carry no phases."""
    s = parse_scenario(_moe_scenario("combined-1f1b", 2))
    kinds = block_kinds(s, model_layers(s))
    assert kinds is not None
    whole = kinds.kinds["moe"][0]
    attention, experts = kinds.halves["moe"]
    assert attention is not None
    for field in ("forward_flops", "input_grad_flops", "weight_grad_flops", "forward_bytes", "backward_bytes"):
        assert getattr(attention, field) + getattr(experts, field) == pytest.approx(getattr(whole, field)), field
    for pass_ in ("forward", "input_grad", "weight_grad"):
        flops = [sum(g.flops for g in getattr(x.gemms, pass_)) for x in (attention, experts, whole)]
        assert flops[0] + flops[1] == pytest.approx(flops[2]), pass_
    costs = build_workload(s).costs
    assert all(c.moe_phases is not None for c in costs.stages)
    plain = build_workload(parse_scenario(_moe_scenario("1f1b", 1))).costs
    assert all(c.moe_phases is None for c in plain.stages)


def test_a_stage_of_windowed_and_full_blocks_pairs_their_average() -> None:
    """GPT-OSS's layers alternate a sliding window with full attention: a stage of two of each pairs
    the mean of the two kinds' phases (each priced as a stage of that kind alone prices it), whatever
    order Python's hashing gives the kinds (a tie between them once picked either, by the seed)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    def phases(**window: int) -> list[MoEPhases | None]:
        data = _moe_scenario("combined-1f1b", 1)
        data["model"].update(window)
        data["training"]["flash_attention"] = True
        data["pipeline"]["partition"] = "uniform"  # 4 blocks a stage: 2 of each kind where they alternate
        return [c.moe_phases for c in build_workload(parse_scenario(data)).costs.stages]

    mixed, windowed, full = phases(attention_window=128, full_attention_every=2), phases(attention_window=128), phases()
    for m, w, f in zip(mixed, windowed, full, strict=True):
        assert m is not None and w is not None and f is not None
        assert w.attention_forward < f.attention_forward
        for name, value in m.__dict__.items():
            assert value == pytest.approx((getattr(w, name) + getattr(f, name)) / 2), name
    here = Path(__file__).resolve().parent
    code = (f"import sys; sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]; "
            "from test_moe_phases import _moe_scenario; "
            "from ppsim.costs.workload import build_workload; from ppsim.inputs.scenario import parse_scenario; "
            "d = _moe_scenario('combined-1f1b', 1); d['model'].update(attention_window=128, full_attention_every=2); "
            "d['training']['flash_attention'] = True; d['pipeline']['partition'] = 'uniform'; "
            "print([c.moe_phases.attention_forward for c in build_workload(parse_scenario(d)).costs.stages])")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("0", "1", "2")}
    assert len(seen) == 1 and seen.pop().strip() == str([m.attention_forward for m in mixed if m is not None])
