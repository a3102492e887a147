"""Pure DataFrame -> DataFrame steps of the medallion pipeline.

Nothing here reads or writes: sources and sinks live in ``processor.sources``
and ``processor.writes``, and ``processor.pipeline`` wires them together. Every
function works the same on a static DataFrame and on a stream, except those that
stamp the processing time (``with_time`` and its callers), which take one micro-batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, StringType, StructField, StructType

from common.contract import (
    FIELD_BY_NAME,
    FIELDS,
    KEY_FIELDS,
    METRIC_NAMES,
    REQUIRED,
    STATUSES,
    VERSION_BY_NUMBER,
    VERSIONS,
    Field,
)
from common.fleet import DEVICE_ID_FORMAT
from processor.schema import EVENT_SCHEMA, SPARK_TIME_FORMAT

KAFKA_META = ("topic", "partition", "offset", "kafka_timestamp", "ingest_time")
CONTRACT_COLUMNS = tuple(f.name for f in FIELDS)


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


CORRUPT = "_corrupt_record"
DEDUP_KEY = "_dedup_key"
EXTRA_FIELDS = "extra_fields"
_TYPE_OF = {f.name: f.dataType for f in EVENT_SCHEMA.fields}
# Every JSON key that some version sends, typed as the contract field it carries (all
# nullable: presence is checked, not assumed), plus the column where Spark's
# permissive JSON parser flags a value it could not convert.
_JSON_SCHEMA = StructType(
    [StructField(key, _TYPE_OF[name]) for key, name in KEY_FIELDS.items()]
    + [StructField(CORRUPT, StringType())]
)
_JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}


def _in_every_version(f: Field) -> bool:
    """Whether every version sends ``f`` under its own name."""
    return all(v.keys.get(f.name) == f.name for v in VERSIONS)


def _by_version(version: Column, f: Field, pick: Callable[[str], Column]) -> Column:
    """``pick(key)`` for the JSON key that the payload's ``version`` sends ``f`` under.

    Null where the version does not declare ``f`` (or is not a version of the contract).
    """
    if _in_every_version(f):
        return pick(f.name)
    out: Column | None = None
    for v in VERSIONS:
        if v.declares(f.name):
            key = pick(v.keys[f.name])
            out = (
                F.when(version == v.number, key)
                if out is None
                else out.when(version == v.number, key)
            )
    return out if out is not None else F.lit(None)


def _declared_keys(version: Column) -> Column:
    """The JSON keys that the payload's ``version`` declares (null for an unknown version)."""
    out: Column | None = None
    for v in VERSIONS:
        keys = F.array(*[F.lit(k) for k in v.keys.values()])
        out = (
            F.when(version == v.number, keys)
            if out is None
            else out.when(version == v.number, keys)
        )
    assert out is not None  # the contract has a version
    return out


def _extra_fields(raw: Column, version: Column) -> Column:
    """The payload's keys that its version does not declare, as one JSON object (or null).

    Values keep their JSON (Spark's VARIANT writes them back); the declared keys are
    checked first, so a payload with nothing undeclared costs one scan of its keys.
    """
    declared = _declared_keys(version)
    # array_except, not filter(): a lambda is evaluated row by row outside generated code.
    undeclared = F.array_except(F.json_object_keys(raw), declared)
    kept = F.map_filter(
        F.from_json(raw, "map<string, variant>"), lambda k, _v: ~F.array_contains(declared, k)
    )
    return F.when(F.size(undeclared) > 0, F.to_json(kept))


def _in_range(value: Column, f: Field) -> Column:
    """True when ``value`` is within the field's physical range (or the field is absent)."""
    ok = F.lit(True)
    if f.min is not None:
        ok = ok & (value >= F.lit(f.min))
    if f.max is not None:
        ok = ok & (value <= F.lit(f.max))
    return F.coalesce(ok, F.lit(True))


def _range_checks(typed: Column) -> list[tuple[str, Column]]:
    """``(reason, passes)`` for every range check: the version, ranged numbers, the status."""
    version = typed["schema_version"]
    checks = [
        ("out_of_range:schema_version", F.coalesce(version.isin(*VERSION_BY_NUMBER), F.lit(True)))
    ]
    checks += [
        (f"out_of_range:{f.name}", _in_range(typed[f.name], f))
        for f in FIELDS
        if (f.min is not None or f.max is not None) and f.name != "schema_version"
    ]
    return checks + [("out_of_range:status", typed["status"].isin(*STATUSES))]


def _required(typed: Column, f: Field) -> Column:
    """True unless ``f`` is required by the payload's version and absent."""
    if _in_every_version(f):
        return typed[f.name].isNotNull()
    declaring = [v.number for v in VERSIONS if v.declares(f.name)]
    return (
        F.coalesce(~typed["schema_version"].isin(*declaring), F.lit(True))
        | typed[f.name].isNotNull()
    )


def _reason(raw: Column, typed: Column) -> Column:
    """Why a record failed: the first failed check, as a code (see ``parse_events``)."""
    present = F.from_json(raw, MapType(StringType(), StringType()))
    version = typed["schema_version"]
    checks: list[Column] = [F.when(typed.isNull() | present.isNull(), F.lit("unparsable"))]
    for f in FIELDS:
        given = _by_version(version, f, lambda key: present[key].isNotNull())
        if f.required:
            checks.append(F.when(~given, F.lit(f"missing_field:{f.name}")))
        checks.append(F.when(given & typed[f.name].isNull(), F.lit(f"wrong_type:{f.name}")))
    checks += [F.when(~passes, F.lit(reason)) for reason, passes in _range_checks(typed)]
    # Spark flagged the record yet every field check passed (e.g. a repeated key).
    checks.append(F.lit("unparsable"))
    return F.coalesce(*checks)


def parse_events(bronze: DataFrame) -> DataFrame:
    """Parse the raw JSON against the contract and say why a record is invalid.

    Every bronze row comes out once, with the contract's typed columns, the
    undeclared fields (``extra_fields``), the raw payload, the Kafka metadata and
    ``reason``: null for a valid event, else the first failed check as a code:
    ``unparsable``, ``missing_field:<f>``, ``wrong_type:<f>`` (a value JSON-typed
    otherwise than the contract says, e.g. a number sent as a string),
    ``out_of_range:<f>`` (``out_of_range:schema_version``: not a version of the contract).

    A payload is read by its ``schema_version``: each field from the key that version
    sends it under (``common.contract.VERSIONS``), so every version lands in the same
    columns. Keys that its version does not declare are kept, as one JSON object in
    ``extra_fields`` (null when there are none), for valid events.

    Valid records cost one typed JSON parse, a scan of their keys and a few
    comparisons; the detailed reason (a second, untyped parse and a check per field)
    is computed only for the records that fail.

    Args:
        bronze: Rows of the bronze table (``value`` is the raw payload).
    """
    raw_text = F.make_valid_utf8(F.col("value").cast("string"))
    keys = F.col("_keys")
    version = keys["schema_version"]
    parsed = bronze.select(
        raw_text.alias("raw"),
        "value",
        F.from_json(raw_text, _JSON_SCHEMA, _JSON_OPTIONS).alias("_keys"),
        *[F.col(c) for c in KAFKA_META],
    ).select(
        "raw",
        "value",
        F.when(
            keys.isNotNull(),
            F.struct(
                *[_by_version(version, f, lambda k: keys[k]).alias(f.name) for f in FIELDS],
                keys[CORRUPT].alias(CORRUPT),
            ),
        ).alias("_t"),
        *KAFKA_META,
    )
    typed = F.col("_t")
    valid = typed.isNotNull() & typed[CORRUPT].isNull()
    for name in REQUIRED:
        valid = valid & _required(typed, FIELD_BY_NAME[name])
    for _, passes in _range_checks(typed):
        valid = valid & passes
    return parsed.select(
        *[typed[f.name].alias(f.name) for f in FIELDS],
        F.when(valid, _extra_fields(F.col("raw"), typed["schema_version"])).alias(EXTRA_FIELDS),
        F.when(valid, F.lit(None).cast("string"))
        .otherwise(_reason(F.col("raw"), typed))
        .alias("reason"),
        "raw",
        "value",
        *KAFKA_META,
    )


def valid_events(parsed: DataFrame) -> DataFrame:
    """Rows of ``parse_events`` that passed every check."""
    return parsed.filter(F.col("reason").isNull())


def silver_rows(enriched: DataFrame) -> DataFrame:
    """The valid rows of an enriched frame, shaped for the silver table."""
    return valid_events(enriched).drop("reason", "raw", "value")


def field_drift(silver: DataFrame, now: datetime | None = None) -> DataFrame:
    """Schema drift in one micro-batch: each undeclared field, the rows and devices that sent it.

    One row per field and schema version found in ``extra_fields``, with the number of
    rows and of distinct devices that carried it, their first and last event time and
    ``seen_time`` (the processing time).

    Args:
        silver: Silver rows of one micro-batch (a static frame).
        now: ``seen_time`` (UTC-aware); default: the current time (``with_time``).
    """
    carried = carrying_extra_fields(silver).select(
        F.explode(F.json_object_keys(EXTRA_FIELDS)).alias("field"),
        "schema_version",
        "device_id",
        "event_time",
    )
    counted = carried.groupBy("field", "schema_version").agg(
        F.count(F.lit(1)).alias("rows"),
        F.size(F.collect_set("device_id")).cast("long").alias("devices"),
        F.min("event_time").alias("first_event_time"),
        F.max("event_time").alias("last_event_time"),
    )
    return with_time(counted, "seen_time", now)


def carrying_extra_fields(silver: DataFrame) -> DataFrame:
    """The rows of ``silver`` that carry undeclared fields."""
    return silver.filter(F.col(EXTRA_FIELDS).isNotNull())


def batch_contents(parsed: DataFrame) -> DataFrame:
    """One row: how many rows of ``parsed`` are valid, invalid, and valid with undeclared fields.

    A micro-batch's writes that would be empty are then skipped, on one Spark job, which
    also gives the start of the hour of the earliest valid event (``earliest_hour_s``,
    epoch seconds; null without one): the bound of the batch's MERGE into the 1-minute
    windows (``writes.merge``'s ``since``).
    """
    valid = F.col("reason").isNull()
    earliest = F.min(F.when(valid, F.col("event_time")))
    return parsed.agg(
        F.count_if(valid).alias("valid"),
        F.count_if(~valid).alias("invalid"),
        F.count_if(valid & F.col(EXTRA_FIELDS).isNotNull()).alias("drifted"),
        (F.floor(F.unix_seconds(earliest) / 3600) * 3600).alias("earliest_hour_s"),
    )


def invalid_events(parsed: DataFrame) -> DataFrame:
    """Rows of ``parse_events`` that failed a check, shaped for the quarantine table.

    ``raw`` is the payload as text (invalid UTF-8 replaced); ``value`` its exact bytes.
    """
    return parsed.filter(F.col("reason").isNotNull()).select(
        "reason", "raw", "value", "event_id", "device_id", *KAFKA_META
    )


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
    return F.when(unknown, F.lit("unknown_device")).otherwise(F.col("reason"))


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


def payloads_of_invalid(rows: DataFrame) -> DataFrame:
    """Null the raw payload (``raw``, ``value``) of valid rows: only quarantine keeps it."""
    invalid = F.col("reason").isNotNull()
    return rows.withColumns({c: F.when(invalid, F.col(c)) for c in ("raw", "value")})


def seconds_between(later: Column, earlier: Column) -> Column:
    """``later - earlier`` in seconds, as a double (microseconds kept)."""
    return (F.unix_micros(later) - F.unix_micros(earlier)) / F.lit(1e6)


def with_time(rows: DataFrame, name: str, now: datetime | None = None) -> DataFrame:
    """Add column ``name`` holding the processing time ``now``, joined in as data.

    The time comes from a one-row frame (broadcast), not from ``current_timestamp()``
    or a literal: Spark writes those into the generated code as a constant, so every
    micro-batch's stage would be new code, compiled by Janino and then by the JIT
    again and again (a processor spent a third of its CPU so).

    Args:
        rows: One micro-batch (a static frame).
        name: The new column.
        now: The time (UTC-aware); default: the current time.

    Raises:
        ValueError: ``rows`` is a stream, or ``now`` has no time zone.
    """
    if rows.isStreaming:
        # The time is fixed when the plan is built: on a stream, every batch would get it.
        raise ValueError("the processing time is stamped on a micro-batch, not on a stream")
    when = datetime.now(UTC) if now is None else now
    if when.tzinfo is None:
        raise ValueError("the processing time must be timezone-aware")
    stamp = rows.sparkSession.createDataFrame([(when,)], f"`{name}` timestamp")
    return rows.crossJoin(F.broadcast(stamp))


def _ingest_filled(now: Column) -> Column:
    """``ingest_time``, or ``now`` where it is null (rows read straight from the source)."""
    return F.coalesce("ingest_time", now)


def stamp_ingest(rows: DataFrame, now: datetime | None = None) -> DataFrame:
    """Fill a null ``ingest_time`` (rows read straight from the source) with the time now.

    Args:
        rows: One micro-batch with an ``ingest_time`` column (a static frame).
        now: The time to stamp (UTC-aware); default: the current time.
    """
    stamped = with_time(rows, "_now", now)
    return stamped.withColumn("ingest_time", _ingest_filled(F.col("_now"))).drop("_now")


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
            "ingest_time": _ingest_filled(processed),
            "ingest_latency_s": seconds_between(F.col("kafka_timestamp"), F.col("event_time")),
            "process_latency_s": seconds_between(processed, F.col("event_time")),
            "pipeline_latency_s": seconds_between(processed, F.col("kafka_timestamp")),
        }
    )


def device_minute_aggregates(silver: DataFrame, watermark: str) -> DataFrame:
    """1-minute tumbling windows per device: events, then each metric's min, avg, max, count.

    ``<metric>_count`` counts the readings that carried the metric, so that two
    partial aggregates of the same window combine exactly (``combine_device_minutes``).

    Args:
        silver: Silver events (``event_time``, ``device_id``, metrics, dimension columns).
        watermark: Event-time watermark delay, e.g. ``"2 minutes"`` (streams only).
    """
    keys, aggregates, output = _minute_columns()
    return (
        silver.withWatermark("event_time", watermark)
        .groupBy(*keys)
        .agg(*aggregates)
        .select(*output)
    )


@functools.cache
def _minute_columns() -> tuple[tuple[Column, ...], tuple[Column, ...], tuple[Column, ...]]:
    """``device_minute_aggregates``' grouping keys, aggregates and output columns.

    Built once and reused: silver's writer runs the aggregate on every micro-batch, and
    building these columns (four aggregates a metric, more than 60 columns in all)
    took 428 py4j calls each time (a Column is a few calls to build and one to free).
    A Column is an unresolved expression, valid in any plan and any session of the
    process (PySpark keeps one JVM per process).
    """
    aggs = {"events": F.count(F.lit(1))}
    for m in METRIC_NAMES:
        aggs |= {
            f"{m}_min": F.min(m), f"{m}_avg": F.avg(m), f"{m}_max": F.max(m),
            f"{m}_count": F.count(m),
        }  # fmt: skip
    aggs |= {"last_event_time": F.max("event_time"), "last_seq": F.max("seq")}
    dimensions = tuple(F.col(c) for c in ("device_id", "device_type", "site"))
    keys = (F.window("event_time", "1 minute"), *dimensions)
    output = (
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        *dimensions,
        *(F.col(name) for name in aggs),
    )
    return keys, tuple(col.alias(name) for name, col in aggs.items()), output


def combine_device_minutes(old: str = "t", new: str = "s") -> dict[str, str]:
    """How a stored 1-minute row absorbs a later partial row of the same device and window.

    Counts add, minima and maxima keep the extreme, averages are weighted by their
    counts: the result equals ``device_minute_aggregates`` over both rows' events. A
    stored row from before a metric was added (its columns null) counts as none of it.
    The expressions are Spark SQL, for a MERGE's matched-row update (``writes.merge``).

    Args:
        old: Alias of the stored row (the MERGE target).
        new: Alias of the partial row (the MERGE source).

    Returns:
        The value of every column that changes, for a MERGE's matched-row update.
    """

    def o(c: str) -> str:
        return f"{old}.`{c}`"

    def n(c: str) -> str:
        return f"{new}.`{c}`"

    out = {"events": f"{o('events')} + {n('events')}"}
    for m in METRIC_NAMES:
        # A row stored before the metric was in the contract has a null count.
        count = f"(coalesce({o(m + '_count')}, 0) + {n(m + '_count')})"
        total = (
            f"(coalesce({o(m + '_avg')} * {o(m + '_count')}, 0.0)"
            f" + coalesce({n(m + '_avg')} * {n(m + '_count')}, 0.0))"
        )
        out |= {
            f"{m}_min": f"least({o(m + '_min')}, {n(m + '_min')})",
            f"{m}_avg": f"CASE WHEN {count} > 0 THEN {total} / {count} END",
            f"{m}_max": f"greatest({o(m + '_max')}, {n(m + '_max')})",
            f"{m}_count": count,
        }
    out |= {
        "last_event_time": f"greatest({o('last_event_time')}, {n('last_event_time')})",
        "last_seq": f"greatest({o('last_seq')}, {n('last_seq')})",
    }
    return out


def site_type_windows(device_1m: DataFrame, length: str, slide: str) -> DataFrame:
    """Sliding windows per site and device type, rolled up from the 1-minute rows.

    A reading lies in a window exactly when its minute does (windows start and end on
    whole minutes), so the rollup equals the same windows over silver's readings:
    events and metric readings add up, ``devices`` counts the devices with a minute in
    the window, and each mean is weighted by its minute's count of readings.

    Args:
        device_1m: Rows of ``gold/device_1m`` (``device_minute_aggregates``).
        length: Window length in whole minutes, e.g. ``"10 minutes"``.
        slide: Slide in whole minutes, e.g. ``"5 minutes"``.
    """
    aggs = {
        "events": F.sum("events"),
        "devices": F.count_distinct("device_id"),
    } | {
        # try_divide: a window without the metric has no readings of it (null, not 0/0).
        f"{m}_avg": F.try_divide(
            F.sum(F.col(f"{m}_avg") * F.col(f"{m}_count")), F.sum(f"{m}_count")
        )
        for m in METRIC_NAMES
    }
    return (
        device_1m.groupBy(F.window("window_start", length, slide), "site", "device_type")
        .agg(*[col.alias(name) for name, col in aggs.items()])
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "site",
            "device_type",
            *aggs,
        )
    )


def sliding_keys(silver: DataFrame, length: str, slide: str) -> DataFrame:
    """The (window_start, site, device_type) of each sliding window ``silver``'s rows fall in."""
    return (
        silver.select(F.window("event_time", length, slide).start.alias("window_start"), "site",
                      "device_type")
        .distinct()
    )  # fmt: skip


def device_sessions(silver: DataFrame, watermark: str, gap: str) -> DataFrame:
    """Connectivity sessions per device: runs of readings with no silence longer than ``gap``.

    Args:
        silver: Silver events.
        watermark: Event-time watermark delay.
        gap: Silence that ends a session, e.g. ``"2 minutes"``.
    """
    return (
        silver.withWatermark("event_time", watermark)
        .groupBy(F.session_window("event_time", gap), "device_id", "device_type", "site")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.min("event_time").alias("session_start"),
            F.max("event_time").alias("session_end"),
        )
        .select(
            "device_id",
            "device_type",
            "site",
            "session_start",
            "session_end",
            "events",
            seconds_between(F.col("session_end"), F.col("session_start")).alias("duration_s"),
        )
    )


def latest_status(silver: DataFrame, now: datetime | None = None) -> DataFrame:
    """The newest reading per device, with how many readings it has (``events``).

    Over one micro-batch it is the row to upsert into device_status (the MERGE adds
    the batch's ``events`` to the stored count: ``combine_device_status``); over all
    of silver it is the table.

    Args:
        silver: Silver rows (a static frame).
        now: ``updated_time`` (UTC-aware); default: the current time (``with_time``).
    """
    from pyspark.sql.window import Window

    device = Window.partitionBy("device_id")
    newest = device.orderBy(F.col("event_time").desc(), F.col("seq").desc())
    ranked = silver.withColumn("_rank", F.row_number().over(newest)).withColumn(
        "events", F.count(F.lit(1)).over(device)
    )
    return (
        with_time(ranked, "updated_time", now)
        .filter(F.col("_rank") == 1)
        .select(
            "device_id",
            "device_type",
            "site",
            "building",
            "lat",
            "lon",
            "status",
            "battery_pct",
            F.col("event_time").alias("last_event_time"),
            F.col("seq").alias("last_seq"),
            "events",
            "updated_time",
        )  # fmt: skip
    )


def combine_device_status(columns: Sequence[str], old: str = "t", new: str = "s") -> dict[str, str]:
    """How a stored ``device_status`` row absorbs a batch's row of the same device.

    The reading's columns take the newer reading of the two (a later event time, or
    the same time and a higher ``seq``); ``events`` adds the batch's count to the
    stored one (so the MERGE must run once per batch); ``updated_time``, when the row
    last changed, is the batch's. The expressions are Spark SQL, for a MERGE's
    matched-row update (``writes.merge``).

    Args:
        columns: The columns of the batch's rows (``latest_status``).
        old: Alias of the stored row (the MERGE target).
        new: Alias of the batch's row (the MERGE source).

    Returns:
        The value of every column that changes, for a MERGE's matched-row update.
    """
    newer = (
        f"{new}.`last_event_time` > {old}.`last_event_time` OR ({new}.`last_event_time` = "
        f"{old}.`last_event_time` AND {new}.`last_seq` > {old}.`last_seq`)"
    )
    out = {
        c: f"CASE WHEN {newer} THEN {new}.`{c}` ELSE {old}.`{c}` END"
        for c in columns
        if c not in ("device_id", "events", "updated_time")
    }
    out["events"] = f"coalesce({old}.`events`, 0) + {new}.`events`"
    if "updated_time" in columns:
        out["updated_time"] = f"{new}.`updated_time`"
    return out


def fleet_summary(status: DataFrame) -> DataFrame:
    """Per device type: devices, events and the newest event time, from device_status.

    device_status holds each device that has sent a valid reading once, with its
    count of readings (``latest_status``): the summary of a few rows per device is
    the summary of all of silver.
    """
    return status.groupBy("device_type").agg(
        F.count(F.lit(1)).alias("devices"),
        F.sum("events").cast("long").alias("events"),
        F.max("last_event_time").alias("last_event_time"),
    )
