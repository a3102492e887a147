"""Pure DataFrame -> DataFrame steps of the medallion pipeline.

Nothing here reads or writes: sources and sinks live in ``processor.sources``
and ``processor.sinks``, and ``processor.pipeline`` wires them together. Every
function works the same on a static DataFrame and on a stream.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, StringType

from common.contract import FIELDS, METRIC_NAMES, STATUSES

KAFKA_META = ("topic", "partition", "offset", "kafka_timestamp", "ingest_time")
CONTRACT_COLUMNS = tuple(f.name for f in FIELDS)


def to_bronze(kafka_df: DataFrame) -> DataFrame:
    """Keep the raw record and where it came from, plus the ingest time.

    Args:
        kafka_df: Rows of Spark's Kafka source (``key``, ``value``, ``topic`` ...).
    """
    return kafka_df.select(
        F.col("key").cast("string").alias("key"),
        F.col("value"),
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.current_timestamp().alias("ingest_time"),
    )


def _typed(raw: Column, spark_type: str) -> Column:
    if spark_type == "timestamp":
        return F.try_to_timestamp(raw)
    if spark_type == "string":
        return raw
    return raw.try_cast(spark_type)


def parse_events(bronze: DataFrame) -> DataFrame:
    """Parse the raw JSON against the contract and say why a record is invalid.

    Every bronze row comes out once, with the contract's typed columns, the raw
    payload, the Kafka metadata and ``reason``: null for a valid event, else the
    first failed check as a code: ``unparsable``, ``missing_field:<f>``,
    ``wrong_type:<f>``, ``out_of_range:<f>``.

    Args:
        bronze: Rows of the bronze table (``value`` is the raw payload).
    """
    raw_text = F.col("value").cast("string")
    fields = F.from_json(raw_text, MapType(StringType(), StringType()))
    parsed = bronze.select(
        raw_text.alias("raw"), fields.alias("_f"), *[F.col(c) for c in KAFKA_META]
    )
    typed = {f.name: _typed(F.col("_f")[f.name], f.type) for f in FIELDS}
    checks: list[Column] = [F.when(F.col("_f").isNull(), F.lit("unparsable"))]
    for f in FIELDS:
        present = F.col("_f")[f.name].isNotNull()
        if f.required:
            checks.append(F.when(~present, F.lit(f"missing_field:{f.name}")))
        checks.append(F.when(present & typed[f.name].isNull(), F.lit(f"wrong_type:{f.name}")))
    for f in FIELDS:
        bounds = []
        if f.min is not None:
            bounds.append(typed[f.name] < F.lit(f.min))
        if f.max is not None:
            bounds.append(typed[f.name] > F.lit(f.max))
        for cond in bounds:
            checks.append(F.when(cond, F.lit(f"out_of_range:{f.name}")))
    checks.append(F.when(~typed["status"].isin(*STATUSES), F.lit("out_of_range:status")))
    return parsed.select(
        *[typed[f.name].alias(f.name) for f in FIELDS],
        F.coalesce(*checks).alias("reason"),
        "raw",
        *KAFKA_META,
    )


def valid_events(parsed: DataFrame) -> DataFrame:
    """Rows of ``parse_events`` that passed every check."""
    return parsed.filter(F.col("reason").isNull())


def silver_rows(enriched: DataFrame) -> DataFrame:
    """The valid rows of an enriched frame, shaped for the silver table."""
    return valid_events(enriched).drop("reason", "raw")


def invalid_events(parsed: DataFrame) -> DataFrame:
    """Rows of ``parse_events`` that failed a check, shaped for the quarantine table."""
    return parsed.filter(F.col("reason").isNotNull()).select(
        "reason", "raw", "event_id", "device_id", *KAFKA_META
    )


def deduplicate(events: DataFrame, watermark: str) -> DataFrame:
    """Drop repeated ``event_id``s within the event-time watermark (bounded state).

    On a static frame (tests, batch recomputation) every repeat is dropped, since
    ``dropDuplicatesWithinWatermark`` exists for streams only.
    """
    if not events.isStreaming:
        return events.dropDuplicates(["event_id"])
    return events.withWatermark("event_time", watermark).dropDuplicatesWithinWatermark(["event_id"])


def enrich(events: DataFrame, devices: DataFrame) -> DataFrame:
    """Join the device dimension; an unknown device gets ``reason='unknown_device'``.

    Args:
        events: Valid, deduplicated events.
        devices: The device dimension (static; re-read by Spark every micro-batch).
    """
    dims = devices.withColumnRenamed("device_id", "_dim_device_id")
    joined = events.join(F.broadcast(dims), events["device_id"] == dims["_dim_device_id"], "left")
    return joined.withColumn(
        "reason",
        F.when(F.col("_dim_device_id").isNull(), F.lit("unknown_device")).otherwise(
            F.col("reason")
        ),
    ).drop("_dim_device_id")


def _seconds_between(later: Column, earlier: Column) -> Column:
    return (F.unix_micros(later) - F.unix_micros(earlier)) / F.lit(1e6)


def with_audit(events: DataFrame) -> DataFrame:
    """Add the processed time and the latencies between created, ingested and processed."""
    processed = F.current_timestamp()
    return events.withColumn("processed_time", processed).select(
        "*",
        _seconds_between(F.col("kafka_timestamp"), F.col("event_time")).alias("ingest_latency_s"),
        _seconds_between(F.col("processed_time"), F.col("event_time")).alias("process_latency_s"),
    )


def device_minute_aggregates(silver: DataFrame, watermark: str) -> DataFrame:
    """1-minute tumbling windows per device: count, min, avg and max of each metric.

    Args:
        silver: Silver events (``event_time``, ``device_id``, metrics, dimension columns).
        watermark: Event-time watermark delay, e.g. ``"2 minutes"``.
    """
    aggs = {"events": F.count(F.lit(1))}
    for m in METRIC_NAMES:
        aggs |= {f"{m}_min": F.min(m), f"{m}_avg": F.avg(m), f"{m}_max": F.max(m)}
    aggs |= {"last_event_time": F.max("event_time"), "last_seq": F.max("seq")}
    return (
        silver.withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", "1 minute"), "device_id", "device_type", "site")
        .agg(*[col.alias(name) for name, col in aggs.items()])
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "device_id",
            "device_type",
            "site",
            *aggs,
        )
    )
