"""``startingOffsets`` and ``maxOffsetsPerTrigger`` reach Spark's Kafka reader."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable

from common.contract import format_time
from common.fleet import build_fleet
from infra.broker import ensure_topic
from processor.pipeline import Tables, run_available_now
from processor.settings import ProcessorSettings

pytestmark = pytest.mark.integration

TOPIC = "source-options"
FLEET, SEED = 3, 9
T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def _send(bootstrap: str, device: str, seqs: range) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for seq in seqs:
        event = {
            "event_id": f"{device}-{seq}", "device_id": device, "seq": seq,
            "event_time": format_time(T0 + timedelta(seconds=seq)), "schema_version": 1,
            "status": "online",
        }  # fmt: skip
        p.produce(TOPIC, json.dumps(event).encode(), device.encode())
    assert p.flush(30) == 0


def test_latest_skips_what_was_there_and_batches_hold_at_most_max_offsets(
    spark, kafka_broker, lake_root
):
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=1)
    device = build_fleet(FLEET, SEED)[0].device_id
    _send(kafka_broker.plaintext, device, range(1, 6))  # before the first start: skipped
    settings = ProcessorSettings(
        trigger="available_now", queries="silver", fleet_size=FLEET, seed=SEED,
        starting_offsets="latest", max_offsets_per_trigger=10,
        kafka={"bootstrap_servers": kafka_broker.plaintext, "topic": TOPIC},
        lake={"root": str(lake_root / "source-options")},
    )  # fmt: skip
    run_available_now(spark, settings)
    _send(kafka_broker.plaintext, device, range(6, 31))
    run_available_now(spark, settings)

    silver = DeltaTable(Tables.under(settings.lake).silver)
    assert sorted(silver.to_pyarrow_table(columns=["seq"]).column("seq").to_pylist()) == list(
        range(6, 31)
    )
    appends = [
        int(h["operationMetrics"]["numOutputRows"])
        for h in silver.history()
        if h["operation"] == "WRITE" and h.get("userMetadata")
    ]
    assert sorted(appends) == [5, 10, 10]
