"""``startingOffsets`` and ``maxOffsetsPerTrigger`` reach Spark's Kafka reader, and bronze's bound."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame

from common.fleet import build_fleet
from infra.broker import ensure_topic
from processor import sinks, sources
from processor.pipeline import Tables, run_available_now
from processor.settings import ProcessorSettings
from tests.integration.proc import send_readings

pytestmark = pytest.mark.integration

TOPIC = "source-options"
FLEET, SEED = 3, 9
T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def test_latest_skips_what_was_there_and_batches_hold_at_most_max_offsets(
    spark, kafka_broker, lake_root
):
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=1)
    device = build_fleet(FLEET, SEED)[0].device_id
    send_readings(
        kafka_broker.plaintext, TOPIC, device, range(1, 6), T0
    )  # before the first start: skipped
    settings = ProcessorSettings(
        trigger="available_now", queries="silver", fleet_size=FLEET, seed=SEED,
        starting_offsets="latest", max_offsets_per_trigger=10,
        kafka={"bootstrap_servers": kafka_broker.plaintext, "topic": TOPIC},
        lake={"root": str(lake_root / "source-options")},
    )  # fmt: skip
    run_available_now(spark, settings)
    send_readings(kafka_broker.plaintext, TOPIC, device, range(6, 31), T0)
    run_available_now(spark, settings)

    silver = DeltaTable(Tables.under(settings.lake).silver)
    assert sorted(silver.to_pyarrow_table(columns=["seq"]).column("seq").to_pylist()) == list(
        range(6, 31)
    )
    # Rows per micro-batch: Spark's writer names the metric numOutputRows, delta-rs's
    # (a small batch's) num_added_rows.
    appends = [
        int(h["operationMetrics"].get("numOutputRows", h["operationMetrics"].get("num_added_rows")))
        for h in silver.history()
        if h["operation"] == "WRITE" and h.get("userMetadata")
    ]
    assert sorted(appends) == [5, 10, 10]


def test_a_micro_batch_reads_many_partitions_with_at_most_shuffle_partitions_tasks(
    spark, kafka_broker, lake_root
):
    """Each read task's fixed part is paid every micro-batch: two tasks read four partitions."""
    topic = "source-tasks"
    ensure_topic(kafka_broker.plaintext, topic, partitions=4)
    fleet = build_fleet(8, SEED)
    for device in fleet:  # keyed by device: spread over the partitions
        send_readings(kafka_broker.plaintext, topic, device.device_id, range(1, 4), T0)
    settings = ProcessorSettings(
        shuffle_partitions=2, starting_offsets="earliest",
        kafka={"bootstrap_servers": kafka_broker.plaintext, "topic": topic},
        lake={"root": str(lake_root / "source-tasks")},
    )  # fmt: skip
    seen: list[tuple[int, int, int]] = []

    def note(batch: DataFrame, _batch_id: int) -> None:
        partitions = [r.partition for r in batch.select("partition").collect()]
        seen.append((batch.rdd.getNumPartitions(), len(partitions), len(set(partitions))))

    query = (
        sources.kafka_stream(spark, settings)
        .writeStream.foreachBatch(note)
        .option("checkpointLocation", str(lake_root / "source-tasks-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert len(seen) == 1
    tasks, records, partitions = seen[0]
    assert (tasks, records) == (2, 24)
    assert partitions > 2  # more partitions than tasks


def test_bronze_appends_a_small_micro_batch_through_delta_rs_and_a_backlog_through_spark(
    spark, kafka_broker, lake_root, monkeypatch
):
    """Up to ``RUST_APPEND_MAX_ROWS`` records delta-rs appends; a larger batch Spark's writer."""
    topic = "bronze-writers"
    ensure_topic(kafka_broker.plaintext, topic, partitions=1)
    device = build_fleet(FLEET, SEED)[0].device_id
    settings = ProcessorSettings(
        trigger="available_now", queries="bronze", fleet_size=FLEET, seed=SEED,
        kafka={"bootstrap_servers": kafka_broker.plaintext, "topic": topic},
        lake={"root": str(lake_root / "bronze-writers")},
    )  # fmt: skip
    send_readings(kafka_broker.plaintext, topic, device, range(1, 26), T0)
    before = datetime.now(UTC)
    run_available_now(spark, settings)
    monkeypatch.setattr(sinks, "RUST_APPEND_MAX_ROWS", 10)
    send_readings(kafka_broker.plaintext, topic, device, range(26, 41), T0)
    run_available_now(spark, settings)
    after = datetime.now(UTC)

    bronze = DeltaTable(Tables.under(settings.lake).bronze)
    rows = bronze.to_pyarrow_table(columns=["offset", "ingest_time"]).to_pylist()
    assert sorted(r["offset"] for r in rows) == list(range(40))
    assert all(before <= r["ingest_time"] <= after for r in rows)
    appends = [h for h in bronze.history() if h["operation"] == "WRITE" and h.get("userMetadata")]
    # Oldest first: delta-rs's commit (it has a clientVersion), then Spark's.
    metrics = [(h.get("clientVersion"), h["operationMetrics"]) for h in reversed(appends)]
    written = [
        (by is not None, int(m.get("num_added_rows", m.get("numOutputRows")))) for by, m in metrics
    ]
    assert written == [(True, 25), (False, 15)]
