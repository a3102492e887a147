"""The detector over micro-batches in Spark: the same transitions and states as plain Python."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.testing import assertDataFrameEqual

from common.contract import METRIC_NAMES
from processor import alerts
from processor.detector import DetectorConfig, MetricState, detect, dump_state

READINGS = (
    "event_id string, device_id string, device_type string, site string, "
    "event_time timestamp, seq long, "
    + ", ".join(f"{m} double, {m}_low double, {m}_high double" for m in METRIC_NAMES)
)
CONFIG = DetectorConfig(span=5, warmup=3, z_threshold=2.0)
# Per device, its readings' (temperature_c, humidity_pct) in time order.
SERIES = {
    "dev-1": [(20.0, None), (29.0, None), (30.0, None), (21.0, None), (20.0, None), (35.0, None)],
    "dev-2": [(None, 40.0), (None, 41.0), (None, 40.0), (None, 41.0), (None, 95.0), (None, 40.0)],
    "dev-3": [(20.0, 50.0)],
}


def _reading(device: str, i: int, temperature: float | None, humidity: float | None):
    row: dict[str, Any] = {
        "event_id": f"{device}-e{i}", "device_id": device, "device_type": "thermostat",
        "site": "A", "event_time": datetime(2026, 1, 1, 0, 0, i), "seq": i,
    }  # fmt: skip
    for m in METRIC_NAMES:
        row |= {m: None, f"{m}_low": None, f"{m}_high": None}
    row |= {"temperature_c": temperature, "temperature_c_low": 15.0, "temperature_c_high": 28.0}
    row |= {"humidity_pct": humidity, "humidity_pct_high": 90.0}
    return row


def _readings() -> dict[str, list[dict[str, Any]]]:
    return {d: [_reading(d, i, *v) for i, v in enumerate(vs)] for d, vs in SERIES.items()}


def _frame(spark, rows):
    return spark.createDataFrame([tuple(r.values()) for r in rows], READINGS)


def _transitions(spark, detected):
    return detected.filter("transition IS NOT NULL").drop("state")


@pytest.fixture(params=[10_000, 2], ids=["one-arrow-batch", "arrow-batches-of-2"])
def arrow_batch(spark, request):
    """Arrow batches of 2 rows split a device's readings between two of them."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    spark.conf.set(key, str(request.param))
    yield request.param
    spark.conf.unset(key)


def test_two_batches_from_stored_states_give_what_one_pass_in_order_gives(spark, arrow_batch):
    by_device = _readings()
    # Batch 1: each device's first three readings, batch 2 the rest; each shuffled.
    first = [r for rows in by_device.values() for r in rows[:3]][::-1]
    second = [r for rows in by_device.values() for r in rows[3:]][::-1]
    states_schema = alerts.DETECTOR_STATE_SCHEMA
    untouched = ("dev-9", dump_state({"temperature_c": MetricState(n=7, mean=1.5, var=0.25)}))
    stored = spark.createDataFrame([untouched], states_schema)

    one = alerts.detect_alerts(_frame(spark, first), stored, CONFIG).persist()
    states = stored.unionByName(alerts.new_states(one))
    two = alerts.detect_alerts(_frame(spark, second), states, CONFIG).persist()

    # Independently: the plain detector over each device's readings, in order, at once.
    want_states = {}
    want: list[dict[str, Any]] = []
    for device, rows in by_device.items():
        state: dict[str, MetricState] = {}
        want += detect(rows, state, CONFIG)
        want_states[device] = dump_state(state)
    assert {t["kind"] for t in want} == {"threshold_high", "zscore"}  # both kinds exercised
    assert [t["transition"] for t in want].count("cleared") >= 2
    expected = spark.createDataFrame(
        [tuple(t.values()) for t in want], alerts.DETECTED_SCHEMA.names[:-1]
    )
    got = _transitions(spark, one).unionByName(_transitions(spark, two))
    assertDataFrameEqual(got, expected.select(*got.columns))
    # The devices of each batch, and only those, get their new state.
    assert sorted(r["device_id"] for r in alerts.new_states(one).collect()) == [
        "dev-1",
        "dev-2",
        "dev-3",
    ]
    latest = {r["device_id"]: r["state"] for r in alerts.new_states(two).collect()}
    assert latest == {d: want_states[d] for d in ("dev-1", "dev-2")}


def test_a_raised_alert_is_shaped_for_gold_and_a_clearing_for_the_clears(spark):
    rows = _readings()["dev-1"][:4]  # 29.0 raises threshold_high, 21.0 clears it
    detected = alerts.detect_alerts(
        _frame(spark, rows), spark.createDataFrame([], alerts.DETECTOR_STATE_SCHEMA), CONFIG
    )
    raised = alerts.raised_alerts(detected, datetime(2026, 1, 1, 1, tzinfo=UTC)).collect()
    cleared = alerts.cleared_alerts(detected).collect()
    aid = detect(rows, {}, CONFIG)[0]["alert_id"]
    assert [(r["alert_id"], r["value"], r["threshold"], r["detected_time"]) for r in raised] == [
        (aid, 29.0, 28.0, datetime(2026, 1, 1, 1))
    ]
    assert [(r["alert_id"], r["value"], r["cleared_time"]) for r in cleared] == [
        (aid, 21.0, datetime(2026, 1, 1, 0, 0, 3))
    ]
