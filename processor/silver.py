"""Bronze rows -> silver's and quarantine's rows: the hot path's pure frames.

``silver_frame`` is the whole way from bronze rows to silver's rows. The silver query
streams its first part, ``checked_rows`` (parsing, the device check, the dedup), and
joins each micro-batch with the device dimension, ``enriched_rows``: a batch joins
the dimension's rows of its own devices only, so a fleet of a million devices costs a
batch a scan of the cached dimension, not a broadcast of its every column. (The
stream's device check still broadcasts the dimension's ids.) A dimension rewritten
while a batch runs reaches the check and the join at most one refresh apart: a row
whose device the new dimension dropped is quarantined as ``unknown_device`` either
way. ``silver_out`` and
``quarantine_out`` shape each micro-batch for the two tables
(``processor.hot_path.write_silver_batch`` writes them).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from common import reasons
from processor.bronze import ingest_filled, stamp_ingest
from processor.parsing import invalid_events, parse_events, payloads_of_invalid, valid_events
from processor.times import seconds_between, with_time


def silver_frame(
    bronze: DataFrame,
    devices: DataFrame,
    watermark: str,
    avro_schemas: Mapping[int, str] | None = None,
) -> DataFrame:
    """Bronze rows -> parsed, deduplicated, enriched rows, each with a ``reason``.

    ``enriched_rows`` of ``checked_rows``: what the silver query computes, stream and
    micro-batch together.
    """
    return enriched_rows(checked_rows(bronze, devices, watermark, avro_schemas), devices)


def checked_rows(
    bronze: DataFrame,
    devices: DataFrame,
    watermark: str,
    avro_schemas: Mapping[int, str] | None = None,
) -> DataFrame:
    """Bronze rows -> parsed, deduplicated rows, each with a ``reason``: the streamed part.

    One pass over the source: every record is parsed once and checked against the
    device dimension's ids; valid events are deduplicated within the watermark, and
    invalid ones go through the same steps under keys of their own, unchanged, so the
    writer can quarantine them (``dedup_keys``). Valid rows drop their raw
    payload before the dedup's shuffle: it would more than double the bytes shuffled,
    for nothing. Avro records are decoded by ``avro_schemas`` (``parse_events``).
    """
    checked = flag_unknown_devices(parse_events(bronze, avro_schemas), devices)
    keyed = payloads_of_invalid(dedup_keys(checked))
    deduped = deduplicate(keyed, watermark, key=DEDUP_KEY)
    return deduped.drop(DEDUP_KEY)


def enriched_rows(rows: DataFrame, devices: DataFrame) -> DataFrame:
    """``checked_rows``' rows joined with the dimension's rows of the devices they name.

    The rows' distinct device ids are broadcast to pick those devices' rows out of the
    dimension, and only those are broadcast to the join: a micro-batch's few thousand
    devices, not the whole fleet's (``devices_of``).
    """
    return enrich(rows, devices_of(rows, devices))


def silver_out(batch: DataFrame) -> DataFrame:
    """A batch of ``silver_frame``'s valid rows as written to silver, audit columns stamped.

    The times are stamped here, on the cached batch, not in the streaming plan (see
    ``processor.bronze.to_bronze``).
    """
    return with_audit(silver_rows(batch))


def quarantine_out(batch: DataFrame) -> DataFrame:
    """A batch of ``silver_frame``'s invalid rows as written to quarantine."""
    return stamp_ingest(invalid_events(batch))


DEDUP_KEY = "_dedup_key"


def silver_rows(enriched: DataFrame) -> DataFrame:
    """The valid rows of an enriched frame, shaped for the silver table."""
    return valid_events(enriched).drop("reason", "raw", "value")


def dedup_keys(parsed: DataFrame) -> DataFrame:
    """Key every row of ``parse_events`` for ``deduplicate``, valid or not, in one pass.

    A valid event is keyed by its ``event_id``. An invalid record must reach the
    quarantine whatever its content or lateness, so it is keyed by where it came
    from (topic, partition, offset; for a file, its path and the line's index) and
    its ``event_time`` is nulled: Spark neither drops a row with no event time as
    late nor keeps its key past the next watermark, and the watermark follows the
    valid events alone. So the source is read and parsed once, not once for silver
    and again for the quarantine. The key is data, not random: a streaming plan gets
    new random seeds every micro-batch, and a seed is a constant in generated code.
    """
    valid = F.col("reason").isNull()
    origin = F.concat_ws(
        "\u0000",
        F.lit("invalid"),
        F.col("topic"),
        F.col("partition").cast("string"),
        F.col("offset").cast("string"),
    )
    return parsed.withColumns(
        {
            DEDUP_KEY: F.when(valid, F.col("event_id")).otherwise(origin),
            "event_time": F.when(valid, F.col("event_time")),
        }
    )


def deduplicate(events: DataFrame, watermark: str, key: str = "event_id") -> DataFrame:
    """Drop repeated ``key``s within the event-time watermark (bounded state).

    On a static frame (tests, batch recomputation) every repeat is dropped, since
    ``dropDuplicatesWithinWatermark`` exists for streams only.
    """
    if not events.isStreaming:
        return events.dropDuplicates([key])
    return events.withWatermark("event_time", watermark).dropDuplicatesWithinWatermark([key])


def _unknown_device(known_id: str) -> Column:
    """``reason``, set to ``unknown_device`` for a valid event whose ``known_id`` is null."""
    unknown = F.col("reason").isNull() & F.col(known_id).isNull()
    return F.when(unknown, F.lit(reasons.UNKNOWN_DEVICE)).otherwise(F.col("reason"))


def flag_unknown_devices(events: DataFrame, devices: DataFrame) -> DataFrame:
    """Give a valid event of a device missing from the dimension the reason ``unknown_device``.

    Only the dimension's ids are joined (a broadcast lookup), so this can run before
    a shuffle without widening the rows; ``enrich`` adds the profile columns later.

    Args:
        events: Parsed events; a row that already has a ``reason`` keeps it.
        devices: The device dimension (static; silver joins a cached copy, ``CachedDimension``).
    """
    known = devices.select(F.col("device_id").alias("_known_id"))
    joined = events.join(F.broadcast(known), events["device_id"] == known["_known_id"], "left")
    return joined.withColumn("reason", _unknown_device("_known_id")).drop("_known_id")


def devices_of(events: DataFrame, devices: DataFrame) -> DataFrame:
    """The device dimension's rows of the devices ``events`` name (a semi-join on the ids).

    Args:
        events: Rows with a ``device_id`` (static: a micro-batch).
        devices: The device dimension.
    """
    ids = events.select("device_id").distinct()
    return devices.join(F.broadcast(ids), "device_id", "left_semi")


def enrich(events: DataFrame, devices: DataFrame) -> DataFrame:
    """Join the device dimension; a valid event of an unknown device becomes ``unknown_device``.

    Args:
        events: Deduplicated events; a row that already has a ``reason`` keeps it.
        devices: The device dimension (static; silver joins a cached copy, ``CachedDimension``).
    """
    dims = devices.withColumnRenamed("device_id", "_dim_device_id")
    joined = events.join(F.broadcast(dims), events["device_id"] == dims["_dim_device_id"], "left")
    return joined.withColumn("reason", _unknown_device("_dim_device_id")).drop("_dim_device_id")


def with_audit(events: DataFrame, now: datetime | None = None) -> DataFrame:
    """Stamp the ingest time if unset, add the processed time and the latencies between them.

    ``ingest_latency_s`` is created (event time) to ingested (Kafka time),
    ``pipeline_latency_s`` ingested to processed, ``process_latency_s`` created to
    processed (end to end, the sum of the two).

    Args:
        events: Silver rows of one micro-batch (``event_time``, ``kafka_timestamp``,
            ``ingest_time`` ...); a static frame.
        now: The processing time (UTC-aware); default: the current time.

    Raises:
        ValueError: ``events`` is a stream, or ``now`` has no time zone (``with_time``).
    """
    processed = F.col("processed_time")
    # withColumns, not a select of every column: each column named costs py4j calls.
    return with_time(events, "processed_time", now).withColumns(
        {
            "ingest_time": ingest_filled(processed),
            "ingest_latency_s": seconds_between(F.col("kafka_timestamp"), F.col("event_time")),
            "process_latency_s": seconds_between(processed, F.col("event_time")),
            "pipeline_latency_s": seconds_between(processed, F.col("kafka_timestamp")),
        }
    )
