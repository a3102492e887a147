"""Every class of bad record lands in quarantine with its reason; the stream keeps going."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer

from common.contract import format_time
from common.fleet import build_fleet
from infra.broker import ensure_topic
from infra.jars import bundle_dir
from tests.integration.proc import (
    kill_group,
    processor_env,
    start_processor,
    stop_gracefully,
    table_rows,
    wait_for,
)

pytestmark = [pytest.mark.integration]

TOPIC = "bad-input"


def good(i: int) -> dict:
    return {
        "event_id": f"good-{i}", "device_id": "dev-00001", "seq": i + 1,
        "event_time": format_time(datetime(2026, 5, 1, 8, 0, i % 60, tzinfo=UTC)),
        "schema_version": 1, "status": "online", "temperature_c": 21.0,
    }  # fmt: skip


def test_bad_records_are_quarantined_and_the_stream_keeps_running(kafka_broker, tmp_path):
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=1)
    lake = tmp_path / "lake"
    log = tmp_path / "processor.log"
    env = processor_env(
        kafka_broker.plaintext, TOPIC, lake, bundle_dir("spark"),
        IOT_PROCESSOR_FLEET_SIZE="5", IOT_PROCESSOR_TRIGGER_INTERVAL="2 seconds",
    )  # fmt: skip
    assert build_fleet(5, 42)[1].device_id == "dev-00001"
    bad: list[tuple[bytes, str]] = [
        (b'{"event_id": "b1", "device_id": "dev-00001", "seq": ', "unparsable"),
        (b"\xff\xfe\x00garbage", "unparsable"),
        (b"null", "unparsable"),
        (json.dumps(good(0) | {"event_id": "b2", "seq": "seven"}).encode(), "wrong_type:seq"),
        (json.dumps({k: v for k, v in (good(0) | {"event_id": "b3"}).items() if k != "status"}).encode(), "missing_field:status"),
        (json.dumps(good(0) | {"event_id": "b4", "device_id": "dev-99999"}).encode(), "unknown_device"),
        (json.dumps(good(0) | {"event_id": "b5", "temperature_c": 1e6}).encode(), "out_of_range:temperature_c"),
        (json.dumps(good(0) | {"event_id": "b6", "event_time": "not a time"}).encode(), "wrong_type:event_time"),
        (json.dumps(good(0) | {"event_id": "b7", "pad": "x" * 900_000}).encode()[:-3], "unparsable"),  # oversized and cut
    ]  # fmt: skip
    producer = Producer(
        {"bootstrap.servers": kafka_broker.plaintext, "message.max.bytes": 2_000_000}
    )
    for i in range(30):
        producer.produce(TOPIC, json.dumps(good(i)).encode())
    assert producer.flush(30) == 0

    proc = start_processor(env, log)
    try:
        silver = lake / "silver" / "events"
        wait_for(
            lambda: len(table_rows(silver, ["event_id"])) == 30,
            240,
            "the first 30 good events",
            proc,
            log,
        )
        for payload, _ in bad:
            producer.produce(TOPIC, payload)
        for i in range(30, 60):
            producer.produce(TOPIC, json.dumps(good(i)).encode())
        assert producer.flush(30) == 0
        wait_for(
            lambda: len(table_rows(silver, ["event_id"])) == 60,
            180,
            "the next 30 good events",
            proc,
            log,
        )
        quarantine = lake / "silver" / "quarantine"
        wait_for(
            lambda: len(table_rows(quarantine, ["reason"])) == len(bad),
            60,
            "the quarantine",
            proc,
            log,
        )
        assert proc.poll() is None, "the stream must keep running"
        rows = table_rows(quarantine, ["reason", "raw", "value", "offset"])
        got = sorted((r["offset"], r["reason"]) for r in rows)
        assert got == [(30 + i, reason) for i, (_, reason) in enumerate(bad)]
        by_offset = {r["offset"]: r["raw"] for r in rows}
        assert by_offset[30] == bad[0][0].decode()
        assert by_offset[33] == bad[3][0].decode()
        assert by_offset[31] == "\ufffd\ufffd\x00garbage"  # invalid UTF-8 replaced in the text
        assert {r["offset"]: r["value"] for r in rows}[31] == bad[1][0]  # exact bytes kept
        assert sorted(r["event_id"] for r in table_rows(silver, ["event_id"])) == sorted(
            f"good-{i}" for i in range(60)
        )
        assert stop_gracefully(proc) == 0, log.read_text()[-3000:]
    finally:
        kill_group(proc)
