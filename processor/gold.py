"""The gold layer's aggregates: pure DataFrame -> DataFrame steps, and the MERGEs' SQL.

Per device and minute (``device_minute_aggregates``, added into ``gold/device_1m`` by
``combine_device_minutes``), sliding windows per site and type rolled up from those
minutes, session windows per device, each device's latest status and the fleet summary.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from common.contract import (
    METRIC_NAMES,
)
from processor.times import seconds_between, with_time


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
