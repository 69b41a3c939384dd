"""Why a partition is as even as it is (issue 34: gpt.yaml printed `5 5 5 5 5 5 5 5` and nothing said
that the LM head's stage is the slowest and no split of whole layers does better)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from conftest import GPT_YAML, gpt, invoke
from ppsim.cli import app
from ppsim.costs.partition import balance, balanced, stage_loads
from ppsim.prediction import predict


def test_a_head_heavier_than_the_imbalance_a_layer_could_fix() -> None:
    """4 layers of 1 on 2 stages, the head 1 on the last: loads 2 and 3 of a mean 2.5. Moving a
    layer gives 3 and 2: no better."""
    b = balance([2, 2], [1.0] * 4, 0.0, 1.0)
    assert b is not None
    assert (b.slowest, b.holds) == (1, "the LM head")
    assert (b.slowest_share, b.layer_share, b.best_share) == pytest.approx((1.2, 0.4, 1.2))
    assert b.moved == (0, pytest.approx(1.2))


def test_an_uneven_explicit_split_is_told_the_balanced_one() -> None:
    b = balance([1, 3], [1.0] * 4, 0.0, 0.0)
    assert b is not None and b.slowest == 1 and b.holds == ""
    assert (b.slowest_share, b.best_share) == pytest.approx((1.5, 1.0))
    assert b.moved == (0, pytest.approx(1.0)) or b.moved == (1, pytest.approx(1.0))


@given(st.lists(st.floats(0.1, 10.0), min_size=2, max_size=12), st.integers(2, 6), st.floats(0.0, 20.0),
       st.floats(0.0, 20.0), st.data())
def test_the_shares_bound_each_other(costs: list[float], parts: int, first: float, last: float, data) -> None:
    assume(len(costs) >= parts - 2)
    counts = balanced(costs, parts, first, last)
    b = balance(counts, costs, first, last)
    assert b is not None
    assert b.slowest_share >= 1.0 - 1e-9
    assert b.best_share == pytest.approx(b.slowest_share)  # balanced is the best split of whole layers
    if b.moved is not None:
        assert b.moved[1] >= b.best_share - 1e-9  # moving a layer off the slowest cannot beat the best
    # any other split: never below the best
    cuts = sorted(data.draw(st.lists(st.integers(0, len(costs)), min_size=parts - 1, max_size=parts - 1)))
    other = [hi - lo for lo, hi in zip([0, *cuts], [*cuts, len(costs)])]
    mean = (sum(costs) + first + last) / parts
    assert max(stage_loads(other, costs, first, last)) / mean >= b.best_share - 1e-9


def test_gpt_yaml_says_its_last_stage_is_the_slowest_and_why() -> None:
    even = predict(gpt()).trace.meta["partition_balance"]
    assert (even["slowest"], even["holds"]) == (7, "the LM head")
    assert even["slowest_share"] > 1.1 and even["best_share"] == pytest.approx(even["slowest_share"])
    assert even["moved"]["stage"] == 6 and even["moved"]["share"] > even["slowest_share"]
    res = invoke(app, "run", GPT_YAML)
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("partition"))
    assert "the slowest, stage 7 (5 layers and the LM head)" in line
    assert f"{even['slowest_share']:.2f}x the even share" in line and "no split of whole layers is faster" in line


def test_an_explicit_split_worse_than_balanced_says_so(tmp_path) -> None:
    text = GPT_YAML.read_text()
    assert "partition: balanced" in text
    path = tmp_path / "gpt.yaml"
    path.write_text(text.replace("partition: balanced", "partition: [8, 4, 4, 4, 4, 4, 4, 8]"))
    res = invoke(app, "run", path)
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("partition"))
    assert "the balanced partition reaches" in line and "(pipeline.partition: balanced)" in line
