"""Wire sources, transforms and sinks into the bronze, silver and gold queries."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from common.fleet import build_fleet
from common.settings import LakeSettings
from processor import sinks, sources, transforms
from processor.schema import DEVICE_SCHEMA
from processor.settings import ProcessorSettings

KAFKA_SOURCE_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
GOLD_DEVICE_1M_KEYS = ("device_id", "window_start")


@dataclass(frozen=True)
class Tables:
    """Locations of every table and checkpoint under the lake root."""

    bronze: str
    silver: str
    quarantine: str
    devices: str
    gold_device_1m: str

    @classmethod
    def under(cls, lake: LakeSettings) -> Tables:
        """The standard layout under ``lake.root``."""
        return cls(
            bronze=lake.table("bronze/events"),
            silver=lake.table("silver/events"),
            quarantine=lake.table("silver/quarantine"),
            devices=lake.table("dim/devices"),
            gold_device_1m=lake.table("gold/device_1m"),
        )


def devices_frame(spark: SparkSession, settings: ProcessorSettings) -> DataFrame:
    """The device dimension built from the seeded fleet (as the producer builds it)."""
    rows = [d.as_row() for d in build_fleet(settings.fleet_size, settings.seed)]
    return spark.createDataFrame(rows, DEVICE_SCHEMA)


def write_devices(spark: SparkSession, settings: ProcessorSettings, path: str) -> None:
    """(Re)write the device dimension; running streams see it at their next batch."""
    devices_frame(spark, settings).write.format("delta").mode("overwrite").option(
        "overwriteSchema", "true"
    ).save(path)


def silver_frame(bronze: DataFrame, devices: DataFrame, watermark: str) -> DataFrame:
    """Bronze rows -> parsed, deduplicated, enriched rows, each with a ``reason``.

    Valid events are deduplicated within the watermark and joined with the
    device dimension; invalid ones pass through so the writer can quarantine them.
    """
    parsed = transforms.parse_events(bronze)
    valid = transforms.enrich(
        transforms.deduplicate(transforms.valid_events(parsed), watermark), devices
    )
    invalid = parsed.filter(parsed["reason"].isNotNull())
    return transforms.with_audit(valid).unionByName(invalid, allowMissingColumns=True)


def ensure_tables(spark: SparkSession, settings: ProcessorSettings, tables: Tables) -> None:
    """Create every table empty, with its schema, so that downstream streams can start."""
    if not sinks.DeltaTable.isDeltaTable(spark, tables.devices):
        write_devices(spark, settings, tables.devices)
    empty_kafka = spark.createDataFrame([], KAFKA_SOURCE_SCHEMA)
    bronze = transforms.to_bronze(empty_kafka)
    sinks.ensure_table(spark, tables.bronze, bronze)
    silver_all = silver_frame(bronze, sources.delta_table(spark, tables.devices), "1 minute")
    silver = transforms.silver_rows(silver_all)
    sinks.ensure_table(spark, tables.silver, silver)
    sinks.ensure_table(spark, tables.quarantine, transforms.invalid_events(silver_all))
    sinks.ensure_table(
        spark, tables.gold_device_1m, transforms.device_minute_aggregates(silver, "1 minute")
    )


def start_bronze(
    spark: SparkSession, settings: ProcessorSettings, tables: Tables
) -> StreamingQuery:
    """Kafka -> bronze: the raw record and its Kafka coordinates, appended."""
    bronze = transforms.to_bronze(sources.kafka_stream(spark, settings))
    return sinks.append_stream(
        bronze, tables.bronze, settings.lake.checkpoint("bronze"), "bronze", settings
    )


def start_silver(
    spark: SparkSession, settings: ProcessorSettings, tables: Tables
) -> StreamingQuery:
    """Bronze -> silver and quarantine, both written exactly once per micro-batch."""
    frame = silver_frame(
        sources.delta_stream(spark, tables.bronze),
        sources.delta_table(spark, tables.devices),
        settings.watermark,
    )

    def write(batch: DataFrame, batch_id: int, query_id: str) -> None:
        batch.persist()
        try:
            sinks.idempotent_append(
                transforms.silver_rows(batch),
                tables.silver,
                f"{query_id}:silver",
                batch_id,
            )
            sinks.idempotent_append(
                transforms.invalid_events(batch),
                tables.quarantine,
                f"{query_id}:quarantine",
                batch_id,
            )
        finally:
            batch.unpersist()

    return sinks.foreach_batch_stream(
        frame, write, settings.lake.checkpoint("silver"), "silver", settings
    )


def start_gold(spark: SparkSession, settings: ProcessorSettings, tables: Tables) -> StreamingQuery:
    """Silver -> 1-minute device aggregates, upserted (update mode + MERGE)."""
    aggregates = transforms.device_minute_aggregates(
        sources.delta_stream(spark, tables.silver), settings.watermark
    )

    def write(batch: DataFrame, _batch_id: int, _query_id: str) -> None:
        sinks.merge_batch(batch, tables.gold_device_1m, GOLD_DEVICE_1M_KEYS)

    return sinks.foreach_batch_stream(
        aggregates,
        write,
        settings.lake.checkpoint("gold_device_1m"),
        "gold_device_1m",
        settings,
        output_mode="update",
    )


STAGES = (start_bronze, start_silver, start_gold)


def run_available_now(spark: SparkSession, settings: ProcessorSettings) -> None:
    """Process everything available, stage after stage, then return."""
    tables = Tables.under(settings.lake)
    ensure_tables(spark, settings, tables)
    for stage in STAGES:
        stage(spark, settings, tables).awaitTermination()


def start_all(spark: SparkSession, settings: ProcessorSettings) -> list[StreamingQuery]:
    """Start every stage as a continuous query (processing-time trigger)."""
    tables = Tables.under(settings.lake)
    ensure_tables(spark, settings, tables)
    return [stage(spark, settings, tables) for stage in STAGES]
