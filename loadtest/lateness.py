"""How late each reading reached Kafka, by the stream's own clock; how far silver has read.

Spark's watermark trails the newest event time the stream has seen: a reading's
*lateness* is that newest time when it reached Kafka, minus its own event time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import polars as pl

from common.lake import Query

DEFAULT_SLACK_S = 30.0


def _kafka_ms() -> pl.Expr:
    """A row's Kafka timestamp to the millisecond: Kafka's own precision, the clock's key."""
    return pl.col("kafka_timestamp").dt.truncate("1ms").alias("kafka_ms")


def stream_clock(parsed: pl.LazyFrame) -> pl.DataFrame:
    """The stream's clock as the watermark sees it: per Kafka millisecond, the newest event time.

    ``newest`` at a millisecond is the newest ``event_time`` among the bronze rows that
    reached Kafka in it or before it (rows of one millisecond count as arrived
    together); rows without an event time do not move it. One row per millisecond that
    had a reading, so an hour's run is a few million rows at most, whatever its rate.
    """
    per_ms = (
        parsed.group_by(_kafka_ms())
        .agg(pl.col("event_time").max())
        .collect(engine="streaming")
        .drop_nulls("kafka_ms")
        .sort("kafka_ms")
    )
    return per_ms.select("kafka_ms", pl.col("event_time").cum_max().forward_fill().alias("newest"))


def with_lateness(parsed: pl.LazyFrame, clock: pl.DataFrame) -> pl.LazyFrame:
    """Add ``lateness_s``: the stream's clock when the row reached Kafka, minus its event time."""
    return (
        parsed.with_columns(_kafka_ms())
        .join(clock.lazy(), on="kafka_ms", how="left")
        .with_columns(
            ((pl.col("newest") - pl.col("event_time")).dt.total_microseconds() / 1e6).alias(
                "lateness_s"
            )
        )
        .drop("newest", "kafka_ms")
    )


def lateness_slack(slack_s: float | None, metrics: pl.DataFrame) -> float:
    """Lateness past the watermark within which a drop and a keep are both right.

    ``slack_s`` if given; else the larger of 30 s and twice the longest gap between
    silver's batches in ``ops/pipeline_metrics`` (the batches the watermark lags behind).
    """
    if slack_s is not None:
        return slack_s
    silver = metrics.filter(pl.col("query_name") == Query.SILVER).sort("timestamp")
    if silver.height < 2:
        return DEFAULT_SLACK_S
    gap = cast("int | None", silver["timestamp"].diff().dt.total_microseconds().max())
    return max(DEFAULT_SLACK_S, 2 * (gap or 0) / 1e6)


def silver_frontier(
    silver: pl.LazyFrame, quarantine: pl.LazyFrame, committed: Mapping[int, int]
) -> pl.DataFrame:
    """Per partition, the last offset silver's query has read (``read_to``).

    The last offset of its rows (silver's and the quarantine's), or the one before the
    offset its checkpoint says it committed reading up to, whichever is later.
    """
    seen = pl.concat(
        [
            silver.select(pl.col("partition").cast(pl.Int64), pl.col("offset").cast(pl.Int64)),
            quarantine.select(pl.col("partition").cast(pl.Int64), pl.col("offset").cast(pl.Int64)),
            pl.LazyFrame(
                {"partition": list(committed), "offset": [o - 1 for o in committed.values()]},
                schema={"partition": pl.Int64, "offset": pl.Int64},
            ),
        ]
    )
    return (
        seen.drop_nulls()
        .group_by("partition")
        .agg(pl.col("offset").max().alias("read_to"))
        .collect(engine="streaming")
    )
