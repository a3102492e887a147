"""Where the processor reads from: Kafka / Event Hubs, Delta tables."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from common.kafka import spark_kafka_options
from processor.settings import ProcessorSettings

# How long the broker holds a fetch that finds no new records (Kafka's default: 500 ms).
# A micro-batch's task reads a fixed range, yet its consumer's fetches wait that long at
# the end of it: with the default, a task of a few milliseconds of CPU takes hundreds of
# milliseconds, and a micro-batch of a trickle of events seconds.
MICRO_BATCH_FETCH_MAX_WAIT_MS = 20


def kafka_stream(
    spark: SparkSession,
    settings: ProcessorSettings,
    topic: str | None = None,
    micro_batch: bool = True,
    max_offsets: int | None = None,
) -> DataFrame:
    """Subscribe to a topic (local Kafka or Event Hubs, per the settings).

    Args:
        spark: The session.
        settings: Processor settings.
        topic: The topic; default the events topic.
        micro_batch: For a micro-batch query: ``max_offsets_per_trigger``, a short
            fetch wait (``MICRO_BATCH_FETCH_MAX_WAIT_MS``), and at most
            ``shuffle_partitions`` tasks (about the cores in use) to read a micro-batch,
            however many partitions the topic has: a task per partition costs its fixed
            part (the plan's deserialization, projections generated anew) per partition,
            every micro-batch. Real-time mode takes none of these: its tasks poll without
            end, where the broker's wait saves empty fetches.
        max_offsets: The most records a micro-batch reads, whatever
            ``max_offsets_per_trigger`` allows (the smaller limit holds).
    """
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(settings.kafka))
        .option("subscribe", topic or settings.kafka.topic)
        .option("startingOffsets", settings.starting_offsets)
        .option("failOnDataLoss", str(settings.fail_on_data_loss).lower())
    )
    if not micro_batch:
        return reader.load()
    reader = reader.option("kafka.fetch.max.wait.ms", MICRO_BATCH_FETCH_MAX_WAIT_MS)
    limits = [n for n in (settings.max_offsets_per_trigger, max_offsets) if n]
    if limits:
        reader = reader.option("maxOffsetsPerTrigger", min(limits))
    return reader.load().coalesce(settings.shuffle_partitions)


def delta_stream(spark: SparkSession, path: str) -> DataFrame:
    """Stream the rows appended to a Delta table."""
    return spark.readStream.format("delta").load(path)


def delta_table(spark: SparkSession, path: str) -> DataFrame:
    """Read a Delta table as a static DataFrame (re-resolved in every micro-batch, unless cached).

    While silver runs, a read of the device dimension in its session gets silver's
    cached copy (``processor.device_dimension``).
    """
    return spark.read.format("delta").load(path)


def lines_stream(spark: SparkSession, landing_dir: str, max_files_per_trigger: int) -> DataFrame:
    """New JSON-lines files in a landing folder, one row per file (split into lines later).

    Read whole, so that each line's index in its file can key it (``lines_to_bronze``).
    """
    return (
        spark.readStream.format("text")
        .option("wholetext", True)
        .option("maxFilesPerTrigger", max_files_per_trigger)
        .load(landing_dir)
        .select("value", "_metadata")
    )


def rate_stream(spark: SparkSession, rows_per_second: int) -> DataFrame:
    """Spark's rate source: ``timestamp`` and a counting ``value``."""
    return spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
