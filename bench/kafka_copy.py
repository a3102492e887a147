"""Spark's plain Kafka -> Delta copy of a topic: the ceiling any pipeline on this Spark reaches.

``bench/processor.py`` runs it beside the processor, in the same run, on a topic of the
same events: a stream that reads the topic with the processor's Kafka settings and
appends each micro-batch as it is to a Delta table (Delta's own streaming sink), in a
session built as the processor's is (``processor.session.build_session``: the same
jars, the same local profile), triggered every ``IOT_PROCESSOR_TRIGGER_INTERVAL`` with
the same ``MAX_OFFSETS_PER_TRIGGER``. It runs until SIGTERM.

Usage (the processor's environment variables): ``python bench/kafka_copy.py``; the table
is ``<IOT_LAKE_ROOT>/copy``.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

# Run as a script, this folder comes first on sys.path and its producer.py would
# shadow the producer package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from common.kafka import spark_kafka_options  # noqa: E402
from processor.session import build_session  # noqa: E402
from processor.settings import ProcessorSettings  # noqa: E402

TABLE = "copy"


def main() -> None:
    """Copy the topic until SIGTERM."""
    settings = ProcessorSettings()
    spark = build_session(settings, app_name="kafka-copy")
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(settings.kafka))
        .option("subscribe", settings.kafka.topic)
        .option("startingOffsets", "earliest")
    )
    if settings.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", settings.max_offsets_per_trigger)
    query = (
        reader.load()
        .writeStream.format("delta")
        .queryName("copy")
        .option("checkpointLocation", settings.lake.checkpoint(TABLE))
        .trigger(processingTime=settings.trigger_interval)
        .start(settings.lake.table(TABLE))
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("[copy] started", flush=True)
    while not stop.is_set() and query.isActive:
        stop.wait(0.5)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
