"""What one hot micro-batch's writes cost, with nothing else running.

Silver's query writes each micro-batch with ``processor.hot_path.write_silver_batch``: a
MERGE (Spark's, once per batch) of the batch's minutes into ``gold/device_1m``, then
appends to silver (and quarantine, when the batch has invalid records). This bench calls
that function on ``--batches`` consecutive batches of ``--batch-rows`` readings each,
the fleet's readings at 200 events/s of event time (``--event-rate``; 700 rows: a 3.5 s
micro-batch), in one Spark session with the processor's settings (``local[2]``), no
stream, no Kafka, no other query. Each batch goes through ``silver_frame`` as the
stream's do (Kafka-shaped records, parsed, checked, deduplicated, joined with the device
dimension), from an in-memory frame rather than Kafka and without the deduplication's
state store. It is cached lazily, so the timed call also parses it and fills the cache,
as the stream's first job on a batch does. The generator injects no faults: quarantine
and schema drift are never written.

Printed per batch, over the second half of the batches (the JVM warmed up): wall
time and the CPU the driver's JVM and Python process used, with the processes they
ran that ended (Hadoop's ``chmod`` for each file it creates). This is the floor of a
hot micro-batch's cost on the machine: the streaming query adds planning, offsets,
the deduplication's state store and the other queries' contention on top. At the
end the bench checks its output: silver must hold every reading sent, once, and
quarantine none; ``gold/device_1m`` must equal the 1-minute aggregates computed
from silver, every column (averages to 9 decimal places).

It also counts the py4j round trips the Python side sends to build the writer's
frames for one batch (the minute aggregates, silver's rows, the quarantine's stamp),
and for one Column method: each is a command over the gateway's socket, paid in CPU on
both sides, every micro-batch. A Column method is one call when the session does not
record call sites (``processor.session.CALL_SITE_CAPTURE``; Spark's default takes 11).

Usage: ``python bench/silver_writes.py [--batches 120] [--batch-rows 700]
[--fleet-size 200] [--event-rate 200]``; a million devices at 3,000 events/s:
``--fleet-size 1000000 --event-rate 3000 --batch-rows 30000 --batches 40``. The last line
printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

# Run as a script, this folder comes first on sys.path and its producer.py would
# shadow the producer package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from common.fleet import build_fleet  # noqa: E402
from common.lake import Table  # noqa: E402
from common.lake_settings import LakeSettings  # noqa: E402
from infra.jars import ensure_jar_dir  # noqa: E402
from loadtest.machine import processes_cpu_s  # noqa: E402
from processor import bronze, gold, hot_path, lake_setup, silver  # noqa: E402
from processor.schema import KAFKA_SOURCE_SCHEMA  # noqa: E402
from processor.session import build_session  # noqa: E402
from processor.settings import ProcessorSettings  # noqa: E402
from processor.silver import silver_frame, silver_out  # noqa: E402
from producer.simulation import generate, simulated_clock  # noqa: E402

FLEET, SEED, RATE = 200, 5, 200.0  # the defaults of --fleet-size and --event-rate, the seed


def say(msg: str) -> None:
    """Print a progress line."""
    print(f"[bench] {msg}", flush=True)


def kafka_rows(n: int, start: datetime, fleet: int, rate: float) -> list[tuple]:
    """``n`` readings as Kafka records (``processor.schema.KAFKA_SOURCE_SCHEMA``), 2 partitions."""
    stream = generate(build_fleet(fleet, SEED), SEED, simulated_clock(start, rate))
    now = datetime.now(UTC)
    rows = []
    for i in range(n):
        e = next(stream)
        key, value = str(e["device_id"]).encode(), json.dumps(e).encode()
        rows.append((key, value, "bench", i % 2, i // 2, now, 0))
    return rows


def py4j_calls(build: Callable[[], object]) -> int:
    """How many py4j commands ``build()`` sends to the JVM from this thread.

    Only the calling thread's are counted: py4j's finalizer thread frees the JVM's side
    of dropped Python objects (a command each) on a schedule of its own.
    """
    import py4j.clientserver

    connection = py4j.clientserver.ClientServerConnection
    send, sent, caller = connection.send_command, [0], threading.get_ident()

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        sent[0] += threading.get_ident() == caller
        return send(self, *args, **kwargs)

    connection.send_command = counting  # type: ignore[method-assign]
    try:
        build()
    finally:
        connection.send_command = send  # type: ignore[method-assign]
    return sent[0]


def frame_calls(batch, watermark: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """py4j calls to build each of the silver writer's frames for ``batch`` (built once first)."""
    events = silver.silver_rows(batch)
    gold.device_minute_aggregates(events, watermark)  # the first call builds the columns
    column = F.col("reading")
    return {
        "py4j_calls_device_1m": py4j_calls(
            lambda: gold.device_minute_aggregates(events, watermark)
        ),
        "py4j_calls_silver_rows": py4j_calls(lambda: silver_out(batch)),
        "py4j_calls_quarantine_stamp": py4j_calls(lambda: bronze.stamp_ingest(batch)),
        "py4j_calls_column_alias": py4j_calls(lambda: column.alias("renamed")),
    }


def check(spark: SparkSession, settings: ProcessorSettings, sent: int) -> None:
    """Fail unless silver holds the ``sent`` readings once and device_1m their aggregates."""
    at = settings.lake.table
    silver = spark.read.format("delta").load(at(Table.SILVER_EVENTS))
    if (n := silver.count()) != sent or silver.select("event_id").distinct().count() != sent:
        raise SystemExit(f"[bench] silver holds {n:,} rows, {sent:,} readings were sent")
    if n := spark.read.format("delta").load(at(Table.SILVER_QUARANTINE)).count():
        raise SystemExit(f"[bench] {n:,} readings were quarantined; none were invalid")
    expected = gold.device_minute_aggregates(silver, settings.watermark)
    got = spark.read.format("delta").load(at(Table.GOLD_DEVICE_1M))
    cols = [F.round(c, 9).alias(c) if c.endswith("_avg") else F.col(c) for c in expected.columns]
    expected, got = expected.select(*cols), got.select(*cols)
    missing, extra = expected.exceptAll(got).count(), got.exceptAll(expected).count()
    if missing or extra:
        raise SystemExit(f"[bench] device_1m differs from silver: {missing} missing, {extra} extra")
    say(f"checked: silver holds {sent:,} readings once; device_1m equals their aggregates")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=120, help="micro-batches written")
    ap.add_argument("--batch-rows", type=int, default=700, help="readings per micro-batch")
    ap.add_argument("--work", type=Path, help="keep the lake here (default: temp)")
    ap.add_argument("--fleet-size", type=int, default=FLEET, help="devices in the fleet")
    ap.add_argument(
        "--event-rate", type=float, default=RATE, help="readings per second of event time"
    )
    args = ap.parse_args()
    jars = ensure_jar_dir("spark")
    with tempfile.TemporaryDirectory(prefix="bench-silver-writes-") as tmp:
        work = args.work or Path(tmp)
        if (work / "lake").exists():
            # Its commits carry the same ids: every write would be skipped as done.
            raise SystemExit(f"[bench] {work / 'lake'} exists: give an empty --work")
        settings = ProcessorSettings(
            lake=LakeSettings(root=str(work / "lake")), jars_dir=str(jars),
            fleet_size=args.fleet_size, seed=SEED,
        )  # fmt: skip
        spark = build_session(settings, "bench-silver-writes")
        at = settings.lake.table
        lake_setup.ensure_tables(spark, settings)
        devices = spark.read.format("delta").load(at(Table.DIM_DEVICES))
        jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]
        records = kafka_rows(
            args.batches * args.batch_rows, datetime.now(UTC), args.fleet_size, args.event_rate
        )
        say(f"{args.batches} batches of {args.batch_rows} readings, fleet of {args.fleet_size:,}")
        walls, cpus = [], []
        for b in range(args.batches):
            chunk = records[b * args.batch_rows : (b + 1) * args.batch_rows]
            raw = spark.createDataFrame(chunk, KAFKA_SOURCE_SCHEMA)
            batch = silver_frame(bronze.to_bronze(raw), devices, settings.watermark)
            batch.persist()
            t0, c0 = time.monotonic(), processes_cpu_s((jvm, os.getpid()))
            hot_path.write_silver_batch(batch, b, "bench-silver", settings)
            walls.append(time.monotonic() - t0)
            cpus.append(processes_cpu_s((jvm, os.getpid())) - c0)
            batch.unpersist()
            if (b + 1) % 20 == 0:
                say(
                    f"batch {b + 1}: last 20 took {statistics.mean(walls[-20:]):.2f} s and "
                    f"{statistics.mean(cpus[-20:]):.2f} CPU-s each"
                )
        check(spark, settings, len(records))
        raw = spark.createDataFrame(records[: args.batch_rows], KAFKA_SOURCE_SCHEMA)
        calls = frame_calls(
            silver_frame(bronze.to_bronze(raw), devices, settings.watermark), settings.watermark
        )
        spark.stop()
    half = len(walls) // 2
    wall, cpu = statistics.mean(walls[half:]), statistics.mean(cpus[half:])
    every = args.batch_rows / args.event_rate
    say(
        f"per batch of {args.batch_rows} readings (batches {half + 1}-{len(walls)}): "
        f"{wall:.2f} s, {cpu:.2f} CPU-s (JVM and Python); at {args.event_rate:.0f} events/s, one "
        f"batch every {every:.1f} s, that is {cpu / every:.2f} cores"
    )
    say("py4j calls to build a batch's frames: " + ", ".join(f"{k} {v}" for k, v in calls.items()))
    print(json.dumps({
        "batch_rows": args.batch_rows, "batches": args.batches,
        "wall_s_per_batch": round(wall, 3), "cpu_s_per_batch": round(cpu, 3),
        "wall_s_per_batch_median": round(statistics.median(walls[half:]), 3),
        "writes_cores_at_200": round(cpu / every, 3),
        **calls,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
