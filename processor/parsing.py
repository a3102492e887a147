"""A bronze record against the contract: parsed by its schema version, or a reason.

JSON payloads are parsed here; Avro ones (Confluent's framing) are decoded by
``processor.avro_decoding`` into the same typed columns, and checked alike.

``parse_events`` reads each payload by the keys its ``schema_version`` declares into the
contract's typed columns and gives every row a ``reason``: null for a valid event, else
why it goes to quarantine. ``valid_events`` and ``invalid_events`` split them; keys a
version does not declare are kept in ``extra_fields`` and counted by ``field_drift``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, StringType, StructField, StructType

from common import reasons
from common.contract import (
    FIELD_BY_NAME,
    FIELDS,
    KEY_FIELDS,
    REQUIRED,
    STATUSES,
    VERSION_BY_NUMBER,
    VERSIONS,
    Field,
)
from processor import avro_decoding
from processor.bronze import KAFKA_META
from processor.schema import EVENT_SCHEMA
from processor.times import since_floor_s, with_time

CONTRACT_COLUMNS = tuple(f.name for f in FIELDS)


CORRUPT = "_corrupt_record"


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
        (
            reasons.out_of_range("schema_version"),
            F.coalesce(version.isin(*VERSION_BY_NUMBER), F.lit(True)),
        )
    ]
    checks += [
        (reasons.out_of_range(f.name), _in_range(typed[f.name], f))
        for f in FIELDS
        if (f.min is not None or f.max is not None) and f.name != "schema_version"
    ]
    return checks + [(reasons.out_of_range("status"), typed["status"].isin(*STATUSES))]


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
    present = F.from_json(raw, MapType(StringType(), StringType()))  # type: ignore[arg-type]  # PySpark's annotation leaves out MapType, which from_json documents and takes
    version = typed["schema_version"]
    checks: list[Column] = [F.when(typed.isNull() | present.isNull(), F.lit(reasons.UNPARSABLE))]
    for f in FIELDS:
        given = _by_version(version, f, lambda key: present[key].isNotNull())
        if f.required:
            checks.append(F.when(~given, F.lit(reasons.missing_field(f.name))))
        checks.append(F.when(given & typed[f.name].isNull(), F.lit(reasons.wrong_type(f.name))))
    checks += [F.when(~passes, F.lit(reason)) for reason, passes in _range_checks(typed)]
    # Spark flagged the record yet every field check passed (e.g. a repeated key).
    checks.append(F.lit(reasons.UNPARSABLE))
    return F.coalesce(*checks)


def parse_events(bronze: DataFrame, avro_schemas: Mapping[int, str] | None = None) -> DataFrame:
    """Parse the raw payloads against the contract and say why a record is invalid.

    Every bronze row comes out once, with the contract's typed columns, the
    undeclared fields (``extra_fields``), the raw payload, the Kafka metadata and
    ``reason``: null for a valid event, else the first failed check as a code:
    ``unparsable``, ``missing_field:<f>``, ``wrong_type:<f>`` (a value JSON-typed
    otherwise than the contract says, e.g. a number sent as a string),
    ``out_of_range:<f>`` (``out_of_range:schema_version``: not a version of the contract);
    for Avro, ``unknown_schema_id`` and ``undecodable_avro`` (``processor.avro_decoding``).

    A JSON payload is read by its ``schema_version``: each field from the key that version
    sends it under (``common.contract.VERSIONS``), so every version lands in the same
    columns. Keys that its version does not declare are kept, as one JSON object in
    ``extra_fields`` (null when there are none), for valid events. A payload in
    Confluent's Avro framing is decoded by the writer schema its id names, from
    ``avro_schemas``; its fields land in the same columns, and pass the same checks.

    Valid records cost one typed JSON parse (or one Avro decode), a scan of their keys
    and a few comparisons; the detailed reason (a second, untyped parse and a check per
    field) is computed only for the records that fail.

    Args:
        bronze: Rows of the bronze table (``value`` is the raw payload).
        avro_schemas: Writer schema id -> the schema's JSON text (none: every framed
            payload is ``unknown_schema_id``).
    """
    schemas = dict(avro_schemas or {})
    value = F.col("value")
    raw_text = F.make_valid_utf8(value.cast("string"))
    keys = F.col("_keys")
    version = keys["schema_version"]
    avro_typed, avro_extras = avro_decoding.decoded_columns(value, schemas, _TYPE_OF, CORRUPT)
    framed = F.col("_avro")
    parsed = bronze.select(
        raw_text.alias("raw"),
        "value",
        avro_decoding.is_framed(value).alias("_avro"),
        *[F.col(c) for c in KAFKA_META],
    ).select(
        "raw",
        "value",
        "_avro",
        F.from_json(F.col("raw"), _JSON_SCHEMA, _JSON_OPTIONS).alias("_keys"),
        F.when(framed, avro_typed).alias("_a"),
        F.when(framed, avro_extras).alias("_ax"),
        *KAFKA_META,
    )
    # The JSON parse in the first condition, and first in it: Spark then parses once a
    # row (an expression only in a later branch, or on the right of an AND, is
    # conditional, and would be parsed again for every field read from it).
    json_struct = F.struct(
        *[_by_version(version, f, lambda k: keys[k]).alias(f.name) for f in FIELDS],
        keys[CORRUPT].alias(CORRUPT),
    )
    parsed = parsed.select(
        "raw",
        "value",
        "_avro",
        "_ax",
        F.when(keys.isNotNull() & ~framed, json_struct).when(framed, F.col("_a")).alias("_t"),
        *KAFKA_META,
    )
    typed = F.col("_t")
    valid = typed.isNotNull() & typed[CORRUPT].isNull()
    for name in REQUIRED:
        valid = valid & _required(typed, FIELD_BY_NAME[name])
    for _, passes in _range_checks(typed):
        valid = valid & passes
    extras = F.when(framed, F.col("_ax")).otherwise(
        _extra_fields(F.col("raw"), typed["schema_version"])
    )
    reason = F.when(framed, _framed_reason(value, typed, schemas)).otherwise(
        _reason(F.col("raw"), typed)
    )
    return parsed.select(
        *[typed[f.name].alias(f.name) for f in FIELDS],
        F.when(valid, extras).alias(EXTRA_FIELDS),
        F.when(valid, F.lit(None).cast("string")).otherwise(reason).alias("reason"),
        "raw",
        "value",
        *KAFKA_META,
    )


def _framed_reason(value: Column, typed: Column, schemas: Mapping[int, str]) -> Column:
    """Why a decoded Avro record failed: unreadable, else the first failed field check."""
    checks = [avro_decoding.avro_reason(value, typed, schemas)]
    checks += [
        F.when(~_required(typed, FIELD_BY_NAME[name]), F.lit(reasons.missing_field(name)))
        for name in REQUIRED
    ]
    checks += [F.when(~passes, F.lit(reason)) for reason, passes in _range_checks(typed)]
    return F.coalesce(*checks, F.lit(reasons.UNDECODABLE_AVRO))


def valid_events(parsed: DataFrame) -> DataFrame:
    """Rows of ``parse_events`` that passed every check."""
    return parsed.filter(F.col("reason").isNull())


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
    also gives the minute of the earliest valid event (``earliest_minute_s``, epoch
    seconds; null without one): the bound of the batch's MERGE into the 1-minute
    windows (``writes.merge``'s ``since``), and the schema ids of its Avro records that
    no known schema decodes (``unknown_schema_ids``).
    """
    valid = F.col("reason").isNull()
    return parsed.agg(
        F.count_if(valid).alias("valid"),
        F.count_if(~valid).alias("invalid"),
        F.count_if(valid & F.col(EXTRA_FIELDS).isNotNull()).alias("drifted"),
        since_floor_s(F.when(valid, F.col("event_time"))).alias("earliest_minute_s"),
        F.collect_set(
            F.when(
                F.col("reason") == reasons.UNKNOWN_SCHEMA_ID,
                avro_decoding.schema_id(F.col("value")),
            )
        ).alias("unknown_schema_ids"),
    )


def invalid_events(parsed: DataFrame) -> DataFrame:
    """Rows of ``parse_events`` that failed a check, shaped for the quarantine table.

    ``raw`` is the payload as text (invalid UTF-8 replaced); ``value`` its exact bytes.
    """
    return parsed.filter(F.col("reason").isNotNull()).select(
        "reason", "raw", "value", "event_id", "device_id", *KAFKA_META
    )


def payloads_of_invalid(rows: DataFrame) -> DataFrame:
    """Null the raw payload (``raw``, ``value``) of valid rows: only quarantine keeps it."""
    invalid = F.col("reason").isNotNull()
    return rows.withColumns({c: F.when(invalid, F.col(c)) for c in ("raw", "value")})
