"""The real-time alert path's transforms on tiny frames, with exact expected rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from common.alerts import decode_alert
from common.fleet import Device
from processor import bronze, realtime
from processor.schema import DEVICE_SCHEMA, KAFKA_SOURCE_SCHEMA

T0 = datetime(2026, 1, 1, 0, 0, 0)  # the session's time zone is UTC
EVENT_TIME = "2026-01-01T00:00:10.000Z"


def _device(device_id: str, device_type: str) -> dict[str, object]:
    return Device(
        device_id=device_id, device_type=device_type, site="Austin", building="Kim Hall",
        lat=30.0, lon=-97.0, model="m", firmware="1.0.0", install_date="2021-01-01",
        battery_powered=False,
    ).as_row()  # fmt: skip


def _reading(event_id: str, device_id: str, **metrics: object) -> str:
    version = 2 if "temp_c" in metrics else 1
    return json.dumps({
        "event_id": event_id, "device_id": device_id, "seq": 1, "event_time": EVENT_TIME,
        "schema_version": version, "status": "online", **metrics,
    })  # fmt: skip


def _records(spark, payloads: list[str], start: datetime = T0):
    rows = [
        (None, p.encode(), "t", 0, i, start + timedelta(milliseconds=i), 0)
        for i, p in enumerate(payloads)
    ]
    return spark.createDataFrame(rows, KAFKA_SOURCE_SCHEMA)


def _alert(event_id, device_id, device_type, metric, kind, value, threshold, offset, version=1):
    return Row(
        alert_id=f"{event_id}:{metric}", event_id=event_id, device_id=device_id,
        device_type=device_type, site="Austin", metric=metric, kind=kind, value=value,
        threshold=threshold, event_time=datetime(2026, 1, 1, 0, 0, 10),
        reading_time=T0 + timedelta(milliseconds=offset), schema_version=version,
    )  # fmt: skip


def test_every_valid_reading_outside_its_device_thresholds_raises_one_alert_per_metric(spark):
    # Thermostats: temperature 15..28 °C, humidity 20..70 %; power meters: voltage 207..253 V.
    devices = spark.createDataFrame(
        [_device("dev-t", "thermostat"), _device("dev-p", "power_meter")], DEVICE_SCHEMA
    )
    payloads = [
        _reading("both", "dev-t", temperature_c=30.5, humidity_pct=10.0),
        _reading("in-range", "dev-t", temperature_c=21.0, humidity_pct=45.0),
        _reading("v2-low", "dev-t", temp_c=14.0),  # version 2 sends temperature_c as temp_c
        _reading("volts", "dev-p", voltage_v=260.0, power_w=100.0),
        _reading("invalid", "dev-t", temperature_c=900.0),  # out of range: quarantined
        _reading("stranger", "dev-x", temperature_c=99.0),  # not in the dimension
        "{not json",
    ]
    records = bronze.to_bronze(_records(spark, payloads))
    alerts = realtime.threshold_alerts(records, devices)
    assertDataFrameEqual(
        alerts,
        [
            _alert("both", "dev-t", "thermostat", "temperature_c", "threshold_high", 30.5, 28.0, 0),
            _alert("both", "dev-t", "thermostat", "humidity_pct", "threshold_low", 10.0, 20.0, 0),
            _alert("v2-low", "dev-t", "thermostat", "temperature_c", "threshold_low", 14.0, 15.0,
                   2, version=2),
            _alert("volts", "dev-p", "power_meter", "voltage_v", "threshold_high", 260.0, 253.0,
                   3),
        ],
    )  # fmt: skip
    assert alerts.columns == list(realtime.ALERT_COLUMNS)


def test_an_alert_record_reads_back_as_the_alert_it_was(spark):
    devices = spark.createDataFrame([_device("dev-t", "thermostat")], DEVICE_SCHEMA)
    records = bronze.to_bronze(
        _records(spark, [_reading("e1", "dev-t", temperature_c=30.5)], T0 + timedelta(seconds=11))
    )
    (record,) = realtime.alert_records(realtime.threshold_alerts(records, devices)).collect()
    assert record.key == "dev-t"
    alert = decode_alert(record.value.encode(), timestamp_ms=1767225611250)  # 00:00:11.250
    assert (alert.alert_id, alert.metric, alert.kind) == ("e1:temperature_c", "temperature_c",
                                                           "threshold_high")  # fmt: skip
    assert (alert.value, alert.threshold, alert.site) == (30.5, 28.0, "Austin")
    assert alert.event_time == datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)
    assert alert.reading_time == datetime(2026, 1, 1, 0, 0, 11, tzinfo=UTC)
    assert alert.latency_s == 0.25


def test_landing_keeps_each_alert_once_as_first_sent_and_drops_what_is_not_an_alert(spark):
    devices = spark.createDataFrame([_device("dev-t", "thermostat")], DEVICE_SCHEMA)
    records = bronze.to_bronze(_records(spark, [_reading("e1", "dev-t", temperature_c=30.5)]))
    (value,) = [r.value for r in realtime.alert_records(
        realtime.threshold_alerts(records, devices)).collect()]  # fmt: skip
    # The same alert sent three times (a restart resent it), out of order, and a stray record.
    sent = [T0 + timedelta(milliseconds=ms) for ms in (900, 40, 500)]
    rows = [(b"dev-t", value.encode(), "a", 0, i, ts, 0) for i, ts in enumerate(sent)]
    rows.append((None, b'{"hello": 1}', "a", 0, 3, T0, 0))
    landed = realtime.landed_alerts(spark.createDataFrame(rows, KAFKA_SOURCE_SCHEMA))
    first = _alert("e1", "dev-t", "thermostat", "temperature_c", "threshold_high", 30.5, 28.0, 0)
    assertDataFrameEqual(
        landed,
        [Row(**first.asDict(), alert_time=T0 + timedelta(milliseconds=40), latency_ms=40.0)],
    )


def test_avro_readings_raise_the_alerts_their_json_would(spark):
    import io
    import struct

    import fastavro

    from common.avro_schema import avro_schema_text
    from common.contract import VERSION_BY_NUMBER

    devices = spark.createDataFrame([_device("dev-t", "thermostat")], DEVICE_SCHEMA)
    schemas = {1: avro_schema_text(VERSION_BY_NUMBER[1]), 2: avro_schema_text(VERSION_BY_NUMBER[2])}
    time = datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)

    def framed(schema_id: int, **fields: object) -> bytes:
        record = {"event_id": "", "device_id": "dev-t", "seq": 1, "event_time": time,
                  "schema_version": schema_id, "status": "online", **fields}  # fmt: skip
        body = io.BytesIO()
        schema = fastavro.parse_schema(json.loads(schemas[schema_id]))
        fastavro.schemaless_writer(body, schema, record)
        return b"\0" + struct.pack(">I", schema_id) + body.getvalue()

    payloads = [
        framed(1, event_id="both", temperature_c=30.5, humidity_pct=10.0),
        framed(1, event_id="in-range", temperature_c=21.0),
        framed(2, event_id="v2-low", temp_c=14.0),
    ]
    rows = [(None, p, "t", 0, i, T0 + timedelta(milliseconds=i), 0) for i, p in enumerate(payloads)]
    records = bronze.to_bronze(spark.createDataFrame(rows, KAFKA_SOURCE_SCHEMA))
    assertDataFrameEqual(
        realtime.threshold_alerts(records, devices, schemas),
        [
            _alert("both", "dev-t", "thermostat", "temperature_c", "threshold_high", 30.5, 28.0, 0),
            _alert("both", "dev-t", "thermostat", "humidity_pct", "threshold_low", 10.0, 20.0, 0),
            _alert("v2-low", "dev-t", "thermostat", "temperature_c", "threshold_low", 14.0, 15.0,
                   2, version=2),
        ],
    )  # fmt: skip
