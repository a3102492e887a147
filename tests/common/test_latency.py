"""Latency histograms: exact to 3 significant digits, and merged across parts as one."""

from __future__ import annotations

import pytest

from common.latency import LatencyHistogram
from common.report import ProducerReport
from common.stats import percentiles
from producer.report_merge import merge_reports


def _hist(values_ms: list[int]) -> LatencyHistogram:
    h = LatencyHistogram()
    for v in values_ms:
        h.record(v / 1000)
    return h


def test_percentiles_are_the_samples_ranks_to_three_digits():
    values = [7 * v for v in range(100, 0, -1)]  # 700, 693, ... 7 milliseconds
    h = _hist(values)
    assert h.count == 100 and h.max_s == pytest.approx(0.7, rel=1e-3)
    expect = percentiles(values)  # nearest rank: 350, 665, 693
    got = h.percentiles_ms()
    assert sorted(got) == ["p50", "p95", "p99"]
    for key, value in expect.items():  # the low end of the sample's bucket
        assert value * 0.999 <= got[key] <= value, (key, got[key], value)
    assert got == {"p50": 349.952, "p95": 664.576, "p99": 692.736}
    assert LatencyHistogram().percentiles_ms() == {}


def test_two_histograms_encode_and_add_up_to_the_histogram_of_all_samples():
    a, b = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1], [100, 200, 300]
    merged = LatencyHistogram.decode(_hist(a).encode())
    merged.add(LatencyHistogram.decode(_hist(b).encode()))
    assert merged.count == 13
    assert merged.percentiles_ms() == _hist(a + b).percentiles_ms()
    # Percentiles of all samples, not of the parts' percentiles: p95 of all is 200 ms.
    assert merged.percentiles_ms()["p95"] == pytest.approx(200, rel=1e-3)
    with pytest.raises(ValueError, match="not an encoded latency histogram"):
        LatencyHistogram.decode("not base64!")


def _report(sent: int, latencies_ms: list[int], shard: str, started: str) -> dict:
    return ProducerReport(
        target_rate=1000.0, sent=sent, acked=sent, undelivered=0, duration_s=2.0, send_s=2.0,
        achieved_rate=sent / 2, errors={}, ack_latency_ms=_hist(latencies_ms).percentiles_ms(),
        started_at=started, per_second=[sent // 2, sent - sent // 2],
        per_second_acked=[sent // 2, sent - sent // 2], per_second_target=[1000.0, 1000.0],
        ack_latency_histogram=_hist(latencies_ms).encode(), shard=shard, workers=2,
    ).to_dict()  # fmt: skip


def test_shards_reports_merge_into_totals_and_percentiles_over_all():
    parts = [
        _report(2000, [5] * 19 + [40], "0/2", "2026-01-01T00:00:00+00:00"),
        _report(1800, [10] * 18 + [80, 90], "1/2", "2026-01-01T00:00:00.500000+00:00"),
    ]
    merged = merge_reports(parts)
    assert (merged.sent, merged.acked, merged.workers, merged.shard) == (3800, 3800, 4, None)
    assert merged.target_rate == 2000.0
    assert merged.duration_s == 2.5 and merged.achieved_rate == 1520.0  # 3800 / 2.5
    assert merged.per_second == [1900, 1900]
    # 40 samples: 19 x 5, 1 x 40, 18 x 10, 80, 90. p50 = the 20th = 10 (nearest rank), p95 =
    # the 38th = 40, p99 = the 40th = 90.
    assert merged.ack_latency_ms == {"p50": 10.0, "p95": 40.0, "p99": 89.984}
