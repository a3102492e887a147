"""What the pipeline-metrics listener costs per progress event, by adaptor.

Spark hands each query's progress to a Python listener through py4j. PySpark's own
adaptor (``StreamingQueryListener``'s default ``_jlistener``) copies the Java event into
Python objects field by field before the listener sees it; ``processor.metrics``'s
(``_ProgressAsJson``) asks only for the progress's JSON. This bench takes a
real progress (a Kafka-less query of the processor's session, with its jars), then
delivers it ``--events`` times through each adaptor, as Spark's listener bus does
(``PythonStreamingQueryListenerWrapper.onQueryProgress``), to the same
``MetricsListener.record``, and prints the CPU per event of the driver's JVM and its
Python process together. Nothing is written: the listener's flush interval is longer
than the bench.

Usage: ``python bench/metrics_listener.py [--events 300]``. The last line printed is
one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this folder comes first on sys.path and its producer.py would
# shadow the producer package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from pyspark.java_gateway import ensure_callback_server_started  # noqa: E402
from pyspark.sql.streaming.listener import JStreamingQueryListener  # noqa: E402

from infra.jars import ensure_jar_dir  # noqa: E402
from loadtest.machine import cpu_stamp, process_cpu_s  # noqa: E402
from processor.metrics import MetricsListener  # noqa: E402
from processor.session import build_session, quiet_console  # noqa: E402
from processor.settings import ProcessorSettings  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=300, help="deliveries per adaptor")
    args = ap.parse_args()
    print(f"[bench] this machine's CPU stamp: {cpu_stamp():.3f} s", flush=True)
    jars = ensure_jar_dir("spark", quiet=True)
    with tempfile.TemporaryDirectory() as work:
        settings = ProcessorSettings(jars_dir=str(jars), lake={"root": f"{work}/lake"})
        spark = build_session(settings)
        query = (
            spark.readStream.format("rate").option("rowsPerSecond", 100).load()
            .withWatermark("timestamp", "1 minute").dropDuplicates(["value", "timestamp"])
            .writeStream.format("noop").queryName("probe")
            .option("checkpointLocation", f"{work}/checkpoint").start()
        )  # fmt: skip
        while query.lastProgress is None or query.lastProgress.numInputRows == 0:
            time.sleep(0.2)
        quiet_console(spark)  # the stop aborts the batch in flight: no ERROR lines for it
        query.stop()
        jvm = spark._jvm
        assert jvm is not None
        # As addListener does: Spark's listener bus calls back on its own connection.
        ensure_callback_server_started(spark.sparkContext._gateway)
        jprogress = query._jsq.lastProgress()
        event_class = "StreamingQueryListener$QueryProgressEvent"
        jevent = getattr(jvm.org.apache.spark.sql.streaming, event_class)(jprogress)
        jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
        listener = MetricsListener(spark, f"{work}/lake/ops/pipeline_metrics", flush_s=3600)
        wrapper = jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper
        adaptors = {
            "pyspark": wrapper(JStreamingQueryListener(listener)),
            "json": listener._jlistener,
        }
        figures: dict[str, float] = {}
        for rounds in ("warm-up", "measured"):
            for name, adaptor in adaptors.items():
                cpu0 = process_cpu_s(jvm_pid) + process_cpu_s(os.getpid())
                for _ in range(args.events):
                    adaptor.onQueryProgress(jevent)
                cpu = process_cpu_s(jvm_pid) + process_cpu_s(os.getpid()) - cpu0
                if rounds == "measured":
                    figures[f"cpu_ms_per_event_{name}"] = round(1000 * cpu / args.events, 2)
                    print(
                        f"[bench] {name} adaptor: {1000 * cpu / args.events:.2f} ms of CPU "
                        f"per progress event ({args.events} events)",
                        flush=True,
                    )
        rows = len(listener._rows)
        assert rows == 4 * args.events, rows  # every delivery became a row
        listener._stop.set()
        spark.stop()
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
