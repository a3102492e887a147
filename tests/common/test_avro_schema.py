"""The Avro schema of each payload version, derived from the contract."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import fastavro
import pytest

from common.avro_schema import avro_schema, avro_schema_text
from common.contract import FIELDS, VERSION_BY_NUMBER, VERSIONS

TS = {"type": "long", "logicalType": "timestamp-millis"}


def test_version_1_is_the_contract_typed_field_by_field():
    schema = avro_schema(VERSION_BY_NUMBER[1])
    assert (schema["type"], schema["name"], schema["namespace"]) == (
        "record", "TelemetryEvent", "io.iotpulse"
    )  # fmt: skip
    by_name = {f["name"]: f for f in schema["fields"]}
    assert by_name["event_id"] == {
        "name": "event_id", "type": "string", "doc": "UUID of the event; a resend keeps it."
    }  # fmt: skip
    assert by_name["event_time"]["type"] == TS
    assert by_name["seq"]["type"] == "long"
    assert by_name["battery_pct"]["type"] == ["null", "double"]
    assert by_name["battery_pct"]["default"] is None
    # Version 1 sends every field but those a later version adds, under its own name.
    added_later = {"rssi_dbm"}
    assert [f["name"] for f in schema["fields"]] == [
        f.name for f in FIELDS if f.name not in added_later
    ]


def test_version_2_adds_an_optional_field_and_renames_with_an_alias():
    fields = {f["name"]: f for f in avro_schema(VERSION_BY_NUMBER[2])["fields"]}
    assert "temperature_c" not in fields
    assert fields["temp_c"]["aliases"] == ["temperature_c"]
    assert fields["temp_c"]["type"] == ["null", "double"]
    assert fields["rssi_dbm"]["type"] == ["null", "double"]
    assert fields["rssi_dbm"]["default"] is None


@pytest.mark.parametrize("number", [v.number for v in VERSIONS[1:]])
def test_each_version_reads_a_record_of_the_one_before(number):
    """BACKWARD: a reader of version N decodes what version N-1 wrote, renames included."""
    new = VERSION_BY_NUMBER[number]
    old = VERSIONS[[v.number for v in VERSIONS].index(number) - 1]
    writer = fastavro.parse_schema(json.loads(avro_schema_text(old)))
    reader = fastavro.parse_schema(json.loads(avro_schema_text(new)))
    record = {
        "event_id": "e-1", "device_id": "dev-00001", "seq": 7,
        "event_time": datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=UTC),
        "schema_version": old.number, "status": "online", "temperature_c": 21.5,
    }  # fmt: skip
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, writer, record)
    buf.seek(0)
    got = fastavro.schemaless_reader(buf, writer, reader)
    for name, key in new.keys.items():
        old_key = old.keys.get(name)
        assert got[key] == (record.get(old_key) if old_key else None), name
