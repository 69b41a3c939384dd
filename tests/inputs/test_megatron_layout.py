"""Megatron's --pipeline-model-parallel-layout read and written (issue 36's first piece): its own
examples parse as Megatron-Core parses them, every partition round-trips with no layer lost or
duplicated, and each of Megatron's rules is a one-line error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ppsim.errors import ScenarioError
from ppsim.inputs.megatron_layout import blocks_per_stage, check_layout, format_layout, parse_layout


def test_megatrons_own_example_parses_as_its_docstring_says() -> None:
    """PipelineParallelLayerLayout.parse_str_to_list: "Ettt|(tt|)*29,m|L" is
    [["E","t","t","t"]] + [["t","t"]] * 29 + [["m"], ["L"]]."""
    assert parse_layout("Ettt|(tt|)*29,m|L") == [["E", "t", "t", "t"]] + [["t", "t"]] * 29 + [["m"], ["L"]]
    check_layout(parse_layout("Ettt|(tt|)*29,m|L"), layers=61, pipeline=16, mtp_layers=1)


def test_deepseek_v3s_recipe_layout() -> None:
    stages = parse_layout("Et*4|(t*4|)*14tmL")
    assert blocks_per_stage(stages) == [4] * 15 + [1] and sum(blocks_per_stage(stages)) == 61
    check_layout(stages, layers=61, pipeline=16, mtp_layers=1)
    assert format_layout(blocks_per_stage(stages), mtp_layers=1) == "Et*4|(t*4|)*14tmL"


@given(st.integers(1, 32).flatmap(lambda p: st.tuples(
    st.lists(st.integers(0, 8), min_size=p, max_size=p), st.integers(0, 2))))
def test_every_partition_round_trips_with_every_layer_once(case: tuple[list[int], int]) -> None:
    blocks, mtp = case
    text = format_layout(blocks, mtp_layers=mtp)
    stages = parse_layout(text)
    assert blocks_per_stage(stages) == blocks
    flat = [x for s in stages for x in s]
    assert flat.count("E") == 1 and flat[0] == "E" and flat[-1] == "L" and flat.count("m") == mtp
    if sum(blocks):  # Megatron's own checks pass on one rank per stage
        check_layout(stages, layers=sum(blocks), pipeline=len(blocks), mtp_layers=mtp)


@pytest.mark.parametrize(("text", "layers", "pipeline", "says"), [
    ("Et*4|t*4x|tL", 9, 3, "'x' at 8 is not a layer"),
    ("(t*4|)Et|tL", 6, 3, "followed by \\*n"),
    ("Et*4|t*4|L", 9, 3, "holds 8 transformer blocks \\(t\\), the model 9"),
    ("t*4|Et*4|tL", 9, 3, "embedding \\(E\\) must come first"),
    ("Et*4|t*4|tL|L", 9, 2, "loss \\(L\\) must come last, once"),
    ("Et*4|t*4|tL", 9, 2, "3 virtual stages do not split over 2 pipeline ranks"),
    ("Et*4|mt*4|tL", 9, 3, "no transformer block \\(t\\) may follow an MTP layer"),
])
def test_megatrons_rules_are_one_line_errors(text: str, layers: int, pipeline: int, says: str) -> None:
    with pytest.raises(ScenarioError, match=says) as err:
        check_layout(parse_layout(text), layers=layers, pipeline=pipeline, mtp_layers=text.count("m"))
    assert err.value.field == "pipeline_model_parallel_layout" and "\n" not in str(err.value)
