"""bench/moe_exchanges.py: how it splits each all-to-all between waiting for the other rank and
the exchange itself (the run it analyses is the bench's, not a test's)."""

from __future__ import annotations

import pytest

from conftest import bench_module

bench = bench_module("moe_exchanges")


def test_an_exchange_is_the_wait_for_the_last_rank_then_the_time_after_its_arrival() -> None:
    """Rank 0 arrives at 0 and 10 ms, rank 1 at 2 and 9 ms; both leave 1 and 0.5 ms after the
    later one arrived (ns on one clock)."""
    ms = 1_000_000
    gaps, after = bench.exchange_times([[(0, 3 * ms), (10 * ms, 21 * ms // 2)],
                                        [(2 * ms, 3 * ms), (9 * ms, 21 * ms // 2)]])
    assert gaps == pytest.approx([2.0, 1.0]) and after == pytest.approx([1.0, 0.5])
    spread = bench.Spread.of([1.0, 2.0, 3.0, 10.0])
    assert (spread.median, spread.mean, spread.max) == (2.5, 4.0, 10.0)
    with pytest.raises(ValueError):  # ranks that ran different numbers of exchanges are not one run's
        bench.exchange_times([[(0, 1)], []])
