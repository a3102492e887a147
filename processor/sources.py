"""Where the processor reads from: Kafka / Event Hubs, Delta tables."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from common.kafka import spark_kafka_options
from processor.settings import ProcessorSettings


def kafka_stream(spark: SparkSession, settings: ProcessorSettings) -> DataFrame:
    """Subscribe to the events topic (local Kafka or Event Hubs, per the settings)."""
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(settings.kafka))
        .option("subscribe", settings.kafka.topic)
        .option("startingOffsets", settings.starting_offsets)
        .option("failOnDataLoss", str(settings.fail_on_data_loss).lower())
    )
    if settings.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", settings.max_offsets_per_trigger)
    return reader.load()


def delta_stream(spark: SparkSession, path: str) -> DataFrame:
    """Stream the rows appended to a Delta table."""
    return spark.readStream.format("delta").load(path)


def delta_table(spark: SparkSession, path: str) -> DataFrame:
    """Read a Delta table as a static DataFrame (re-resolved in every micro-batch)."""
    return spark.read.format("delta").load(path)
