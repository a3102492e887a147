"""Avro records in Confluent's framing, parsed into the same columns and reasons as JSON."""

from __future__ import annotations

import io
import json
import struct
from datetime import UTC, datetime

import fastavro
import pytest
from pyspark.sql import functions as F

from common.avro_schema import avro_schema, avro_schema_text
from common.contract import VERSION_BY_NUMBER
from processor import avro_decoding, bronze, parsing
from processor.schema import KAFKA_SOURCE_SCHEMA

T = datetime(2026, 1, 1, 0, 0, 1, 250000, tzinfo=UTC)
V1, V2 = avro_schema_text(VERSION_BY_NUMBER[1]), avro_schema_text(VERSION_BY_NUMBER[2])
ONE = {
    "event_id": "e1", "device_id": "dev-00001", "seq": 3, "event_time": T,
    "schema_version": 1, "status": "online", "temperature_c": 21.5,
}  # fmt: skip
TWO = {
    "event_id": "e2", "device_id": "dev-00002", "seq": 4, "event_time": T,
    "schema_version": 2, "status": "degraded", "temp_c": 19.0, "rssi_dbm": -60.0,
}  # fmt: skip


def _framed(schema_id: int, schema: str, record: dict) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(json.loads(schema)), record)
    return b"\0" + struct.pack(">I", schema_id) + body.getvalue()


def _parsed(spark, payloads: list[bytes], schemas: dict[int, str]) -> list:
    rows = [(None, p, "t", 0, i, T, 0) for i, p in enumerate(payloads)]
    source = bronze.to_bronze(spark.createDataFrame(rows, KAFKA_SOURCE_SCHEMA))
    out = parsing.parse_events(source, schemas).orderBy("offset")
    return out.select(
        "event_id", "device_id", "seq", "schema_version", "temperature_c", "rssi_dbm",
        "battery_pct", "extra_fields", "reason",
    ).collect()  # fmt: skip


def test_each_version_lands_in_the_contract_columns(spark):
    rows = _parsed(spark, [_framed(7, V1, ONE), _framed(9, V2, TWO)], {7: V1, 9: V2})
    assert [tuple(r) for r in rows] == [
        ("e1", "dev-00001", 3, 1, 21.5, None, None, None, None),
        ("e2", "dev-00002", 4, 2, 19.0, -60.0, None, None, None),
    ]


def test_records_that_cannot_be_read_have_their_own_reasons(spark):
    full = _framed(7, V1, ONE)
    payloads = [
        full[:12],  # the body cut short
        b"\0" + struct.pack(">I", 5) + full[5:],  # an id the registry does not hold
        b"\0\0",  # the header cut short
        _framed(7, V1, ONE | {"event_id": "e3", "battery_pct": 150.0}),  # decodes; out of range
        b'{"event_id": "j1"}',  # not framed: JSON, checked as JSON
    ]
    reasons = [r.reason for r in _parsed(spark, payloads, {7: V1})]
    assert reasons == [
        "undecodable_avro", "unknown_schema_id", "undecodable_avro",
        "out_of_range:battery_pct", "missing_field:device_id",
    ]  # fmt: skip


def test_without_a_registry_every_framed_record_is_an_unknown_schema_id(spark):
    rows = _parsed(spark, [_framed(7, V1, ONE)], {})
    assert [r.reason for r in rows] == ["unknown_schema_id"]


def test_a_writer_field_the_contract_lacks_is_kept_in_extra_fields(spark):
    schema = avro_schema(VERSION_BY_NUMBER[1])
    schema["fields"].append({"name": "site_zone", "type": ["null", "string"], "default": None})
    text = json.dumps(schema)
    rows = _parsed(spark, [_framed(11, text, ONE | {"site_zone": "b"})], {11: text})
    assert (rows[0].reason, json.loads(rows[0].extra_fields)) == (None, {"site_zone": "b"})


@pytest.mark.parametrize(
    ("payload", "framed", "schema_id"),
    [(b"\0\0\0\0\x07rest", True, 7), (b"\0\x01", True, None), (b"{}", False, None)],
)
def test_the_header(spark, payload, framed, schema_id):
    df = spark.createDataFrame([(payload,)], "value binary")
    got = df.select(
        avro_decoding.is_framed(F.col("value")), avro_decoding.schema_id(F.col("value"))
    ).first()
    assert tuple(got) == (framed, schema_id)
