"""The alert detector's micro-batch at a large fleet, beside Spark's stateful Python operator.

At a million devices that report every few minutes, a background micro-batch (a
minute) holds about one reading per device it touches: 3,000 events/s is 180,000
readings from about as many devices. Each figure is one such batch, warm (after a
first batch on the same session):

* **ours**: ``processor.alerts.detect_alerts`` over the batch, from a state table of
  ``--fleet`` devices, then what ``processor.background_queries.start_alerts`` writes: the raised
  alerts (an append) and the devices' new states (a MERGE into the state table):
  ``ours_batch_s_<readings>`` in all, ``ours_merge_s_<readings>`` for the MERGE.
* **peer**: the same detector function in ``applyInPandasWithState``, the stateful
  Python operator of Structured Streaming, one call per device, over the same readings
  as one available-now micro-batch to a no-op sink (no writes at all):
  ``peer_batch_s_<readings>``, for ``--peer-readings`` (its cost per device does not
  depend on the fleet, so a smaller batch shows it).

``per_device_ms_<side>`` divides a batch by its devices, so the two sides compare at
different sizes. Compare within one run: this machine's speed moves from hour to hour.

Usage: ``python bench/alert_detector.py [--readings 180000] [--fleet 1000000]
[--peer-readings 20000]``. The last line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from common.contract import METRIC_NAMES  # noqa: E402
from processor import alerts, writes  # noqa: E402
from processor.detector import (  # noqa: E402
    DetectorConfig,
    MetricState,
    detect_columns,
    dump_state,
    load_state,
)

# A warmed device's state: every metric past the warm-up, no alert open.
WARM_STATE = dump_state(
    {m: MetricState(n=100, mean=21.123456789, var=0.987654321) for m in METRIC_NAMES}
)


def readings(spark: SparkSession, count: int, first_device: int, batch: int) -> DataFrame:
    """``count`` silver-shaped readings, one per device from ``first_device`` on."""
    device = F.col("id") + first_device
    return spark.range(count).select(
        F.format_string("e%d-%d", F.lit(batch), "id").alias("event_id"),
        F.format_string("dev-%07d", device).alias("device_id"),
        F.lit("thermostat").alias("device_type"),
        F.lit("site-1").alias("site"),
        (F.lit(1_800_000_000 + 60 * batch) + F.col("id") % 60)
        .cast("timestamp")
        .alias("event_time"),
        F.lit(batch).cast("long").alias("seq"),
        *(c for m in METRIC_NAMES for c in (
            (F.lit(21.0) + F.rand(batch) * 2).alias(m),
            F.lit(0.0).alias(f"{m}_low"),
            F.lit(30.0).alias(f"{m}_high"),
        )),
    )  # fmt: skip


def ours(spark: SparkSession, root: str, count: int, fleet: int) -> dict[str, float]:
    """Warm batches of the state-table detector, with its writes; the median of two."""
    state_path, alerts_path = f"{root}/state", f"{root}/alerts"
    spark.range(fleet).select(
        F.format_string("dev-%07d", "id").alias("device_id"), F.lit(WARM_STATE).alias("state")
    ).write.format("delta").save(state_path)
    detected0 = spark.createDataFrame([], alerts.DETECTED_SCHEMA)
    alerts.raised_alerts(detected0).write.format("delta").save(alerts_path)
    totals, merges = [], []
    for batch in range(3):
        batch_df = readings(spark, count, (batch * count) % max(fleet - count, 1), batch)
        batch_df = batch_df.localCheckpoint()  # the batch as foreachBatch gets it, cached
        t0 = time.perf_counter()
        states = spark.read.format("delta").load(state_path)
        detected = alerts.detect_alerts(batch_df, states, DetectorConfig()).persist()
        writes.append_once(alerts.raised_alerts(detected), alerts_path, "bench", batch)
        t1 = time.perf_counter()
        writes.merge(alerts.new_states(detected), state_path, ("device_id",), txn=("bench", batch))
        t2 = time.perf_counter()
        detected.unpersist()
        if batch:  # the first batch warms the session up
            totals.append(t2 - t0)
            merges.append(t2 - t1)
        print(f"[bench] ours batch {batch}: {t2 - t0:.1f} s (MERGE {t2 - t1:.1f} s)", flush=True)
    return {"batch_s": statistics.median(totals), "merge_s": statistics.median(merges)}


def peer(spark: SparkSession, root: str, count: int) -> float:
    """One warm available-now batch of the detector in ``applyInPandasWithState``."""
    import pandas as pd
    from pyspark.sql.streaming.state import GroupStateTimeout

    cfg = DetectorConfig()
    schema = alerts.DETECTED_SCHEMA
    out_columns = schema.names[:-1]
    out_schema = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields[:-1])

    def run(key, batches, group_state):  # type: ignore[no-untyped-def]
        state = load_state(group_state.get[0] if group_state.exists else None)
        rows = pd.concat(list(batches)).sort_values(["event_time", "seq"], kind="stable")
        found = detect_columns({c: rows[c].tolist() for c in rows.columns}, state, cfg)
        group_state.update((dump_state(state),))
        yield pd.DataFrame(found, columns=out_columns)

    elapsed = 0.0
    for batch, size in enumerate((1_000, count)):  # the first warms the Python workers
        path = f"{root}/peer-{batch}"
        readings(spark, size, 0, batch).write.format("delta").save(path)
        stream = (
            spark.readStream.format("delta").load(path).groupBy("device_id")
            .applyInPandasWithState(
                run, outputStructType=out_schema, stateStructType="state string",
                outputMode="append", timeoutConf=GroupStateTimeout.NoTimeout,
            )
        )  # fmt: skip
        t0 = time.perf_counter()
        query = (
            stream.writeStream.format("noop")
            .option("checkpointLocation", f"{path}-checkpoint")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - t0
        print(f"[bench] peer batch of {size:,} devices: {elapsed:.1f} s", flush=True)
    return elapsed


def main() -> None:
    """Run both sides on one session; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readings", type=int, default=180_000)
    parser.add_argument("--fleet", type=int, default=1_000_000)
    parser.add_argument("--peer-readings", type=int, default=20_000)
    args = parser.parse_args()

    from infra.jars import ensure_jar_dir
    from processor.session import build_session
    from processor.settings import ProcessorSettings

    with tempfile.TemporaryDirectory(prefix="iot-detector-bench-") as root:
        settings = ProcessorSettings(
            _env_file=None, jars_dir=str(ensure_jar_dir("spark", quiet=True)), lake={"root": root}
        )
        spark = build_session(settings, app_name="bench-alert-detector")
        mine = ours(spark, root, args.readings, args.fleet)
        theirs = peer(spark, root, args.peer_readings)
        spark.stop()
    n, p = args.readings, args.peer_readings
    figures = {
        f"ours_batch_s_{n}": round(mine["batch_s"], 2),
        f"ours_merge_s_{n}": round(mine["merge_s"], 2),
        f"peer_batch_s_{p}": round(theirs, 2),
        "per_device_ms_ours": round(1000 * mine["batch_s"] / n, 3),
        "per_device_ms_peer": round(1000 * theirs / p, 3),
    }
    figures["peer_to_ours_per_device"] = round(
        figures["per_device_ms_peer"] / figures["per_device_ms_ours"], 1
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
