"""Seconds from a reading's event time to Kafka, bronze, silver and gold: percentiles."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import polars as pl

from common.stats import sorted_percentiles
from loadtest.frames import UTC_US, utc
from loadtest.truth import Truth

STAGES = ("kafka", "bronze", "silver", "gold")
LATENCY_SCHEMA = pl.Schema(dict.fromkeys(STAGES, pl.Float64))


def latency_summary(values: pl.Series) -> dict[str, float]:
    """Nearest-rank percentiles (``common.stats.percentiles``) plus max and count.

    The sorted column is read in place: a Python list of its values would take about
    seven times its memory.
    """
    v = values.drop_nulls().sort()
    if v.is_empty():
        return {"count": 0}
    ranked = {k: round(float(x), 3) for k, x in sorted_percentiles(v).items()}
    return {"count": v.len(), **ranked, "max": round(float(v[-1]), 3)}


def latency_rows(
    skewed: list[str],
    expected: pl.DataFrame,
    silver: pl.DataFrame,
    bronze: pl.DataFrame,
    exclude: pl.DataFrame,
    gold_commits: pl.DataFrame | None,
    since: datetime | None,
) -> pl.DataFrame:
    """Each measured event's seconds from event time to Kafka, bronze, silver and gold.

    An event is in bronze at the ``ingest_time`` of its bronze row (matched by partition
    and offset), and in gold from the first ``gold/device_1m`` MERGE commit at or after
    its ``processed_time``: the start of the silver batch that also added it to gold.
    """
    rows = (
        silver.join(expected.select("event_id"), on="event_id", how="semi")
        .join(exclude, on="event_id", how="anti")
        .filter(~pl.col("device_id").is_in(skewed))
        .unique("event_id", keep="first")
    )
    if since is not None:
        rows = rows.filter(pl.col("event_time") >= since)
    # Silver may read the source itself, beside bronze: bronze's own stamp counts.
    key = ["partition", "offset"]
    stamps = bronze.select(*key, pl.col("ingest_time").alias("bronze_time")).unique(key)
    rows = rows.with_columns(pl.col(key).cast(pl.Int64)).join(stamps, on=key, how="left")
    rows = rows.sort("processed_time")
    if gold_commits is None or gold_commits.is_empty():
        rows = rows.with_columns(pl.lit(None, dtype=UTC_US).alias("gold_time"))
    else:
        rows = rows.join_asof(
            utc(gold_commits, "committed").select(pl.col("committed").alias("gold_time")),
            left_on="processed_time",
            right_on="gold_time",
            strategy="forward",
        )

    def secs(later: str) -> pl.Expr:
        return (pl.col(later) - pl.col("event_time")).dt.total_microseconds() / 1e6

    return rows.select(
        secs("kafka_timestamp").alias("kafka"),
        secs("bronze_time").alias("bronze"),
        secs("processed_time").alias("silver"),
        secs("gold_time").alias("gold"),
    )


def check_latency(
    truth: Truth,
    rows: pl.LazyFrame,
    since: datetime | None = None,
    gold_measured: bool = True,
) -> dict[str, Any]:
    """Percentiles of event time to each stage (``loadtest.verify`` says how each is read).

    Args:
        truth: The manifest (latency means something on the wall clock only).
        rows: ``latency_rows`` of every bucket (one float column per stage).
        since: Only events whose ``event_time`` is at or after it were measured.
        gold_measured: Whether gold's commits were there to go by.
    """
    if not truth.wall_clock:
        return {"events": 0, "stages": {}, "note": "not measured: the run's event times were "
                "simulated (start_time or replay), not the wall clock"}  # fmt: skip
    excluded = "injected late and out-of-order readings, clock-skewed devices"
    if since is not None:
        excluded += f", readings created before {since.isoformat()} (warm-up)"
    events = int(rows.select(pl.len()).collect(engine="streaming").item())
    if events == 0:
        return {"events": 0, "stages": {}, "note": "no events in silver to measure"}
    # One stage at a time: a hundred million readings are 800 MB a column.
    stages = {
        s: latency_summary(rows.select(s).collect(engine="streaming").to_series()) for s in STAGES
    }
    not_in_gold = int(rows.select(pl.col("gold").null_count()).collect().item())
    note = (
        "gold: the first gold/device_1m MERGE commit at or after the start of the silver "
        "batch that wrote the event (which adds it to gold too)"
        if gold_measured
        else "gold: not measured (no gold/device_1m commits to go by)"
    )
    return {
        "events": events,
        "excluded": excluded,
        "stages": stages,
        "not_in_gold": not_in_gold,
        "note": note,
    }
