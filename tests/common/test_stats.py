import polars as pl

from common.stats import percentiles
from loadtest.latency import latency_summary


def test_nearest_rank_percentiles_are_samples():
    # 20 samples 1..20: p50 is the 10th, p95 the 19th, p99 the 20th.
    assert percentiles(range(20, 0, -1)) == {"p50": 10, "p95": 19, "p99": 20}
    assert percentiles([7.5]) == {"p50": 7.5, "p95": 7.5, "p99": 7.5}
    assert percentiles([], (50,)) == {}
    assert percentiles([3, 1, 2], (0, 100, 12.5)) == {"p0": 1, "p100": 3, "p12.5": 1}
    assert percentiles(range(1, 101), (7,)) == {"p7": 7}  # 7 * 100 / 100, not 7.000000000000001


def test_the_latency_summary_is_the_same_percentiles_with_count_and_max():
    values = pl.Series([None, 0.5, 2.25, 1.0, 4.0])
    assert latency_summary(values) == {"count": 4, "p50": 1.0, "p95": 4.0, "p99": 4.0, "max": 4.0}
    assert latency_summary(pl.Series([None], dtype=pl.Float64)) == {"count": 0}


def test_the_latency_summary_reads_the_sorted_column_in_place():
    """No Python object per value: a hundred million latencies would take gigabytes."""
    import tracemalloc

    values = pl.Series(range(1_000_000, 0, -1), dtype=pl.Float64)
    tracemalloc.start()
    try:
        summary = latency_summary(values)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    want = {"count": 1_000_000, "p50": 500_000.0, "p95": 950_000.0, "p99": 990_000.0}
    assert summary == want | {"max": 1_000_000.0}
    assert peak < 1_000_000  # bytes; a list of the values alone is over 30 MB
