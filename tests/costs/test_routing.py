"""A seeded routing distribution (``model.moe.routing``): the busiest expert-parallel rank found from
drawn expert loads, against an independent Dirichlet sampler, its order in EP, and what a plan shows."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import invoke
from ppsim.cli import app
from ppsim.costs.moe import ExpertShard, routing_skew
from ppsim.errors import ScenarioError
from ppsim.inputs.scenario import ModelSpec, RoutingSpec, parse_scenario
from ppsim.prediction import build, predict

MIXTRAL: dict[str, Any] = {"layers": 8, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
                           "seq_len": 4096, "vocab": 32000, "mlp": "swiglu", "positions": "rope", "dropout": False,
                           "moe": {"experts": 8, "top_k": 2, "ffn_hidden": 14336}}


def test_one_rank_holds_every_expert_and_is_the_mean() -> None:
    assert routing_skew(RoutingSpec(load_cv=2.0), 64, 1, 10) == 1.0


def test_evenly_loaded_experts_give_no_skew() -> None:
    assert routing_skew(RoutingSpec(load_cv=1e-4), 256, 256, 4) == pytest.approx(1.0, abs=2e-3)


@given(cv=st.floats(0.05, 3.0), seed=st.integers(0, 1000), log_ep=st.integers(0, 5), layers=st.integers(1, 6))
def test_twice_the_ranks_never_lighten_the_busiest(cv: float, seed: int, log_ep: int, layers: int) -> None:
    """A rank of EP is two neighbouring ranks of 2 EP: its share is at most twice the larger one's,
    so in each layer (the same draw whatever EP) the busiest rank's share x EP cannot fall."""
    routing = RoutingSpec(load_cv=cv, seed=seed)
    ep = 2**log_ep
    narrow, wide = routing_skew(routing, 64, ep, layers), routing_skew(routing, 64, 2 * ep, layers)
    assert 1.0 <= narrow <= wide * (1 + 1e-12) and wide <= 2 * ep


def test_the_draw_is_a_dirichlet_of_the_experts_shares() -> None:
    """With one expert per rank the skew is E x the largest share of a Dirichlet(1 / cv^2) draw: the
    mean over 400 layers against numpy's own Dirichlet sampler (another algorithm, other seeds)."""
    np = pytest.importorskip("numpy")
    experts, cv, layers = 32, 0.5, 400
    ours = routing_skew(RoutingSpec(load_cv=cv, seed=7), experts, experts, layers)
    shares = np.random.default_rng(11).dirichlet([1 / cv**2] * experts, size=20_000)
    theirs = float(experts * shares.max(axis=1).mean())
    # 400 layers: the mean's standard error is about 0.3 % of it
    assert ours == pytest.approx(theirs, rel=0.02)
    assert ours > 1.5  # at cv 0.5 the busiest of 32 experts carries well over the mean


def test_a_seed_is_a_draw() -> None:
    a, b = RoutingSpec(load_cv=0.4, seed=1), RoutingSpec(load_cv=0.4, seed=2)
    assert routing_skew(a, 64, 8, 3) == routing_skew(RoutingSpec(load_cv=0.4, seed=1), 64, 8, 3)
    assert routing_skew(a, 64, 8, 3) != routing_skew(b, 64, 8, 3)


def _scenario(ep: int, **moe: Any) -> dict[str, Any]:
    return {"model": {**MIXTRAL, "moe": {**MIXTRAL["moe"], **moe}}, "pipeline": {"stages": 2, "microbatches": 8},
            "data_parallel": 8, "expert_parallel": ep, "hardware": {"device": "h100-sxm"}}


def test_a_plan_prices_the_busiest_rank_its_expert_parallelism_finds() -> None:
    """The same routing costs EP 8 more than EP 2 (its busiest rank carries more of the mean); a
    given skew of that value prices the same stage."""
    routing = {"load_cv": 0.5, "seed": 3}
    m = ModelSpec(**{**MIXTRAL, "moe": {**MIXTRAL["moe"], "routing": routing}})
    skew2, skew8 = ExpertShard.of(m, 2).skew, ExpertShard.of(m, 8).skew
    assert 1 < skew2 < skew8
    drawn = build(parse_scenario(_scenario(8, routing=routing))).workload.costs.stages[0]
    given_skew = build(parse_scenario(_scenario(8, skew=skew8))).workload.costs.stages[0]
    assert drawn.forward_ms == pytest.approx(given_skew.forward_ms, rel=1e-12)
    assert drawn.forward_overlap_ms == pytest.approx(given_skew.forward_overlap_ms, rel=1e-12)
    meta = predict(parse_scenario(_scenario(8, routing=routing))).trace.meta
    assert meta["expert_parallel"] == 8 and meta["routing_skew"] == pytest.approx(skew8)


def test_skew_and_routing_together_are_refused_naming_both(tmp_path: Any) -> None:
    import yaml

    with pytest.raises(ScenarioError, match=r"skew \(1.5\) and routing both say how uneven"):
        parse_scenario(_scenario(2, skew=1.5, routing={"load_cv": 0.3}))
    path = tmp_path / "both.yaml"
    path.write_text(yaml.safe_dump(_scenario(2, skew=1.5, routing={"load_cv": 0.3})))
    result = invoke(app, "run", path)
    assert result.exit_code == 1 and "model.moe" in result.output and "Traceback" not in result.output


def test_ppsim_run_names_the_busiest_rank() -> None:
    from rich.console import Console

    from ppsim.trace.metrics import summarize
    from ppsim.views.render.summary_table import summary_renderable

    trace = predict(parse_scenario(_scenario(8, routing={"load_cv": 0.5, "seed": 3}))).trace
    console = Console(width=200, record=True)
    console.print(summary_renderable(summarize(trace)))
    assert f"expert parallel 8 (busiest rank's tokens {trace.meta['routing_skew']:.2f}x the mean)" in (
        console.export_text())
