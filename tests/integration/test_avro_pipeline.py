"""Avro through a real schema registry lands in the same tables as JSON.

One seeded fleet, half of it on firmware 2 (schema version 2: ``temp_c``, ``rssi_dbm``),
is sent twice through the broker: as JSON to one topic and as Avro (Confluent framing,
the schemas registered in Apicurio) to another, each with resent copies of its first
events, malformed records of its own format, a reading of a device outside the fleet,
and in a second batch a reading past the watermark and one on time. The processor runs each topic into a
lake of its own: silver and ``gold/device_1m`` are the same, row for row, and each
quarantine holds its malformed records with their reasons.
"""

from __future__ import annotations

import json
import struct
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable

from common.contract import FIELDS
from common.fleet import build_fleet
from common.lake import Table, table_location
from common.reasons import UNDECODABLE_AVRO, UNKNOWN_SCHEMA_ID
from common.registry_settings import RegistrySettings
from infra.broker import ensure_topic
from processor.pipeline import run_available_now
from processor.settings import ProcessorSettings
from producer.__main__ import main as producer_main
from producer.anomalies import AnomalyConfig
from producer.faults import FaultConfig
from producer.simulation import firmware_rollout, simulated_clock
from producer.sources import SimulationSource
from producer.wire_format import UNREGISTERED_ID, AvroFormat, JsonFormat, WireFormat

pytestmark = pytest.mark.integration

FLEET, SEED, COUNT, RATE, SHARE = 10, 23, 600, 10.0, 0.5
START = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)
RESENT = 4
BAD = {
    "event_id": "bad-1", "device_id": "dev-00001", "seq": 10_000,
    "event_time": "2026-01-01T00:00:05.000Z", "schema_version": 1, "status": "online",
}  # fmt: skip
END = "2026-01-01T00:01:01.000Z"  # a second after the last of COUNT readings at RATE
LATE = BAD | {"event_id": "late-1", "seq": 10_001, "event_time": "2025-12-31T23:00:00.000Z"}
ON_TIME = BAD | {"event_id": "on-time-1", "seq": 10_002, "event_time": END}


def _send(bootstrap: str, topic: str, fmt: str, registry: RegistrySettings) -> None:
    code = producer_main([
        "--count", str(COUNT), "--fleet-size", str(FLEET), "--seed", str(SEED),
        "--rate", "0", "--clock-rate", str(RATE), "--start-time", START.isoformat(),
        "--deterministic-ids", "--rollout-share", str(SHARE), "--format", fmt,
        "--kafka-bootstrap-servers", bootstrap, "--kafka-topic", topic,
        *(["--schema-registry-url", registry.url] if fmt == "avro" else []),
    ])  # fmt: skip
    assert code == 0


def _faults(wire: WireFormat) -> tuple[list[bytes], list[str]]:
    """Malformed records of the wire's format, and the reasons they are quarantined with."""
    unknown_device = wire.encode([BAD | {"event_id": "bad-2", "device_id": "dev-99999"}])[0]
    out_of_range = wire.encode([BAD | {"event_id": "bad-3", "battery_pct": 150.0}])[0]
    common = [b'{"event_id": "bad-4", "device_id": ', unknown_device, out_of_range]
    reasons = ["unparsable", "unknown_device", "out_of_range:battery_pct"]
    if isinstance(wire, AvroFormat):
        full = wire.encode([BAD])[0]
        cut = full[: len(full) // 2]
        unregistered = b"\0" + struct.pack(">I", UNREGISTERED_ID) + full[5:]
        return common + [cut, unregistered], reasons + [UNDECODABLE_AVRO, UNKNOWN_SCHEMA_ID]
    wrong = json.dumps(BAD | {"seq": "ten"}).encode()
    return common + [wrong], reasons + ["wrong_type:seq"]


def _run_topic(spark, kafka_broker, registry, lake: Path, fmt: str) -> list[str]:
    topic = f"avro-pipeline-{fmt}"
    ensure_topic(kafka_broker.plaintext, topic, partitions=2)
    _send(kafka_broker.plaintext, topic, fmt, registry)
    versions = sorted(set(firmware_rollout(FLEET, SEED, SHARE).tolist()))
    wire = AvroFormat(registry, topic, versions) if fmt == "avro" else JsonFormat()
    # Resent copies: the first events again, byte for byte (Avro's encoding is exact).
    source = SimulationSource(
        build_fleet(FLEET, SEED), SEED, simulated_clock(START, RATE), AnomalyConfig(),
        FaultConfig(), deterministic_ids=True, rollout_share=SHARE, wire=wire,
    )  # fmt: skip
    first = source.next_batch(RESENT)
    payloads, reasons = _faults(wire)
    raw = Producer({"bootstrap.servers": kafka_broker.plaintext})
    for key, value, *_ in first:
        raw.produce(topic, value, key)
    for payload in payloads:
        raw.produce(topic, payload)
    assert raw.flush(30) == 0
    settings = ProcessorSettings(
        trigger="available_now", fleet_size=FLEET, seed=SEED, queries="bronze,silver",
        kafka={"bootstrap_servers": kafka_broker.plaintext, "topic": topic},
        schema_registry={"url": registry.url} if fmt == "avro" else {},
        lake={"root": str(lake)},
    )  # fmt: skip
    run_available_now(spark, settings)
    # A second batch, past the first one's watermark (the stream's end minus 2 minutes):
    # a reading an hour late is dropped, one on time is kept.
    for event in (LATE, ON_TIME):
        raw.produce(topic, wire.encode([event])[0], event["device_id"].encode())
    assert raw.flush(30) == 0
    run_available_now(spark, settings)
    return reasons


def _rows(lake: Path, table: Table, columns: list[str] | None = None) -> list[dict]:
    """A table's rows (``columns`` of them, or all), sorted."""
    rows = DeltaTable(table_location(str(lake), table)).to_pyarrow_table(columns=columns)
    return sorted(rows.to_pylist(), key=lambda r: [str(v) for v in r.values()])


def test_avro_and_json_land_in_the_same_silver_and_gold(
    spark, kafka_broker, schema_registry_server, tmp_path
):
    registry = RegistrySettings(url=schema_registry_server.url)
    lakes = {fmt: tmp_path / fmt for fmt in ("json", "avro")}
    reasons = {
        fmt: _run_topic(spark, kafka_broker, registry, lake, fmt) for fmt, lake in lakes.items()
    }
    columns = [f.name for f in FIELDS] + ["extra_fields", "device_type", "site"]
    silver = {fmt: _rows(lake, Table.SILVER_EVENTS, columns) for fmt, lake in lakes.items()}
    assert len(silver["avro"]) == COUNT + 1  # and the on-time reading of the second batch
    assert silver["avro"] == silver["json"]
    ids = {r["event_id"] for r in silver["avro"]}
    assert ON_TIME["event_id"] in ids and LATE["event_id"] not in ids
    assert {r["schema_version"] for r in silver["avro"]} == {1, 2}
    assert {r["rssi_dbm"] is None for r in silver["avro"]} == {True, False}
    minutes = {fmt: _rows(lake, Table.GOLD_DEVICE_1M) for fmt, lake in lakes.items()}
    assert len(minutes["avro"]) == len(minutes["json"]) > 0
    for avro, json_row in zip(minutes["avro"], minutes["json"], strict=True):
        floats = {k for k, v in json_row.items() if isinstance(v, float)}
        assert {k: v for k, v in avro.items() if k not in floats} == {
            k: v for k, v in json_row.items() if k not in floats
        }
        assert {k: avro[k] for k in floats} == pytest.approx({k: json_row[k] for k in floats})
    for fmt, lake in lakes.items():
        got = [r["reason"] for r in _rows(lake, Table.SILVER_QUARANTINE, ["reason"])]
        assert got == sorted(reasons[fmt]), fmt


def test_a_schema_registered_after_silver_started_restarts_it_and_loses_nothing(
    spark, kafka_broker, schema_registry_server, tmp_path, monkeypatch, capsys
):
    """Silver's plan knows version 1 only; a batch with version 2 records stops and runs again."""
    from processor import writer_schemas

    topic = "avro-pipeline-late-schema"
    ensure_topic(kafka_broker.plaintext, topic, partitions=2)
    registry = RegistrySettings(url=schema_registry_server.url)
    _send(kafka_broker.plaintext, topic, "avro", registry)  # versions 1 and 2, half each
    loads: list[dict[int, str]] = []
    real_load = writer_schemas.load

    def first_without_version_2(settings: RegistrySettings, name: str) -> dict[int, str]:
        schemas = real_load(settings, name)
        if not loads:  # silver's first plan: as if version 2 came after it started
            schemas = dict(sorted(schemas.items())[:1])
        loads.append(schemas)
        return schemas

    monkeypatch.setattr(writer_schemas, "load", first_without_version_2)
    settings = ProcessorSettings(
        trigger="available_now", fleet_size=FLEET, seed=SEED, queries="bronze,silver",
        kafka={"bootstrap_servers": kafka_broker.plaintext, "topic": topic},
        schema_registry={"url": registry.url}, lake={"root": str(tmp_path / "lake")},
    )  # fmt: skip
    assert run_available_now(spark, settings)
    assert "silver restarts: its subject has schemas registered since it started" in (
        capsys.readouterr().err
    )
    assert [len(s) for s in loads[:3]] == [1, 2, 2]  # the plan, the batch's check, the new plan
    silver = _rows(tmp_path / "lake", Table.SILVER_EVENTS, ["event_id", "schema_version"])
    assert len(silver) == len({r["event_id"] for r in silver}) == COUNT
    assert {r["schema_version"] for r in silver} == {1, 2}
    assert (
        not DeltaTable(table_location(str(tmp_path / "lake"), Table.SILVER_QUARANTINE))
        .to_pyarrow_table()
        .num_rows
    )
