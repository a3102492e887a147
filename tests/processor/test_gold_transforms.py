"""Gold transforms on tiny static frames: sliding windows, sessions, latest status, recoveries."""

from __future__ import annotations

from datetime import UTC, datetime

from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from common.contract import METRIC_NAMES
from processor import gold
from processor.alerts import alert_recoveries
from processor.metrics import progress_line, progress_row


def t(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 1, 1, 0, minute, second)


def _silver(spark, rows):
    df = spark.createDataFrame(
        rows,
        "device_id string, device_type string, site string, event_time timestamp, seq long, temperature_c double",
    )
    for m in METRIC_NAMES:
        if m != "temperature_c":
            df = df.withColumn(m, df["temperature_c"] * 0 + None)
    return df


def _sliding(silver):
    minutes = gold.device_minute_aggregates(silver, "1 minute")
    return gold.site_type_windows(minutes, "10 minutes", "5 minutes")


def test_sliding_windows_count_each_event_in_both_overlapping_windows(spark):
    silver = _silver(spark, [
        ("d1", "thermostat", "A", t(1), 1, 10.0),
        ("d2", "thermostat", "A", t(6), 1, 20.0),
        ("d1", "thermostat", "A", t(12), 2, 30.0),
    ])  # fmt: skip
    out = _sliding(silver).select(
        "window_start", "window_end", "events", "devices", "temperature_c_avg"
    )
    assertDataFrameEqual(out, [
        Row(window_start=datetime(2025, 12, 31, 23, 55), window_end=t(5), events=1, devices=1, temperature_c_avg=10.0),
        Row(window_start=t(0), window_end=t(10), events=2, devices=2, temperature_c_avg=15.0),
        Row(window_start=t(5), window_end=t(15), events=2, devices=2, temperature_c_avg=25.0),
        Row(window_start=t(10), window_end=t(20), events=1, devices=1, temperature_c_avg=30.0),
    ])  # fmt: skip


def test_sliding_windows_from_minutes_weigh_each_minute_by_its_readings(spark):
    """Means over the readings, not over the minutes; a metric never read stays null."""
    silver = _silver(spark, [
        ("d1", "thermostat", "A", t(1, 0), 1, 10.0),
        ("d1", "thermostat", "A", t(1, 30), 2, 20.0),
        ("d1", "thermostat", "A", t(2, 0), 3, None),  # a reading without the metric
        ("d2", "thermostat", "A", t(3, 59), 1, 60.0),
        ("d3", "thermostat", "B", t(4, 0), 1, None),
    ])  # fmt: skip
    humidity = next(m for m in METRIC_NAMES if m != "temperature_c")
    out = _sliding(silver).where("window_start = '2026-01-01 00:00:00'")
    assertDataFrameEqual(out.select("site", "events", "devices", "temperature_c_avg", f"{humidity}_avg"), [
        Row(site="A", events=4, devices=2, temperature_c_avg=30.0, **{f"{humidity}_avg": None}),
        Row(site="B", events=1, devices=1, temperature_c_avg=None, **{f"{humidity}_avg": None}),
    ])  # fmt: skip


def test_sliding_keys_name_the_windows_a_reading_falls_in(spark):
    silver = _silver(spark, [
        ("d1", "thermostat", "A", t(1), 1, 1.0),
        ("d2", "thermostat", "A", t(4), 1, 1.0),
        ("d3", "vibration", "B", t(6), 1, 1.0),
    ])  # fmt: skip
    assertDataFrameEqual(gold.sliding_keys(silver, "10 minutes", "5 minutes"), [
        Row(window_start=datetime(2025, 12, 31, 23, 55), site="A", device_type="thermostat"),
        Row(window_start=t(0), site="A", device_type="thermostat"),
        Row(window_start=t(0), site="B", device_type="vibration"),
        Row(window_start=t(5), site="B", device_type="vibration"),
    ])  # fmt: skip


def test_sessions_split_on_a_gap_longer_than_the_setting(spark):
    silver = _silver(spark, [
        ("d1", "thermostat", "A", t(0, 0), 1, 1.0),
        ("d1", "thermostat", "A", t(1, 30), 2, 1.0),
        ("d1", "thermostat", "A", t(2, 0), 3, 1.0),
        ("d1", "thermostat", "A", t(10, 0), 4, 1.0),  # 8 minutes of silence: a new session
    ])  # fmt: skip
    out = gold.device_sessions(silver, "1 minute", "2 minutes").select(
        "device_id", "session_start", "session_end", "events", "duration_s"
    )
    assertDataFrameEqual(out, [
        Row(device_id="d1", session_start=t(0), session_end=t(2), events=3, duration_s=120.0),
        Row(device_id="d1", session_start=t(10), session_end=t(10), events=1, duration_s=0.0),
    ])  # fmt: skip


def test_latest_status_takes_the_newest_reading_per_device(spark):
    rows = [
        ("d1", "thermostat", "A", "B1", 1.0, 2.0, "online", 90.0, t(0), 1),
        ("d1", "thermostat", "A", "B1", 1.0, 2.0, "degraded", 89.0, t(2), 3),
        ("d1", "thermostat", "A", "B1", 1.0, 2.0, "online", 89.5, t(1), 2),
        ("d2", "vibration", "A", "B2", 1.0, 2.0, "offline", None, t(0), 7),
    ]
    silver = spark.createDataFrame(
        rows,
        "device_id string, device_type string, site string, building string, lat double, lon double, "
        "status string, battery_pct double, event_time timestamp, seq long",
    )
    status = gold.latest_status(silver)
    out = status.select(
        "device_id", "status", "battery_pct", "last_event_time", "last_seq", "events"
    )
    assertDataFrameEqual(out, [
        Row(device_id="d1", status="degraded", battery_pct=89.0, last_event_time=t(2), last_seq=3,
            events=3),
        Row(device_id="d2", status="offline", battery_pct=None, last_event_time=t(0), last_seq=7,
            events=1),
    ])  # fmt: skip
    # The fleet summary is device_status's, per type.
    assertDataFrameEqual(gold.fleet_summary(status), [
        Row(device_type="thermostat", devices=1, events=3, last_event_time=t(2)),
        Row(device_type="vibration", devices=1, events=1, last_event_time=t(0)),
    ])  # fmt: skip


def test_recoveries_join_each_alert_with_its_clearing_within_the_window(spark):
    alerts = spark.createDataFrame(
        [("a1", "d1", "temperature_c", "threshold_high", t(0)), ("a2", "d1", "temperature_c", "zscore", t(1)),
         ("a3", "d2", "power_w", "threshold_high", t(2))],
        "alert_id string, device_id string, metric string, kind string, event_time timestamp",
    )  # fmt: skip
    clears = spark.createDataFrame(
        [("a1", t(3)), ("a2", t(30)), ("a9", t(3))], "alert_id string, cleared_time timestamp"
    )
    out = alert_recoveries(alerts, clears, "1 minute", "10 minutes").select(
        "alert_id", "recovered_time", "time_to_recover_s"
    )
    assertDataFrameEqual(out, [
        Row(alert_id="a1", recovered_time=t(3), time_to_recover_s=180.0),
        Row(alert_id="a2", recovered_time=None, time_to_recover_s=None),  # cleared too late
        Row(alert_id="a3", recovered_time=None, time_to_recover_s=None),
    ])  # fmt: skip


def test_progress_row_reads_spark_progress_json():
    progress = {
        "id": "q1", "runId": "r1", "name": "silver", "timestamp": "2026-01-01T00:00:05.000Z",
        "batchId": 7, "numInputRows": 1200, "inputRowsPerSecond": 240.0, "processedRowsPerSecond": 600.0,
        "durationMs": {"triggerExecution": 2000, "addBatch": 1500},
        "eventTime": {"watermark": "2026-01-01T00:00:00.000Z"},
        "stateOperators": [{"numRowsTotal": 50, "numRowsDroppedByWatermark": 3},
                           {"numRowsTotal": 5, "numRowsDroppedByWatermark": 1}],
        "sources": [{"metrics": {"maxOffsetsBehindLatest": "42", "avgOffsetsBehindLatest": "20.0"}}],
    }  # fmt: skip
    assert progress_row(progress) == {
        "query_name": "silver", "query_id": "q1", "run_id": "r1", "batch_id": 7,
        "timestamp": datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC), "num_input_rows": 1200,
        "input_rows_per_s": 240.0, "processed_rows_per_s": 600.0, "batch_duration_ms": 2000,
        "watermark": datetime(2026, 1, 1, tzinfo=UTC), "state_rows": 55, "rows_dropped_by_watermark": 4,
        "kafka_offsets_behind": 42,
    }  # fmt: skip
    first = progress_row({"eventTime": {"watermark": "1970-01-01T00:00:00.000Z"}, "batchId": 0})
    assert (first["watermark"], first["kafka_offsets_behind"], first["state_rows"]) == (
        None,
        None,
        0,
    )


def test_progress_line_names_the_batch_and_its_three_biggest_costs():
    progress = {
        "name": "silver", "batchId": 7, "numInputRows": 12000, "processedRowsPerSecond": 6000.4,
        "durationMs": {"triggerExecution": 2000, "addBatch": 1500, "queryPlanning": 300,
                       "walCommit": 120, "latestOffset": 80, "getBatch": 0},
    }  # fmt: skip
    assert progress_line(progress) == (
        "[progress] silver batch 7: 12,000 rows in 2,000 ms "
        "(6,000 rows/s; addBatch 1,500, queryPlanning 300, walCommit 120)"
    )
