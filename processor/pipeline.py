"""Wire sources, transforms and sinks into the streaming queries.

One function starts each streaming query (``QUERIES``); each query has its own
checkpoint under ``<lake>/_checkpoints/<name>`` and writes, in ``foreachBatch`` with
Spark's Delta writer, once per micro-batch (``processor.writes``), the tables that
``common.lake.TABLES`` says it writes (docs/tables.md says how each is written).

The hot path is the silver query alone (``trigger_interval``): it reads the source
itself, beside bronze, and each micro-batch lands in silver and in the 1-minute
gold windows together, so an event reaches gold in one micro-batch
(``silver_input="bronze"`` reads bronze instead, e.g. to rebuild silver from
bronze's history; bronze is then the hot path). Bronze runs on
``bronze_trigger_interval``, and every other query on ``background_trigger_interval``,
taking turns.

The real-time alerts (``realtime_alerts``, events topic -> alerts topic) run in
their own Spark application: see ``processor.realtime_app``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from common.lake import TABLES, Query, Table
from processor import alerts, bronze, evolution, gold, parsing, realtime, silver, sources, writes
from processor.checkpoints import check_checkpoint_sources
from processor.detector import DetectorConfig
from processor.device_dimension import CachedDimension
from processor.lake_setup import prepare_lake
from processor.queries import Tier, foreach_batch_stream, persisted, table_stream
from processor.session import BACKGROUND_POOL, HOT_POOL, is_remote
from processor.settings import ProcessorSettings
from processor.silver import checked_rows, enriched_rows, quarantine_out, silver_out
from processor.stopping import stop_queries

# A first start or a rebuild of alerts_rt reads the topic in batches of at most this many
# alerts (a few hundred bytes each).
ALERTS_RT_MAX_OFFSETS = 100_000


def detector_config(settings: ProcessorSettings) -> DetectorConfig:
    """The alert detector's tuning from the settings."""
    return DetectorConfig(
        span=settings.zscore_span, warmup=settings.zscore_warmup, z_threshold=settings.z_threshold
    )


def bronze_source(spark: SparkSession, settings: ProcessorSettings) -> DataFrame:
    """The raw stream, shaped as bronze rows (``ingest_time`` null), from the configured source."""
    if settings.source == "files":
        if not settings.landing_dir:
            raise ValueError("source=files needs IOT_PROCESSOR_LANDING_DIR")
        return bronze.lines_to_bronze(
            sources.lines_stream(spark, settings.landing_dir, settings.max_files_per_trigger)
        )
    if settings.source == "rate":
        return bronze.rate_to_bronze(
            sources.rate_stream(spark, settings.rate_rows_per_second), settings.fleet_size
        )
    return bronze.to_bronze(sources.kafka_stream(spark, settings))


def silver_reads_bronze(settings: ProcessorSettings) -> bool:
    """Whether silver reads the bronze table rather than the source itself.

    The rate source is not replayable (its timestamps are the clock's), so two
    queries reading it would disagree: with it, silver always reads bronze.
    """
    return settings.silver_input == "bronze" or settings.source == "rate"


def bronze_tier(settings: ProcessorSettings) -> Tier:
    """Bronze's trigger tier: the hot path when silver reads it, else its own."""
    return "hot" if silver_reads_bronze(settings) else "bronze"


def start_bronze(spark: SparkSession, s: ProcessorSettings) -> StreamingQuery:
    """Source -> bronze: the raw record and where it came from, stamped and appended once."""
    at = s.lake.table

    def write(batch: DataFrame, batch_id: int, query_id: str) -> None:
        writes.append_once(bronze.stamp_ingest(batch), at(Table.BRONZE_EVENTS), query_id, batch_id)

    name = Query.BRONZE
    return foreach_batch_stream(
        bronze_source(spark, s), write, s.lake.checkpoint(name), name, s, tier=bronze_tier(s)
    )


def write_silver_batch(
    batch: DataFrame, batch_id: int, query_id: str, settings: ProcessorSettings
) -> None:
    """Write one hot micro-batch of ``silver_frame``'s rows exactly once.

    Its minutes go to ``gold/device_1m`` first (a MERGE once per batch), then its rows
    to silver, quarantine and ``ops/schema_drift``, whichever it has rows for, as
    concurrent appends.

    Args:
        batch: The micro-batch, cached (it is read once per write).
        batch_id: The micro-batch id.
        query_id: The writing query's id (the commits' app id).
        settings: Processor settings (the watermark, the lake).
    """
    at = settings.lake.table
    # One job (no LIMIT: see writes.has_rows) says which writes the batch has rows for.
    held = parsing.batch_contents(batch).collect()[0]
    events = silver.silver_rows(batch)
    appends: list[Callable[[], object]] = []
    if held.valid:
        good = silver_out(batch)  # stamped now: processed_time is before gold's commit
        # The minutes first: whoever reads a row of silver finds it in device_1m
        # (device_status rolls the sliding windows up from there).
        writes.merge(
            gold.device_minute_aggregates(events, settings.watermark),
            at(Table.GOLD_DEVICE_1M),
            TABLES[Table.GOLD_DEVICE_1M].key,
            since=("window_start", held.earliest_hour_s),
            update=gold.combine_device_minutes(),
            txn=(f"{query_id}:device_1m", batch_id),
            nonempty=True,
        )
        appends.append(
            lambda: writes.append_once(
                good,
                at(Table.SILVER_EVENTS),
                f"{query_id}:silver",
                batch_id,
                nonempty=True,
            )
        )
    if held.invalid:
        bad = quarantine_out(batch)
        appends.append(
            lambda: writes.append_once(
                bad,
                at(Table.SILVER_QUARANTINE),
                f"{query_id}:quarantine",
                batch_id,
                nonempty=True,
            )
        )
    if held.drifted:
        drifted = parsing.field_drift(events)
        appends.append(
            lambda: writes.append_once(
                drifted,
                at(Table.OPS_SCHEMA_DRIFT),
                f"{query_id}:drift",
                batch_id,
                nonempty=True,
            )
        )
    writes.run_concurrently(batch.sparkSession, *appends)


def start_silver(spark: SparkSession, s: ProcessorSettings) -> StreamingQuery:
    """Source (or bronze) -> silver, quarantine and the 1-minute windows, exactly once.

    The batch's valid events, aggregated per device and minute, are added to
    ``gold/device_1m`` by a MERGE applied once per batch (``writes.merge``), then
    appended to silver. A batch whose events carry undeclared fields also appends what
    it saw to ``ops/schema_drift`` (``parsing.field_drift``). The stream checks the
    device ids against the dimension; each micro-batch joins the dimension's rows of its
    own devices (``enriched_rows``). Both read a cached copy, read again when the table
    changes (``CachedDimension``).
    """
    at = s.lake.table
    from_bronze = silver_reads_bronze(s)
    # Silver read its source twice before it read it once: such a checkpoint cannot resume.
    name = Query.SILVER
    check_checkpoint_sources(s.lake.checkpoint(name), name, expected=1)
    raw = (
        sources.delta_stream(spark, at(Table.BRONZE_EVENTS))
        if from_bronze
        else bronze_source(spark, s)
    )
    devices = CachedDimension(spark, at(Table.DIM_DEVICES), s.lake.storage_options())

    def write(batch: DataFrame, batch_id: int, query_id: str) -> None:
        # The dimension read in the batch's session: Spark's cache manager substitutes
        # the cached copy (CachedDimension), current as of its last check.
        dimension = sources.delta_table(batch.sparkSession, at(Table.DIM_DEVICES))
        with persisted(enriched_rows(batch, dimension)) as rows:
            write_silver_batch(rows, batch_id, query_id, s)

    try:
        frame = checked_rows(raw, devices.frame, s.watermark)
        query = foreach_batch_stream(frame, write, s.lake.checkpoint(name), name, s)
    except BaseException:
        devices.release()
        raise
    devices.follow(query)
    return query


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
    return foreach_batch_stream(
        _silver(spark, s), write, s.lake.checkpoint(name), name, s, tier="background"
    )


def site_windows(silver: DataFrame, s: ProcessorSettings) -> None:
    """Recompute, from ``gold/device_1m``, the sliding windows ``silver``'s readings fall in.

    Silver's query commits a batch's minutes to device_1m before its rows to silver,
    so device_1m already holds every reading read here: each window is rewritten
    whole from the rows it then has (a replay rewrites the same or newer values), and
    the last batch to touch a window leaves it equal to the windows over all of silver.
    Only the minutes from the hour of the earliest such window on are read.
    """
    at = s.lake.table
    spark = silver.sparkSession
    length, slide = s.sliding_length, s.sliding_slide
    keys = gold.sliding_keys(silver, length, slide)
    since = keys.agg(writes.hour_floor_s("window_start")).collect()[0][0]
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
        at(Table.GOLD_SITE_TYPE_10M),
        TABLES[Table.GOLD_SITE_TYPE_10M].key,
        since=("window_start", since),
    )


def start_device_sessions(spark: SparkSession, s: ProcessorSettings) -> StreamingQuery:
    """Silver -> connectivity sessions per device, appended once closed."""
    at = s.lake.table
    df = gold.device_sessions(_silver(spark, s), s.watermark, s.session_gap)
    name = Query.GOLD_DEVICE_SESSIONS
    return table_stream(
        df,
        at(Table.GOLD_DEVICE_SESSIONS),
        s.lake.checkpoint(name),
        name,
        s,
        tier="background",
    )


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
    return foreach_batch_stream(
        _silver(spark, s), write, s.lake.checkpoint(name), name, s, tier="background"
    )


def start_alert_recoveries(spark: SparkSession, s: ProcessorSettings) -> StreamingQuery:
    """Alerts x clears -> time to recover (stream-stream left outer join), appended."""
    at = s.lake.table
    df = alerts.alert_recoveries(
        sources.delta_stream(spark, at(Table.GOLD_ALERTS)),
        sources.delta_stream(spark, at(Table.GOLD_ALERT_CLEARS)),
        s.watermark,
        s.recovery_window,
    )
    name = Query.ALERT_RECOVERIES
    return table_stream(
        df,
        at(Table.GOLD_ALERT_RECOVERIES),
        s.lake.checkpoint(name),
        name,
        s,
        tier="background",
    )


def start_alerts_rt(spark: SparkSession, s: ProcessorSettings) -> StreamingQuery:
    """Alerts topic -> ``gold/alerts_rt``: each alert id once (an insert-only MERGE).

    The real-time query may send an alert twice (at-least-once); the MERGE keeps the
    first copy that landed, so the table holds each alert once however often the topic
    or this query replays it.
    """
    at = s.lake.table

    def write(batch: DataFrame, _batch_id: int, _query_id: str) -> None:
        landed = realtime.landed_alerts(batch)
        since = landed.agg(writes.hour_floor_s("event_time")).collect()[0][0]
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
    return foreach_batch_stream(records, write, s.lake.checkpoint(name), name, s, tier="background")


Stage = Callable[[SparkSession, ProcessorSettings], StreamingQuery]
# What starts each query (``common.lake.Query`` names them all).
QUERIES: dict[Query, Stage] = {
    Query.BRONZE: start_bronze,
    Query.SILVER: start_silver,
    Query.DEVICE_STATUS: start_device_status,
    Query.GOLD_DEVICE_SESSIONS: start_device_sessions,
    Query.ALERTS: start_alerts,
    Query.ALERT_RECOVERIES: start_alert_recoveries,
    Query.ALERTS_RT: start_alerts_rt,
}
_BACKGROUND = (
    Query.DEVICE_STATUS, Query.GOLD_DEVICE_SESSIONS, Query.ALERTS, Query.ALERTS_RT,
)  # fmt: skip


def stages(settings: ProcessorSettings) -> list[list[Stage]]:
    """The queries to run, in groups in dependency order.

    A group reads only what earlier groups write. The hot path starts first; bronze
    is off it unless silver reads bronze. ``settings.queries``, when set, keeps only
    the queries it names (the others may run in another process, or not at all).
    """
    if silver_reads_bronze(settings):
        groups = [[Query.BRONZE], [Query.SILVER], [*_BACKGROUND]]
    else:
        groups = [[Query.SILVER], [Query.BRONZE, *_BACKGROUND]]
    groups.append([Query.ALERT_RECOVERIES])
    wanted = settings.query_names()
    if settings.source != "kafka":  # the alerts topic is Kafka's
        wanted = [q for q in wanted if q != Query.ALERTS_RT]
    chosen = [[QUERIES[q] for q in group if q in wanted] for group in groups]
    return [group for group in chosen if group]


NO_DATA_BATCHES_CONF = "spark.sql.streaming.noDataMicroBatches.enabled"


def stage_conf(stage: Stage, settings: ProcessorSettings) -> dict[str, str]:
    """Session settings a query starts with (a query copies the session's when it starts).

    * Shuffle partitions: a new checkpoint keeps the shuffle (state) partitions it
      starts with; the hot path's, or the background queries' fewer.
    * No-data micro-batches: after a batch moves the watermark, Spark runs one more
      batch with no rows, to evict state and emit windows that closed. Silver's only
      state is the dedup's keys, evicted as well by the next batch with rows, and it
      emits nothing then: on a continuous trigger such a batch is a second batch (Delta
      commits and all) for every one with rows, so silver runs none. Spark judges a
      row late by the watermark before the latest (the latest only evicts); with no
      empty batch between two batches with rows, the second judges by the one before
      the first's move, so it may keep an event up to one batch's move later than it
      would have (kept, it counts everywhere, gold included). ``available_now`` runs
      keep them, so that the next run judges by the latest watermark; so do the
      other queries: they close windows.
    """
    hot = is_hot(stage, settings)
    partitions = settings.shuffle_partitions if hot else settings.background_shuffle_partitions
    conf = {"spark.sql.shuffle.partitions": str(partitions)}
    if stage is start_silver and settings.trigger == "processing_time":
        conf[NO_DATA_BATCHES_CONF] = "false"
    return conf


def is_hot(stage: Stage, settings: ProcessorSettings) -> bool:
    """Whether a query is on the hot path (silver, and bronze when silver reads it)."""
    return stage is start_silver or (stage is start_bronze and bronze_tier(settings) == "hot")


def start_stage(spark: SparkSession, stage: Stage, settings: ProcessorSettings) -> StreamingQuery:
    """Start one query in its scheduler pool, with its settings (``stage_conf``).

    The query's thread, and so every job of its micro-batches, inherits the pool. Through
    Spark Connect the server schedules the jobs (its pools are its own).
    """
    sc = None if is_remote(spark) else spark.sparkContext
    if sc is not None:
        sc.setLocalProperty(
            "spark.scheduler.pool", HOT_POOL if is_hot(stage, settings) else BACKGROUND_POOL
        )
    conf = stage_conf(stage, settings)
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        return stage(spark, settings)
    finally:
        if sc is not None:
            sc.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def rebuild(
    spark: SparkSession,
    settings: ProcessorSettings,
    queries: list[str],
    should_stop: Callable[[], bool] = lambda: False,
) -> bool:
    """Recompute queries' tables from their input, with new checkpoints, then return.

    Each query (and each query that streams from its tables) is reset
    (``evolution.reset_query``) in ``prepare_lake``, with any query that a schema
    change made stale, and run ``available_now``.

    Returns:
        Whether every query ran to the end.
    """
    chosen = evolution.with_readers(queries)
    once = settings.model_copy(update={"trigger": "available_now", "queries": ",".join(chosen)})
    return run_available_now(spark, once, should_stop, requested=chosen)


def run_available_now(
    spark: SparkSession,
    settings: ProcessorSettings,
    should_stop: Callable[[], bool] = lambda: False,
    requested: Sequence[str] = (),
) -> bool:
    """Process everything available, stage after stage, then return.

    Args:
        spark: The session.
        settings: Processor settings.
        should_stop: Polled every second; when true, stop the running queries (their
            batches run again next time) and return.
        requested: Queries to reset before they start (``rebuild``).

    Returns:
        Whether every stage ran to the end.
    """
    prepare_lake(spark, settings, requested)
    for group in stages(settings):
        queries = [start_stage(spark, stage, settings) for stage in group]
        for query in queries:
            while not query.awaitTermination(1):
                if should_stop():
                    stop_queries(spark, queries)
                    return False
    return True


def start_all(
    spark: SparkSession,
    settings: ProcessorSettings,
    first_batch_timeout_s: float = 300.0,
    should_stop: Callable[[], bool] = lambda: False,
    *,
    prepare: bool = True,
) -> list[StreamingQuery]:
    """Start every stage as a continuous query (processing-time trigger).

    Groups start one after the other, each once the previous group has finished its
    first micro-batch: first batches are the expensive ones (planning, state stores,
    Python workers), and on a small machine running them all at once delays the
    first gold rows by minutes.

    Args:
        spark: The session.
        settings: Processor settings.
        first_batch_timeout_s: Longest wait for a group's first batches.
        should_stop: Polled while waiting; when true, return the queries started so far.
        prepare: Create or evolve the tables first (``prepare_lake``); False when the
            caller did.
    """
    if prepare:
        prepare_lake(spark, settings)
    queries: list[StreamingQuery] = []
    for group in stages(settings):
        if should_stop():
            break
        started = [start_stage(spark, stage, settings) for stage in group]
        queries += started
        deadline = time.monotonic() + first_batch_timeout_s
        while (
            time.monotonic() < deadline
            and not should_stop()
            and any(q.isActive and q.lastProgress is None for q in started)
        ):
            time.sleep(0.5)
    return queries
