"""Wire sources, transforms and sinks into the streaming queries.

Queries (each with its own checkpoint under ``<lake>/_checkpoints/<name>``):

=====================  ==========================================  ======================
query                  reads -> writes                             how
=====================  ==========================================  ======================
bronze                 Kafka / files / rate -> bronze/events       Delta sink, append
silver                 bronze -> silver/events, silver/quarantine, foreachBatch: txn appends
                       gold/device_status                          + MERGE (latest status)
gold_device_1m         silver -> gold/device_1m                    update mode + MERGE
gold_site_type_10m     silver -> gold/site_type_10m                append (final windows)
gold_device_sessions   silver -> gold/device_sessions              append (final sessions)
alerts                 silver -> gold/alerts, gold/alert_clears    stateful detector, txn appends
alert_recoveries       alerts x clears -> gold/alert_recoveries    stream-stream join, append
fleet_summary          silver -> gold/fleet_summary                complete mode
=====================  ==========================================  ======================
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, fields

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from common.fleet import build_fleet
from common.settings import LakeSettings
from processor import sinks, sources, transforms
from processor.detector import DetectorConfig
from processor.metrics import METRICS_SCHEMA
from processor.schema import DEVICE_SCHEMA
from processor.settings import ProcessorSettings

KAFKA_SOURCE_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
KEYS = {
    "gold_device_1m": ("device_id", "window_start"),
    "device_status": ("device_id",),
}


@dataclass(frozen=True)
class Tables:
    """Locations of every table under the lake root."""

    bronze: str
    silver: str
    quarantine: str
    devices: str
    gold_device_1m: str
    site_type_10m: str
    device_sessions: str
    alerts: str
    alert_clears: str
    alert_recoveries: str
    device_status: str
    fleet_summary: str
    pipeline_metrics: str

    @classmethod
    def under(cls, lake: LakeSettings) -> Tables:
        """The standard layout under ``lake.root`` (see docs/tables.md)."""
        return cls(
            bronze=lake.table("bronze/events"),
            silver=lake.table("silver/events"),
            quarantine=lake.table("silver/quarantine"),
            devices=lake.table("dim/devices"),
            gold_device_1m=lake.table("gold/device_1m"),
            site_type_10m=lake.table("gold/site_type_10m"),
            device_sessions=lake.table("gold/device_sessions"),
            alerts=lake.table("gold/alerts"),
            alert_clears=lake.table("gold/alert_clears"),
            alert_recoveries=lake.table("gold/alert_recoveries"),
            device_status=lake.table("gold/device_status"),
            fleet_summary=lake.table("gold/fleet_summary"),
            pipeline_metrics=lake.table("ops/pipeline_metrics"),
        )

    def all(self) -> dict[str, str]:
        """Every table by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def devices_frame(spark: SparkSession, settings: ProcessorSettings) -> DataFrame:
    """The device dimension built from the seeded fleet (as the producer builds it)."""
    rows = [d.as_row() for d in build_fleet(settings.fleet_size, settings.seed)]
    return spark.createDataFrame(rows, DEVICE_SCHEMA)


def write_devices(spark: SparkSession, settings: ProcessorSettings, path: str) -> None:
    """(Re)write the device dimension; running streams see it at their next batch."""
    devices_frame(spark, settings).write.format("delta").mode("overwrite").option(
        "overwriteSchema", "true"
    ).save(path)


def silver_frame(bronze: DataFrame, devices: DataFrame, watermark: str) -> DataFrame:
    """Bronze rows -> parsed, deduplicated, enriched rows, each with a ``reason``.

    Valid events are deduplicated within the watermark and joined with the
    device dimension; invalid ones pass through so the writer can quarantine them.
    """
    parsed = transforms.parse_events(bronze)
    valid = transforms.enrich(
        transforms.deduplicate(transforms.valid_events(parsed), watermark), devices
    )
    invalid = parsed.filter(parsed["reason"].isNotNull())
    # Only rows bound for quarantine (here: unknown devices) keep their payload.
    audited = transforms.with_audit(valid)
    for payload in ("raw", "value"):
        audited = audited.withColumn(payload, F.when(F.col("reason").isNotNull(), F.col(payload)))
    return audited.unionByName(invalid, allowMissingColumns=True)


def detector_config(settings: ProcessorSettings) -> DetectorConfig:
    """The alert detector's tuning from the settings."""
    return DetectorConfig(
        span=settings.zscore_span, warmup=settings.zscore_warmup, z_threshold=settings.z_threshold
    )


def ensure_tables(spark: SparkSession, settings: ProcessorSettings, tables: Tables) -> None:
    """Create every table empty, with its schema, so that downstream streams can start.

    The schemas come from running the transforms on empty frames, so they cannot
    drift from what the queries write.
    """
    if not sinks.DeltaTable.isDeltaTable(spark, tables.devices):
        write_devices(spark, settings, tables.devices)
    bronze = transforms.to_bronze(spark.createDataFrame([], KAFKA_SOURCE_SCHEMA))
    silver_all = silver_frame(bronze, sources.delta_table(spark, tables.devices), "1 minute")
    silver = transforms.silver_rows(silver_all)
    transitions = spark.createDataFrame([], transforms.ALERT_TRANSITIONS_SCHEMA)
    alerts = transforms.raised_alerts(transitions)
    clears = transforms.cleared_alerts(transitions)
    s = settings
    empties = {
        tables.bronze: bronze,
        tables.silver: silver,
        tables.quarantine: transforms.invalid_events(silver_all),
        tables.device_status: transforms.latest_status(silver),
        tables.gold_device_1m: transforms.device_minute_aggregates(silver, "1 minute"),
        tables.site_type_10m: transforms.site_type_sliding(
            silver, "1 minute", s.sliding_length, s.sliding_slide
        ),
        tables.device_sessions: transforms.device_sessions(silver, "1 minute", s.session_gap),
        tables.alerts: alerts,
        tables.alert_clears: clears,
        tables.alert_recoveries: transforms.alert_recoveries(
            alerts, clears, "1 minute", s.recovery_window
        ),
        tables.fleet_summary: transforms.fleet_summary(silver),
        tables.pipeline_metrics: spark.createDataFrame([], METRICS_SCHEMA),
    }
    for path, empty in empties.items():
        sinks.ensure_table(spark, path, empty)


def bronze_source(spark: SparkSession, settings: ProcessorSettings) -> DataFrame:
    """The raw stream, shaped as bronze rows, from the configured source."""
    if settings.source == "files":
        if not settings.landing_dir:
            raise ValueError("source=files needs IOT_PROCESSOR_LANDING_DIR")
        return transforms.lines_to_bronze(
            sources.lines_stream(spark, settings.landing_dir, settings.max_files_per_trigger)
        )
    if settings.source == "rate":
        return transforms.rate_to_bronze(
            sources.rate_stream(spark, settings.rate_rows_per_second), settings.fleet_size
        )
    return transforms.to_bronze(sources.kafka_stream(spark, settings))


def start_bronze(spark: SparkSession, s: ProcessorSettings, t: Tables) -> StreamingQuery:
    """Source -> bronze: the raw record and where it came from, appended."""
    return sinks.delta_stream(
        bronze_source(spark, s), t.bronze, s.lake.checkpoint("bronze"), "bronze", s
    )


def start_silver(spark: SparkSession, s: ProcessorSettings, t: Tables) -> StreamingQuery:
    """Bronze -> silver, quarantine and latest device status, exactly once per batch."""
    frame = silver_frame(
        sources.delta_stream(spark, t.bronze), sources.delta_table(spark, t.devices), s.watermark
    )

    def write(batch: DataFrame, batch_id: int, query_id: str) -> None:
        good = transforms.silver_rows(batch)
        bad = transforms.invalid_events(batch)
        sinks.run_concurrently(
            lambda: sinks.idempotent_append(good, t.silver, f"{query_id}:silver", batch_id),
            lambda: sinks.idempotent_append(bad, t.quarantine, f"{query_id}:quarantine", batch_id),
            lambda: sinks.merge_latest(transforms.latest_status(good), t.device_status),
        )

    return sinks.foreach_batch_stream(frame, write, s.lake.checkpoint("silver"), "silver", s)


def _silver(spark: SparkSession, t: Tables) -> DataFrame:
    return sources.delta_stream(spark, t.silver)


def start_gold_device_1m(spark: SparkSession, s: ProcessorSettings, t: Tables) -> StreamingQuery:
    """Silver -> 1-minute device aggregates, upserted as windows fill (update + MERGE)."""
    aggregates = transforms.device_minute_aggregates(_silver(spark, t), s.watermark)

    def write(batch: DataFrame, _batch_id: int, _query_id: str) -> None:
        sinks.merge_batch(batch, t.gold_device_1m, KEYS["gold_device_1m"])

    name = "gold_device_1m"
    return sinks.foreach_batch_stream(
        aggregates, write, s.lake.checkpoint(name), name, s, output_mode="update"
    )


def start_site_type_10m(spark: SparkSession, s: ProcessorSettings, t: Tables) -> StreamingQuery:
    """Silver -> sliding windows per site and type, appended once final."""
    df = transforms.site_type_sliding(
        _silver(spark, t), s.watermark, s.sliding_length, s.sliding_slide
    )
    name = "gold_site_type_10m"
    return sinks.delta_stream(
        df, t.site_type_10m, s.lake.checkpoint(name), name, s, background=True
    )


def start_device_sessions(spark: SparkSession, s: ProcessorSettings, t: Tables) -> StreamingQuery:
    """Silver -> connectivity sessions per device, appended once closed."""
    df = transforms.device_sessions(_silver(spark, t), s.watermark, s.session_gap)
    name = "gold_device_sessions"
    return sinks.delta_stream(
        df, t.device_sessions, s.lake.checkpoint(name), name, s, background=True
    )


def start_alerts(spark: SparkSession, s: ProcessorSettings, t: Tables) -> StreamingQuery:
    """Silver -> raised and cleared alerts (stateful detector), exactly once per batch."""
    transitions = transforms.detect_alerts(_silver(spark, t), detector_config(s))

    def write(batch: DataFrame, batch_id: int, query_id: str) -> None:
        raised = transforms.raised_alerts(batch)
        sinks.idempotent_append(raised, t.alerts, f"{query_id}:alerts", batch_id)
        cleared = transforms.cleared_alerts(batch)
        sinks.idempotent_append(cleared, t.alert_clears, f"{query_id}:clears", batch_id)

    return sinks.foreach_batch_stream(
        transitions, write, s.lake.checkpoint("alerts"), "alerts", s, background=True
    )


def start_alert_recoveries(spark: SparkSession, s: ProcessorSettings, t: Tables) -> StreamingQuery:
    """Alerts x clears -> time to recover (stream-stream left outer join), appended."""
    df = transforms.alert_recoveries(
        sources.delta_stream(spark, t.alerts),
        sources.delta_stream(spark, t.alert_clears),
        s.watermark,
        s.recovery_window,
    )
    name = "alert_recoveries"
    return sinks.delta_stream(
        df, t.alert_recoveries, s.lake.checkpoint(name), name, s, background=True
    )


def start_fleet_summary(spark: SparkSession, s: ProcessorSettings, t: Tables) -> StreamingQuery:
    """Silver -> per-type summary, rewritten whole every batch (complete mode)."""
    name = "fleet_summary"
    return sinks.delta_stream(
        transforms.fleet_summary(_silver(spark, t)),
        t.fleet_summary,
        s.lake.checkpoint(name),
        name,
        s,
        output_mode="complete",
        background=True,
    )


Stage = Callable[[SparkSession, ProcessorSettings, Tables], StreamingQuery]
# In dependency order: a stage reads only tables written by stages before it.
STAGES: tuple[tuple[Stage, ...], ...] = (
    (start_bronze,),
    (start_silver,),
    (start_gold_device_1m,),
    (
        start_site_type_10m,
        start_device_sessions,
        start_alerts,
        start_fleet_summary,
    ),
    (start_alert_recoveries,),
)


def run_available_now(spark: SparkSession, settings: ProcessorSettings) -> None:
    """Process everything available, stage after stage, then return."""
    tables = Tables.under(settings.lake)
    ensure_tables(spark, settings, tables)
    for group in STAGES:
        for query in [stage(spark, settings, tables) for stage in group]:
            query.awaitTermination()


def start_all(
    spark: SparkSession,
    settings: ProcessorSettings,
    first_batch_timeout_s: float = 300.0,
    should_stop: Callable[[], bool] = lambda: False,
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
    """
    tables = Tables.under(settings.lake)
    ensure_tables(spark, settings, tables)
    queries: list[StreamingQuery] = []
    for group in STAGES:
        if should_stop():
            break
        started = [stage(spark, settings, tables) for stage in group]
        queries += started
        deadline = time.monotonic() + first_batch_timeout_s
        while (
            time.monotonic() < deadline
            and not should_stop()
            and any(q.isActive and q.lastProgress is None for q in started)
        ):
            time.sleep(0.5)
    return queries


def maintain(spark: SparkSession, settings: ProcessorSettings, retain_hours: float = 168.0) -> None:
    """OPTIMIZE (compact small files) and VACUUM every table; safe while streams run.

    OPTIMIZE commits with ``dataChange=false``, which streaming readers skip and
    which does not conflict with concurrent appends; VACUUM keeps ``retain_hours``
    of history (Delta refuses less than 168 hours unless its check is disabled).
    """
    for name, path in Tables.under(settings.lake).all().items():
        if not sinks.DeltaTable.isDeltaTable(spark, path):
            continue
        table = sinks.DeltaTable.forPath(spark, path)
        metrics = table.optimize().executeCompaction().select("metrics.*").first()
        table.vacuum(retain_hours)
        added = metrics["numFilesAdded"] if metrics else 0
        removed = metrics["numFilesRemoved"] if metrics else 0
        print(f"[maintain] {name}: compacted {removed} files into {added}", flush=True)
