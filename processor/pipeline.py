"""Which streaming queries run, in what order, and how they start together.

One function starts each streaming query (``QUERIES``: the hot path's in
``processor.hot_path``, the others in ``processor.background_queries``); each has its own
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

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from common.lake import TABLES, Query, Table, Tier
from processor import evolution
from processor.background_queries import (
    start_alert_recoveries,
    start_alerts,
    start_alerts_rt,
    start_device_sessions,
    start_device_status,
)
from processor.driver_jvm import went_away
from processor.hot_path import start_bronze, start_silver
from processor.lake_setup import prepare_lake
from processor.lifecycle import say
from processor.queries import tier_of
from processor.session import BACKGROUND_POOL, HOT_POOL, conf_held, is_remote
from processor.settings import ProcessorSettings
from processor.stopping import stop_queries
from processor.writer_schemas import NewWriterSchemasError

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


def stages(settings: ProcessorSettings) -> list[list[Query]]:
    """The queries to run, in groups in dependency order.

    A group reads only what earlier groups write. The hot path starts first (bronze
    before silver when silver reads it), then the other queries, each after the queries
    whose tables it streams (``common.lake.TABLES``). ``settings.queries``, when set,
    keeps only the queries it names (the others may run in another process, or not at
    all).
    """
    hot = [q for q in QUERIES if tier_of(q, settings) == Tier.HOT]
    rest = [q for q in QUERIES if q not in hot]
    wanted = settings.query_names()
    if settings.source != "kafka":  # the alerts topic is Kafka's
        wanted = [q for q in wanted if q != Query.ALERTS_RT]
    groups = [*_by_depth(hot, settings), *_by_depth(rest, settings)]
    chosen = [[q for q in group if q in wanted] for group in groups]
    return [group for group in chosen if group]


def _by_depth(queries: list[Query], settings: ProcessorSettings) -> list[list[Query]]:
    """``queries`` in groups: those that stream none of the others' tables, then the next."""

    def inputs(query: Query) -> list[Query]:
        return [
            spec.writer
            for table, spec in TABLES.items()
            if query in spec.streamed_by
            and spec.writer in queries
            # silver streams bronze only when it reads bronze
            and (table != Table.BRONZE_EVENTS or settings.silver_reads_bronze())
        ]

    def depth(query: Query) -> int:
        return 1 + max((depth(q) for q in inputs(query)), default=-1)

    depths = {q: depth(q) for q in queries}
    return [[q for q in queries if depths[q] == d] for d in sorted(set(depths.values()))]


NO_DATA_BATCHES_CONF = "spark.sql.streaming.noDataMicroBatches.enabled"


def stage_conf(query: Query, settings: ProcessorSettings) -> dict[str, str]:
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
    hot = tier_of(query, settings) == Tier.HOT
    partitions = settings.shuffle_partitions if hot else settings.background_shuffle_partitions
    conf = {"spark.sql.shuffle.partitions": str(partitions)}
    if query == Query.SILVER and settings.trigger == "processing_time":
        conf[NO_DATA_BATCHES_CONF] = "false"
    return conf


def start_stage(spark: SparkSession, query: Query, settings: ProcessorSettings) -> StreamingQuery:
    """Start one query in its scheduler pool, with its settings (``stage_conf``).

    The query's thread, and so every job of its micro-batches, inherits the pool. Through
    Spark Connect the server schedules the jobs (its pools are its own).
    """
    sc = None if is_remote(spark) else spark.sparkContext
    if sc is not None:
        hot = tier_of(query, settings) == Tier.HOT
        sc.setLocalProperty("spark.scheduler.pool", HOT_POOL if hot else BACKGROUND_POOL)
    try:
        with conf_held(spark, stage_conf(query, settings)):
            return QUERIES[query](spark, settings)
    finally:
        if sc is not None:
            sc.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]  # PySpark types value as str; None removes the property, as its docs say


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
        queries = [start_stage(spark, query, settings) for query in group]
        try:
            if not _await_stage(spark, queries, settings, should_stop):
                return False
        except Exception as exc:
            # A stop sent to every process of the run stops the driver's JVM too.
            if should_stop() and went_away(exc, "while the stage stopped"):
                return False
            raise
    return True


def _await_stage(
    spark: SparkSession,
    queries: list[StreamingQuery],
    settings: ProcessorSettings,
    should_stop: Callable[[], bool],
) -> bool:
    """Wait for a stage's queries to end; False when stopped first."""
    for i in range(len(queries)):
        while True:
            try:
                while not queries[i].awaitTermination(1):
                    if should_stop():
                        stop_queries(spark, queries)
                        return False
                break
            except StreamingQueryException:
                again = restarted_for_new_schemas(spark, queries[i], settings)
                if again is None:
                    raise
                queries[i] = again
    return True


def restarted_for_new_schemas(
    spark: SparkSession, query: StreamingQuery, settings: ProcessorSettings
) -> StreamingQuery | None:
    """Silver started again, if ``query`` is silver stopped by schemas registered since it began.

    Silver's plan decodes the schemas its subject held when it started; a batch with
    records of a later one stops before it writes (``writer_schemas.check_unknown_ids``),
    and runs again in the new query, which knows them.

    Returns:
        The new silver query; None when ``query`` runs, or stopped for another reason.
    """
    if query.isActive or query.name != Query.SILVER:
        return None
    exc = query.exception()
    if exc is None or NewWriterSchemasError.__name__ not in str(exc):
        return None
    say("silver restarts: its subject has schemas registered since it started")
    return start_stage(spark, Query.SILVER, settings)


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
        started = [start_stage(spark, query, settings) for query in group]
        queries += started
        deadline = time.monotonic() + first_batch_timeout_s
        while (
            time.monotonic() < deadline
            and not should_stop()
            and any(q.isActive and q.lastProgress is None for q in started)
        ):
            time.sleep(0.5)
    return queries
