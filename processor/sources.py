"""Where the processor reads from: Kafka / Event Hubs, Delta tables."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from common.kafka import spark_kafka_options
from processor.settings import ProcessorSettings


def kafka_stream(
    spark: SparkSession,
    settings: ProcessorSettings,
    topic: str | None = None,
    rate_limited: bool = True,
) -> DataFrame:
    """Subscribe to a topic (local Kafka or Event Hubs, per the settings).

    Args:
        spark: The session.
        settings: Processor settings.
        topic: The topic; default the events topic.
        rate_limited: Apply ``max_offsets_per_trigger`` (real-time mode takes no limit).
    """
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(settings.kafka))
        .option("subscribe", topic or settings.kafka.topic)
        .option("startingOffsets", settings.starting_offsets)
        .option("failOnDataLoss", str(settings.fail_on_data_loss).lower())
    )
    if rate_limited and settings.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", settings.max_offsets_per_trigger)
    return reader.load()


def delta_stream(spark: SparkSession, path: str) -> DataFrame:
    """Stream the rows appended to a Delta table."""
    return spark.readStream.format("delta").load(path)


def delta_table(spark: SparkSession, path: str) -> DataFrame:
    """Read a Delta table as a static DataFrame (re-resolved in every micro-batch)."""
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
