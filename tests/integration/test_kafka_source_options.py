"""``startingOffsets`` and ``maxOffsetsPerTrigger`` reach Spark's Kafka reader, and bronze's bound."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame

from common.fleet import build_fleet
from common.lake import Table
from infra.broker import ensure_topic
from processor import sources
from processor.pipeline import run_available_now
from processor.settings import ProcessorSettings
from tests.delta_log import commits
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

    silver = DeltaTable(settings.lake.table(Table.SILVER_EVENTS))
    assert sorted(silver.to_pyarrow_table(columns=["seq"]).column("seq").to_pylist()) == list(
        range(6, 31)
    )
    # Rows per micro-batch, each batch one append with its txn.
    appends = [c for c in commits(settings.lake.table(Table.SILVER_EVENTS)) if c.txns]
    assert [int(c.info["operationMetrics"]["numOutputRows"]) for c in appends] == [10, 10, 5]


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


def test_bronze_appends_each_micro_batch_once_with_its_txn(spark, kafka_broker, lake_root):
    """Every bronze append is Spark's, and records its query and micro-batch in Delta."""
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
    send_readings(kafka_broker.plaintext, topic, device, range(26, 41), T0)
    run_available_now(spark, settings)
    after = datetime.now(UTC)

    bronze = DeltaTable(settings.lake.table(Table.BRONZE_EVENTS))
    rows = bronze.to_pyarrow_table(columns=["offset", "ingest_time"]).to_pylist()
    assert sorted(r["offset"] for r in rows) == list(range(40))
    assert all(before <= r["ingest_time"] <= after for r in rows)
    appends = [c for c in commits(settings.lake.table(Table.BRONZE_EVENTS)) if c.txns]
    assert [int(c.info["operationMetrics"]["numOutputRows"]) for c in appends] == [25, 15]
    assert {c.engine for c in appends} == {"Apache-Spark/4.2.0"}
    (app,) = {app for c in appends for app, _batch in c.txns}  # the query's id, kept
    assert [batch for c in appends for _app, batch in c.txns] == [0, 1]
    assert bronze.transaction_version(app) == 1
