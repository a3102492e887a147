"""The bronze layer: each source's records as bronze rows, the raw record kept.

Three sources give the same columns: Kafka or Event Hubs (``to_bronze``), a folder of
JSON-lines files (``lines_to_bronze``) and Spark's rate source for smoke runs
(``rate_to_bronze``). ``ingest_time`` is stamped per micro-batch (``stamp_ingest``).
"""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from common.fleet import DEVICE_ID_FORMAT
from processor.schema import SPARK_TIME_FORMAT
from processor.times import with_time

KAFKA_META = ("topic", "partition", "offset", "kafka_timestamp", "ingest_time")


# The ingest time is left null in the streaming plan and stamped on each micro-batch
# (``stamp_ingest``): the current time is a constant in generated code (see ``with_time``).
def _no_ingest_time() -> Column:
    return F.lit(None).cast("timestamp").alias("ingest_time")


def to_bronze(kafka_df: DataFrame) -> DataFrame:
    """Keep the raw record and where it came from; ``ingest_time`` is stamped per batch.

    Args:
        kafka_df: Rows of Spark's Kafka source (``key``, ``value``, ``topic`` ...).
    """
    return kafka_df.select(
        # Invalid UTF-8 would poison string columns for every reader: replace it (U+FFFD).
        F.make_valid_utf8(F.col("key").cast("string")).alias("key"),
        F.col("value"),
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        _no_ingest_time(),
    )


def lines_to_bronze(files: DataFrame) -> DataFrame:
    """Bronze rows from JSON-lines files, one per line (Spark's text source read whole).

    ``topic`` holds the file path, ``offset`` the line's index in the file (from 0)
    and ``kafka_timestamp`` the file's modification time; ``partition`` is null
    (``ingest_time`` as in ``to_bronze``). A line ends with LF or CRLF; a blank line
    is a (bad) record, the end of the file after a last newline is not.

    Args:
        files: One row per file: ``value`` (the whole text, as ``wholetext`` reads it)
            and ``_metadata``.
    """
    # Split as Latin-1, where every byte is one character: a line keeps its exact bytes,
    # valid UTF-8 or not (a split of the text itself would replace invalid ones).
    text = F.decode(F.col("value").cast("binary"), "ISO-8859-1")
    parts = F.split(text, r"\r?\n")
    ends_in_newline = F.element_at(parts, -1) == ""
    lines = F.when(ends_in_newline, F.slice(parts, 1, F.size(parts) - 1)).otherwise(parts)
    return files.select(F.posexplode(lines).alias("offset", "line"), "_metadata").select(
        F.lit(None).cast("string").alias("key"),
        F.encode(F.col("line"), "ISO-8859-1").alias("value"),
        F.col("_metadata.file_path").alias("topic"),
        F.lit(None).cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        F.col("_metadata.file_modification_time").alias("kafka_timestamp"),
        _no_ingest_time(),
    )


def rate_to_bronze(rate: DataFrame, fleet_size: int) -> DataFrame:
    """Bronze rows from Spark's rate source: synthetic thermostat-style events, for smoke runs.

    Row ``n`` becomes device ``n % fleet_size`` with sequence ``n // fleet_size + 1``
    (``ingest_time`` as in ``to_bronze``).
    """
    device = F.format_string(DEVICE_ID_FORMAT, F.col("value") % fleet_size)
    event = F.struct(
        F.format_string("rate-%d", F.col("value")).alias("event_id"),
        device.alias("device_id"),
        (F.floor(F.col("value") / fleet_size) + 1).alias("seq"),
        F.date_format(F.col("timestamp"), SPARK_TIME_FORMAT).alias("event_time"),
        F.lit(1).alias("schema_version"),
        F.lit("online").alias("status"),
        (F.lit(21.0) + F.sin(F.col("value") / 50.0)).alias("temperature_c"),
    )
    return rate.select(
        device.alias("key"),
        F.to_json(event).cast("binary").alias("value"),
        F.lit("rate").alias("topic"),
        F.lit(0).alias("partition"),
        F.col("value").alias("offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        _no_ingest_time(),
    )


def ingest_filled(now: Column) -> Column:
    """``ingest_time``, or ``now`` where it is null (rows read straight from the source)."""
    return F.coalesce("ingest_time", now)


def stamp_ingest(rows: DataFrame, now: datetime | None = None) -> DataFrame:
    """Fill a null ``ingest_time`` (rows read straight from the source) with the time now.

    Args:
        rows: One micro-batch with an ``ingest_time`` column (a static frame).
        now: The time to stamp (UTC-aware); default: the current time.
    """
    stamped = with_time(rows, "_now", now)
    return stamped.withColumn("ingest_time", ingest_filled(F.col("_now"))).drop("_now")
