"""Processing times stamped on a micro-batch, durations, and the bound of a batch's MERGE.

A processing time is joined in as data (``with_time``), never written into the plan as a
constant, so that a query's generated code is the same from one micro-batch to the next.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


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


# A MERGE's time bound is its batch's earliest time floored to this many seconds.
SINCE_GRANULE_S = 60


def since_floor_s(column: Column) -> Column:
    """An aggregate: ``column``'s earliest value floored to the minute, in epoch seconds.

    The ``since`` bound of a batch's MERGE (``processor.writes.merge``): only stored rows
    from then on are read. A table with a row per device and minute (a million devices:
    ten million rows an hour) is read from the batch's own minutes, not from the start of
    the hour (``bench/merge_bound.py``). The bound is a constant in the MERGE's plan, so
    its generated code is compiled again when the bound moves: at most once a minute,
    not once a micro-batch (see ``with_time``).
    """
    return F.floor(F.unix_seconds(F.min(column)) / SINCE_GRANULE_S) * SINCE_GRANULE_S
