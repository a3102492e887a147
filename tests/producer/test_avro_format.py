"""The producer's Avro format against a real schema registry (Apicurio, BACKWARD rule)."""

from __future__ import annotations

import json
import random
import struct
import time
import uuid

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from common.avro_schema import avro_schema
from common.contract import VERSION_BY_NUMBER, parse_time
from common.reasons import UNDECODABLE_AVRO, UNKNOWN_SCHEMA_ID
from common.registry_settings import RegistrySettings
from producer.wire_format import (
    UNREGISTERED_ID,
    AvroFormat,
    WireFormatError,
    wire_format,
)

V1 = {
    "event_id": "4a0c6d1e-0000-4000-8000-000000000001", "device_id": "dev-00001", "seq": 3,
    "event_time": "2026-01-01T00:00:01.250Z", "schema_version": 1, "status": "online",
    "temperature_c": 21.5, "humidity_pct": 40.0,
}  # fmt: skip
V2 = {
    "event_id": "4a0c6d1e-0000-4000-8000-000000000002", "device_id": "dev-00002", "seq": 9,
    "event_time": "2026-01-01T00:00:02.000Z", "schema_version": 2, "status": "degraded",
    "rssi_dbm": -67.0, "temp_c": 19.25,
}  # fmt: skip


def _topic() -> str:
    return f"avro-{uuid.uuid4().hex[:8]}"


def _settings(server, **extra) -> RegistrySettings:
    return RegistrySettings(url=server.url, **extra)


def test_each_version_is_registered_in_order_and_encoded_in_confluent_framing(
    schema_registry_server,
):
    topic = _topic()
    wire = AvroFormat(_settings(schema_registry_server), topic, [2, 1])
    client = SchemaRegistryClient({"url": schema_registry_server.url})
    assert wire.subject == f"{topic}-value"
    assert client.get_versions(wire.subject) == [1, 2]
    for number in (1, 2):
        registered = client.get_version(wire.subject, number)
        assert registered.schema_id == wire.schema_ids[number]
    payloads = wire.encode([V1, V2])
    deserialize = AvroDeserializer(client)
    ctx = SerializationContext(topic, MessageField.VALUE)
    for event, payload in zip((V1, V2), payloads, strict=True):
        assert payload[0] == 0
        assert struct.unpack(">I", payload[1:5])[0] == wire.schema_ids[event["schema_version"]]
        decoded = deserialize(payload, ctx)
        assert decoded["event_time"] == parse_time(event["event_time"])
        keys = VERSION_BY_NUMBER[event["schema_version"]].keys.values()
        assert {k: decoded[k] for k in keys if k != "event_time"} == {
            k: event.get(k) for k in keys if k != "event_time"
        }
        assert wire.decode(payload) == event


def test_a_second_producer_finds_the_same_ids(schema_registry_server):
    topic = _topic()
    first = AvroFormat(_settings(schema_registry_server), topic, [1, 2])
    again = AvroFormat(_settings(schema_registry_server, auto_register=False), topic, [1, 2])
    assert again.schema_ids == first.schema_ids


def test_an_incompatible_subject_is_refused_in_one_line_naming_it_and_the_rule(
    schema_registry_server,
):
    topic = _topic()
    client = SchemaRegistryClient({"url": schema_registry_server.url})
    old = avro_schema(VERSION_BY_NUMBER[1])
    for field in old["fields"]:
        if field["name"] == "seq":
            field["type"] = "string"  # a reader of long cannot read what wrote a string
    client.register_schema(f"{topic}-value", Schema(json.dumps(old), "AVRO"))
    with pytest.raises(WireFormatError) as err:
        AvroFormat(_settings(schema_registry_server), topic, [1])
    assert str(err.value) == (
        f"the schema registry refused schema_version 1 under {topic}-value: not "
        "BACKWARD-compatible with the versions registered before it; register it under "
        "another subject (another topic) or change the rule"
    )


def test_without_auto_registration_a_missing_schema_is_one_line(schema_registry_server):
    topic = _topic()
    with pytest.raises(WireFormatError) as err:
        AvroFormat(_settings(schema_registry_server, auto_register=False), topic, [1])
    assert str(err.value) == (
        f"schema_version 1 is not registered under {topic}-value, and auto-registration is "
        "off: register it first, or set IOT_SCHEMA_REGISTRY_AUTO_REGISTER=true"
    )


def test_an_unreachable_registry_is_one_line_within_30_s():
    from infra.daemons import free_ports

    url = f"http://127.0.0.1:{free_ports('127.0.0.1')[0]}"
    began = time.monotonic()
    with pytest.raises(WireFormatError) as err:
        wire_format("avro", RegistrySettings(url=url), "t", [1])
    assert time.monotonic() - began < 30
    assert str(err.value) == (
        f"the schema registry at {url} did not answer (ConnectError): check IOT_SCHEMA_REGISTRY_URL"
    )


def test_the_avro_malformed_payloads(schema_registry_server):
    wire = AvroFormat(_settings(schema_registry_server), _topic(), [1])
    full = wire.encode([V1])[0]
    rng = random.Random(5)
    cut, said = wire.malformed("wrong_type", V1, rng, 10)
    assert said == {"expected_reason": UNDECODABLE_AVRO}
    assert 6 <= len(cut) < len(full) and full.startswith(cut)
    unknown, said = wire.malformed("missing_field", V1, rng, 10)
    assert said == {"expected_reason": UNKNOWN_SCHEMA_ID}
    assert unknown == b"\0" + struct.pack(">I", UNREGISTERED_ID) + full[5:]
    text, said = wire.malformed("broken_json", V1, rng, 10)
    assert said == {"expected_reason": "unparsable"} and text[:1] == b"{"
    padded, said = wire.malformed("oversized", V1, rng, 10)
    assert (padded, said) == (full + b"x" * 10, {"expected_reason": "rejected_too_large"})
