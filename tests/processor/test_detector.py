"""The alert detector as plain Python: exact transitions for crafted readings."""

from __future__ import annotations

from datetime import datetime

from processor.detector import DetectorConfig, MetricState, alert_id, detect, dump_state, load_state


def _reading(i: int, value: float, **extra: object) -> dict[str, object]:
    return {
        "event_id": f"e{i}", "device_id": "dev-1", "device_type": "thermostat", "site": "A",
        "event_time": datetime(2026, 1, 1, 0, 0, i), "seq": i, "temperature_c": value,
        "temperature_c_low": 15.0, "temperature_c_high": 28.0,
    } | extra  # fmt: skip


def test_threshold_alert_raised_once_and_cleared_by_the_first_in_range_reading():
    values = [20.0, 29.0, 30.0, 31.0, 27.0, 26.0, 10.0, 20.0]
    state: dict[str, MetricState] = {}
    out = detect([_reading(i, v) for i, v in enumerate(values)], state, DetectorConfig(warmup=100))
    got = [(t["transition"], t["kind"], t["event_id"], t["alert_id"], t["threshold"]) for t in out]
    high, low = (
        alert_id("e1", "temperature_c", "threshold_high"),
        alert_id("e6", "temperature_c", "threshold_low"),
    )
    assert got == [
        ("raised", "threshold_high", "e1", high, 28.0),
        ("cleared", "threshold_high", "e4", high, 28.0),
        ("raised", "threshold_low", "e6", low, 15.0),
        ("cleared", "threshold_low", "e7", low, 15.0),
    ]
    assert state["temperature_c"].open == {}
    assert state["temperature_c"].n == len(values)


def test_zscore_alert_after_warmup_with_exact_score():
    cfg = DetectorConfig(span=9, warmup=4, z_threshold=3.0)
    values = [20.0, 21.0, 20.0, 21.0, 20.0, 26.0, 20.5]
    # Independent EWMA: alpha = 2 / (9 + 1) = 0.2.
    mean, var = values[0], 0.0
    for v in values[1:5]:
        d = v - mean
        mean += 0.2 * d
        var = 0.8 * (var + 0.2 * d * d)
    z_spike = (26.0 - mean) / var**0.5
    out = detect([_reading(i, v, temperature_c_high=None) for i, v in enumerate(values)], {}, cfg)
    assert [(t["transition"], t["kind"], t["event_id"]) for t in out] == [
        ("raised", "zscore", "e5"),
        ("cleared", "zscore", "e6"),
    ]
    assert abs(out[0]["zscore"] - z_spike) < 1e-12
    assert out[0]["zscore"] > 3.0


def test_state_round_trips_through_json_and_resumes_identically():
    readings = [_reading(i, v) for i, v in enumerate([20.0, 29.0, 30.0, 25.0, 29.5])]
    whole = detect(readings, {}, DetectorConfig(warmup=2))
    state: dict[str, MetricState] = {}
    first = detect(readings[:2], state, DetectorConfig(warmup=2))
    resumed = load_state(dump_state(state))
    rest = detect(readings[2:], resumed, DetectorConfig(warmup=2))
    assert first + rest == whole


def test_missing_values_are_skipped():
    out = detect([_reading(0, float("nan")), _reading(1, 35.0)], {}, DetectorConfig())
    assert [(t["transition"], t["event_id"]) for t in out] == [("raised", "e1")]
