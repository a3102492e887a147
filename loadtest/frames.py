"""The lake's tables as polars frames for ``verify``: UTC times, bronze's payloads read."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

UTC_US = pl.Datetime("us", "UTC")
EXAMPLES = 20  # listed ids per finding
EVENT_ID_RE = r'"event_id"\s*:\s*"([^"]*)"'
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%.fZ"
_VALUE_SEED = 7  # the hash that tells a bronze payload's copies from a different payload


def utc(df: pl.DataFrame, *cols: str) -> pl.DataFrame:
    """Timestamps as ``datetime[us, UTC]`` (naive ones are taken as UTC)."""
    return df.with_columns(utc_exprs(df.schema, cols)) if cols else df


def utc_exprs(schema: pl.Schema, cols: Sequence[str]) -> list[pl.Expr]:
    """The columns ``cols`` of a frame of ``schema`` as ``datetime[us, UTC]`` (naive: UTC)."""
    exprs = []
    for c in cols:
        dtype = schema[c]
        if isinstance(dtype, pl.Datetime) and dtype.time_zone is None:
            exprs.append(pl.col(c).dt.replace_time_zone("UTC").cast(UTC_US))
        else:
            exprs.append(pl.col(c).cast(UTC_US))
    return exprs


def _lossy_text(values: pl.Series) -> pl.Series:
    """Binary payloads as text; a batch with invalid UTF-8 is decoded with replacements."""
    if values.dtype == pl.String:
        return values
    try:
        return values.cast(pl.String)
    except pl.exceptions.ComputeError:
        return pl.Series(
            values.name,
            [None if v is None else v.decode("utf-8", "replace") for v in values.to_list()],
            dtype=pl.String,
        )


def as_text(column: str) -> pl.Expr:
    """A binary ``column`` as text (invalid UTF-8 replaced)."""
    return pl.col(column).map_batches(_lossy_text, return_dtype=pl.String, is_elementwise=True)


def parse_bronze(bronze: pl.LazyFrame) -> pl.LazyFrame:
    """Bronze rows with what identifies them read from ``value``.

    Returns:
        ``partition``, ``offset``, ``kafka_timestamp``, ``ingest_time``, ``event_id``
        (the first ``"event_id": "..."`` in the text, valid JSON or not),
        ``event_time`` (null unless the payload is JSON with a readable one: a payload
        Spark cannot parse does not move its watermark) and ``value_hash`` (a 64-bit
        hash of the raw bytes: copies of one message have the same).
    """
    schema = bronze.collect_schema()
    t = pl.col("text")
    return bronze.with_columns(
        as_text("value").alias("text"), *utc_exprs(schema, ("kafka_timestamp", "ingest_time"))
    ).select(
        pl.col("partition").cast(pl.Int64),
        pl.col("offset").cast(pl.Int64),
        "kafka_timestamp",
        "ingest_time",
        t.str.extract(EVENT_ID_RE, 1).alias("event_id"),
        t.str.json_path_match("$.event_time")
        .str.to_datetime(_TIME_FORMAT, time_zone="UTC", strict=False)
        .cast(UTC_US)
        .alias("event_time"),
        pl.col("value").hash(_VALUE_SEED).alias("value_hash"),
    )


PARSED_SCHEMA = pl.Schema(
    {"partition": pl.Int64(), "offset": pl.Int64(), "kafka_timestamp": UTC_US,
     "ingest_time": UTC_US, "event_id": pl.String(), "event_time": UTC_US,
     "value_hash": pl.UInt64()}
)  # fmt: skip


def first_examples(df: pl.DataFrame, cols: list[str]) -> list[dict[str, Any]]:
    """The first ``EXAMPLES`` rows of ``df``'s ``cols``, as a finding lists them."""
    return df.select(cols).head(EXAMPLES).to_dicts()
