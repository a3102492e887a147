"""Gold tables recomputed over all of silver in one batch: what the streams must equal."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from common.contract import METRIC_NAMES
from common.lake import Table
from processor import gold
from processor.settings import ProcessorSettings


def sliding_over_silver(silver: DataFrame, length: str, slide: str) -> DataFrame:
    """Every sliding window per site and type over silver's readings, straight from them."""
    return (
        silver.groupBy(F.window("event_time", length, slide), "site", "device_type")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.count_distinct("device_id").alias("devices"),
            *[F.avg(m).alias(f"{m}_avg") for m in METRIC_NAMES],
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "site",
            "device_type",
            "events",
            "devices",
            *[f"{m}_avg" for m in METRIC_NAMES],
        )
    )


def background_gold(silver: DataFrame, settings: ProcessorSettings) -> dict[Table, DataFrame]:
    """device_status's three tables (status, fleet summary, sliding windows) over ``silver``."""
    return {
        Table.GOLD_SITE_TYPE_WINDOWS: sliding_over_silver(
            silver, settings.sliding_length, settings.sliding_slide
        ),
        Table.GOLD_FLEET_SUMMARY: silver.groupBy("device_type").agg(
            F.count_distinct("device_id").alias("devices"),
            F.count(F.lit(1)).alias("events"),
            F.max("event_time").alias("last_event_time"),
        ),
        Table.GOLD_DEVICE_STATUS: gold.latest_status(silver).drop("updated_time"),
    }
