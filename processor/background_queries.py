"""The background queries: each streams silver (or gold) into the tables it feeds.

``device_status`` (the latest reading per device, the fleet summary, the sliding
windows), ``gold_device_sessions``, ``alerts`` (the detector, ``processor.alerts``),
``alert_recoveries`` and ``alerts_rt``. They trigger every
``background_trigger_interval`` and take turns (``processor.queries.turn``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from common.lake import TABLES, Query, Table
from processor import alerts, gold, realtime, sources, writes
from processor.detector import DetectorConfig
from processor.queries import foreach_batch_stream, persisted, table_stream
from processor.settings import ProcessorSettings
from processor.times import since_floor_s

# A first start or a rebuild of alerts_rt reads the topic in batches of at most this many
# alerts (a few hundred bytes each).
ALERTS_RT_MAX_OFFSETS = 100_000


def detector_config(settings: ProcessorSettings) -> DetectorConfig:
    """The alert detector's tuning from the settings."""
    return DetectorConfig(
        span=settings.zscore_span, warmup=settings.zscore_warmup, z_threshold=settings.z_threshold
    )


def _silver(spark: SparkSession, s: ProcessorSettings) -> DataFrame:
    return sources.delta_stream(spark, s.lake.table(Table.SILVER_EVENTS))


def start_device_status(spark: SparkSession, s: ProcessorSettings) -> StreamingQuery:
    """Silver -> the newest reading per device, the fleet summary, the sliding windows.

    One read of silver for three tables: a MERGE adds the batch to each device's row
    (once per batch: ``gold.combine_device_status``), then ``gold/fleet_summary``
    is rewritten from ``device_status``'s row per device (``gold.fleet_summary``,
    ``writes.overwrite_once``), and every sliding window the batch's readings fall in is
    recomputed from ``gold/device_1m`` (``site_windows``).
    """
    at = s.lake.table

    def write(batch: DataFrame, batch_id: int, query_id: str) -> None:
        latest = gold.latest_status(batch)  # a row per device
        writes.merge(
            latest, at(Table.GOLD_DEVICE_STATUS), TABLES[Table.GOLD_DEVICE_STATUS].key,
            update=gold.combine_device_status(latest.columns),
            txn=(f"{query_id}:status", batch_id),
        )  # fmt: skip
        summary = gold.fleet_summary(
            sources.delta_table(batch.sparkSession, at(Table.GOLD_DEVICE_STATUS))
        )
        writes.overwrite_once(summary, at(Table.GOLD_FLEET_SUMMARY), f"{query_id}:fleet", batch_id)
        site_windows(batch, s)

    name = Query.DEVICE_STATUS
    return foreach_batch_stream(_silver(spark, s), write, s.lake.checkpoint(name), name, s)


def site_windows(silver: DataFrame, s: ProcessorSettings) -> None:
    """Recompute, from ``gold/device_1m``, the sliding windows ``silver``'s readings fall in.

    Silver's query commits a batch's minutes to device_1m before its rows to silver,
    so device_1m already holds every reading read here: each window is rewritten
    whole from the rows it then has (a replay rewrites the same or newer values), and
    the last batch to touch a window leaves it equal to the windows over all of silver.
    Only the minutes from the earliest such window on are read.
    """
    at = s.lake.table
    spark = silver.sparkSession
    length, slide = s.sliding_length, s.sliding_slide
    keys = gold.sliding_keys(silver, length, slide)
    since = keys.agg(since_floor_s(F.col("window_start"))).collect()[0][0]
    if since is None:
        return
    minutes = sources.delta_table(spark, at(Table.GOLD_DEVICE_1M)).where(
        F.col("window_start") >= F.timestamp_seconds(F.lit(since))
    )
    windows = gold.site_type_windows(minutes, length, slide)
    touched = windows.join(keys, ["window_start", "site", "device_type"], "left_semi")
    # Each window is replaced whole: a replayed batch needs no txn.
    writes.merge(
        touched,
        at(Table.GOLD_SITE_TYPE_WINDOWS),
        TABLES[Table.GOLD_SITE_TYPE_WINDOWS].key,
        since=("window_start", since),
    )


def _appended(df: DataFrame, table: Table, name: Query, s: ProcessorSettings) -> StreamingQuery:
    """A background query that appends its stream to ``table``, once per micro-batch."""
    return table_stream(df, s.lake.table(table), s.lake.checkpoint(name), name, s)


def start_device_sessions(spark: SparkSession, s: ProcessorSettings) -> StreamingQuery:
    """Silver -> connectivity sessions per device, appended once closed."""
    df = gold.device_sessions(_silver(spark, s), s.watermark, s.session_gap)
    return _appended(df, Table.GOLD_DEVICE_SESSIONS, Query.GOLD_DEVICE_SESSIONS, s)


def start_alerts(spark: SparkSession, s: ProcessorSettings) -> StreamingQuery:
    """Silver -> raised and cleared alerts, from each device's detector state, exactly once.

    The states are a table (``processor.alerts``): each batch reads its devices' states,
    writes its alerts and clearings, then its devices' new states, each write once per
    batch. The states go last, so that a batch replayed before them finds what it found
    the first time.
    """
    at = s.lake.table
    state_table, config = at(Table.STATE_ALERT_DETECTOR), detector_config(s)

    def write(batch: DataFrame, batch_id: int, query_id: str) -> None:
        states = sources.delta_table(batch.sparkSession, state_table)
        with persisted(alerts.detect_alerts(batch, states, config)) as detected:
            raised = alerts.raised_alerts(detected)
            writes.append_once(raised, at(Table.GOLD_ALERTS), f"{query_id}:alerts", batch_id)
            cleared = alerts.cleared_alerts(detected)
            writes.append_once(cleared, at(Table.GOLD_ALERT_CLEARS), f"{query_id}:clears", batch_id)
            writes.merge(
                alerts.new_states(detected), state_table,
                TABLES[Table.STATE_ALERT_DETECTOR].key, txn=(f"{query_id}:state", batch_id),
            )  # fmt: skip

    name = Query.ALERTS
    return foreach_batch_stream(_silver(spark, s), write, s.lake.checkpoint(name), name, s)


def start_alert_recoveries(spark: SparkSession, s: ProcessorSettings) -> StreamingQuery:
    """Alerts x clears -> time to recover (stream-stream left outer join), appended."""
    at = s.lake.table
    df = alerts.alert_recoveries(
        sources.delta_stream(spark, at(Table.GOLD_ALERTS)),
        sources.delta_stream(spark, at(Table.GOLD_ALERT_CLEARS)),
        s.watermark,
        s.recovery_window,
    )
    return _appended(df, Table.GOLD_ALERT_RECOVERIES, Query.ALERT_RECOVERIES, s)


def start_alerts_rt(spark: SparkSession, s: ProcessorSettings) -> StreamingQuery:
    """Alerts topic -> ``gold/alerts_rt``: each alert id once (an insert-only MERGE).

    The real-time query may send an alert twice (at-least-once); the MERGE keeps the
    first copy that landed, so the table holds each alert once however often the topic
    or this query replays it.
    """
    at = s.lake.table

    def write(batch: DataFrame, _batch_id: int, _query_id: str) -> None:
        landed = realtime.landed_alerts(batch)
        since = landed.agg(since_floor_s(F.col("event_time"))).collect()[0][0]
        writes.merge(
            landed,
            at(Table.GOLD_ALERTS_RT),
            TABLES[Table.GOLD_ALERTS_RT].key,
            since=("event_time", since),
            keep_existing=True,
        )

    name = Query.ALERTS_RT
    records = sources.kafka_stream(
        spark, s, topic=s.kafka.alerts_topic, max_offsets=ALERTS_RT_MAX_OFFSETS
    )
    return foreach_batch_stream(records, write, s.lake.checkpoint(name), name, s)
