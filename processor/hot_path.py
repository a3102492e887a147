"""The hot path's queries: bronze, and silver with its 1-minute gold windows.

Silver reads the source itself, beside bronze, and each micro-batch lands in silver, the
quarantine and ``gold/device_1m`` together (``write_silver_batch``), so an event reaches
gold in one micro-batch; with ``silver_input="bronze"`` it reads bronze instead, and
bronze is then the hot path. The frames come from ``processor.silver``, the writes from
``processor.writes``.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from common.lake import TABLES, Query, Table
from processor import bronze, gold, parsing, silver, sources, writer_schemas, writes
from processor.checkpoints import check_checkpoint_sources
from processor.device_dimension import CachedDimension
from processor.queries import foreach_batch_stream, persisted
from processor.settings import ProcessorSettings
from processor.silver import checked_rows, enriched_rows, quarantine_out, silver_out
from processor.writer_schemas import check_unknown_ids


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


def start_bronze(spark: SparkSession, s: ProcessorSettings) -> StreamingQuery:
    """Source -> bronze: the raw record and where it came from, stamped and appended once."""
    at = s.lake.table

    def write(batch: DataFrame, batch_id: int, query_id: str) -> None:
        writes.append_once(bronze.stamp_ingest(batch), at(Table.BRONZE_EVENTS), query_id, batch_id)

    name = Query.BRONZE
    return foreach_batch_stream(bronze_source(spark, s), write, s.lake.checkpoint(name), name, s)


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
    # Before any write: records of a schema registered since the start stop the batch.
    check_unknown_ids(settings.schema_registry, settings.kafka.topic, held.unknown_schema_ids)
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
            since=("window_start", held.earliest_minute_s),
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
    from_bronze = s.silver_reads_bronze()
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
        schemas = writer_schemas.load(s.schema_registry, s.kafka.topic)
        frame = checked_rows(raw, devices.frame, s.watermark, schemas)
        query = foreach_batch_stream(frame, write, s.lake.checkpoint(name), name, s)
    except BaseException:
        devices.release()
        raise
    devices.follow(query)
    return query
