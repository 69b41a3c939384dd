"""bench/moe_exchanges.py: how it sums up the all-to-alls it splits (ppexec.results.collect.exchange_spans,
tests/ppexec/test_ppexec_moe.py) between waiting for the other rank and the exchange itself (the run it
analyses is the bench's, not a test's)."""

from __future__ import annotations

from conftest import bench_module

bench = bench_module("moe_exchanges")


def test_a_spread_is_the_median_mean_90th_percentile_and_maximum() -> None:
    spread = bench.Spread.of([1.0, 2.0, 3.0, 10.0])
    assert (spread.median, spread.mean, spread.p90, spread.max) == (2.5, 4.0, 3.0, 10.0)
