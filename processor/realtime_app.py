"""The real-time alert application: events topic -> threshold alerts -> alerts topic.

One query, ``realtime_alerts``, in Spark's real-time mode (``trigger(realTime=...)``):
long-running tasks read the events topic and write each alert to the alerts topic
within milliseconds, where a micro-batch costs this pipeline seconds. It runs as its
own Spark application (``python -m processor realtime``; ``python -m processor run``
starts it beside the medallion pipeline), because real-time mode keeps one task per
input partition running all the time: its slots must not be shared.

What real-time mode cannot do in Spark 4.2 (no Delta, no ``foreachBatch``, no
state) is done elsewhere: the ``alerts_rt`` micro-batch query of the main
application lands the alerts topic in ``gold/alerts_rt``, once per alert id.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from common import cli
from common.kafka import spark_kafka_options
from common.lake import Query
from common.registry_settings import subject_of
from common.stop_signals import StopFlag
from processor import bronze, realtime, sources, writer_schemas
from processor.checkpoints import clear_unlogged_first_batch
from processor.driver_jvm import stop_session
from processor.lake_files import LakeFiles
from processor.lake_setup import devices_frame
from processor.lifecycle import say, wait_for_stop
from processor.session import build_session, quiet_console
from processor.settings import ProcessorSettings
from processor.stopping import stop_queries

WHO = "realtime-alerts"
# How long the Kafka sink's producer waits for the alerts topic's metadata, or for room
# in its buffer, before the write fails (Kafka's default is a minute).
MAX_BLOCK_MS = "10000"


def wanted(settings: ProcessorSettings) -> bool:
    """Whether a run with these settings includes the real-time alerts."""
    return (
        Query.REALTIME_ALERTS in settings.query_names()
        and settings.source == "kafka"
        and settings.trigger == "processing_time"
    )


def realtime_master(settings: ProcessorSettings, partitions: int) -> str:
    """The app's master: locally, one task slot per partition of the events topic.

    Real-time mode runs every partition's task at once and fails to start without a
    slot for each. On a cluster (a master that is not ``local``) the cluster's
    executors must provide them.
    """
    if settings.master.startswith("local"):
        return f"local[{max(1, partitions)}]"
    return settings.master


def start_realtime_alerts(
    spark: SparkSession, settings: ProcessorSettings, schemas: Mapping[int, str]
) -> StreamingQuery:
    """Start the ``realtime_alerts`` query: every breach to the alerts topic, in real time.

    Delivery is at least once: a restart resends what the last unfinished epoch
    sent (epochs end every ``realtime_checkpoint_interval``), with the same alert ids.

    Args:
        spark: The real-time application's session.
        settings: Its settings.
        schemas: The Avro writer schemas it decodes (``writer_schemas.load``).
    """
    events = bronze.to_bronze(sources.kafka_stream(spark, settings, micro_batch=False))
    alerts = realtime.threshold_alerts(events, devices_frame(spark, settings), schemas)
    name = Query.REALTIME_ALERTS
    clear_unlogged_first_batch(LakeFiles(settings.lake), settings.lake.checkpoint(name))
    query: StreamingQuery = (
        realtime.alert_records(alerts)
        .writeStream.format("kafka")
        .options(**spark_kafka_options(settings.kafka))
        .option("topic", settings.kafka.alerts_topic)
        .option("kafka.max.block.ms", MAX_BLOCK_MS)
        .option("kafka.linger.ms", "0")
        .option("checkpointLocation", settings.lake.checkpoint(name))
        .outputMode("update")
        .queryName(str(name))
        .trigger(realTime=settings.realtime_checkpoint_interval)  # type: ignore[call-overload]  # the classic writer's overloads leave out realTime, which it takes (Spark Connect's have it)
        .start()
    )
    return query


def run(settings: ProcessorSettings, partitions: int, stop: StopFlag) -> int:
    """Run the real-time alert query until stopped or failed.

    Args:
        settings: Processor settings.
        partitions: Partitions of the events topic (one task slot each).
        stop: Set by Ctrl-C or SIGTERM.

    Returns:
        The exit code.
    """
    master = realtime_master(settings, partitions)
    own = settings.model_copy(update={"master": master, "driver_memory": "1g"})
    with stop.starting():  # nothing runs yet: a stop gives the start-up up at once
        spark = build_session(own, app_name="iot-pulse-realtime-alerts", log_file=cli.log_file())
        stop.install()  # again: the SparkContext replaced the SIGINT handler
        schemas = writer_schemas.load(own.schema_registry, own.kafka.topic)
        query = start_realtime_alerts(spark, own, schemas)
    say(
        f"{settings.kafka.topic} -> {settings.kafka.alerts_topic} in real-time mode "
        f"(Spark {spark.version}, master {master}, checkpoint every "
        f"{settings.realtime_checkpoint_interval})",
        WHO,
    )
    while True:
        # A schema registered while it runs (a firmware rollout): the query starts again
        # knowing it, from its last checkpoint, so that breaches in records of the new
        # version since that checkpoint are alerted too (at least once, as ever).
        watch = writer_schemas.SchemaWatch(
            own.schema_registry, own.kafka.topic, schemas, query.stop
        ).start()
        failure = wait_for_stop([query], stop)
        watch.stop()
        if failure is None or not watch.found:
            break
        subject = subject_of(own.kafka.topic)
        say(f"restarts: {subject} holds schema ids {watch.found} registered since it started", WHO)
        schemas = watch.schemas
        query = start_realtime_alerts(spark, own, schemas)
        say(f"decodes schema ids {sorted(schemas)} of {subject}", WHO)
    quiet_console(spark)
    if stop_queries(spark, [query]):
        stop_session(spark)
    else:
        say("Spark's driver stopped with the same signal", WHO)
    if failure is not None:
        return cli.error(failure)
    say("stopped", WHO)
    return 0
