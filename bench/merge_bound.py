"""What the bound of silver's MERGE into ``gold/device_1m`` saves late in an hour.

Each hot micro-batch MERGEs its minutes into ``gold/device_1m`` with a ``since`` bound:
only stored rows from then on can match, so Delta skips older files. The bound is the
batch's earliest minute (``processor.times.since_floor_s``). Its peer here is the start
of that minute's hour, which reads every file of the hour so far: at a million devices
reporting every 5 minutes the table gains a row per reading, ten million rows an hour.

The bench fills ``gold/device_1m`` with ``--minutes`` minutes of such rows (a minute's
``--rows-per-minute`` readings, one row each, in files a sixth of a minute wide, as
batches write them), then MERGEs ``--rounds`` batches of ``--batch-rows`` new rows of
the next minute with each bound in turn, in one Spark session (the processor's
settings, ``local[2]``). It prints each MERGE's wall time and the medians side by side
(the first round of each is left out: it compiles the plan), checks that the table
holds every row once, and ends with one JSON line.

Usage: ``python bench/merge_bound.py [--minutes 50] [--rows-per-minute 180000]
[--batch-rows 30000] [--rounds 4]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

# Run as a script, this folder comes first on sys.path and its producer.py would
# shadow the producer package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from common.lake import TABLES, Table  # noqa: E402
from common.lake_settings import LakeSettings  # noqa: E402
from infra.jars import ensure_jar_dir  # noqa: E402
from processor import gold, lake_setup, writes  # noqa: E402
from processor.session import build_session  # noqa: E402
from processor.settings import ProcessorSettings  # noqa: E402
from processor.times import since_floor_s  # noqa: E402

HOUR = datetime(2026, 1, 1, 10, tzinfo=UTC)
FLEET = 1_000_000  # device ids are drawn from a fleet this size


def say(msg: str) -> None:
    """Print a progress line."""
    print(f"[bench] {msg}", flush=True)


def minute_rows(spark: SparkSession, path: str, n: int, minute: str, first: int) -> DataFrame:
    """``n`` rows shaped as ``gold/device_1m``'s, of distinct devices.

    Args:
        spark: The session.
        path: The table, for its schema.
        n: How many rows.
        minute: SQL for each row's minute after ``HOUR`` (over the column ``id``).
        first: The first row's number: rows numbered apart name distinct devices.
    """
    start = int(HOUR.timestamp())
    at = F.timestamp_seconds(F.lit(start) + F.lit(60) * F.expr(minute))
    columns = {
        "window_start": at,
        "window_end": at + F.expr("INTERVAL 1 MINUTE"),
        "device_id": F.format_string("dev-%07d", (F.col("id") + first) * 7919 % FLEET),
        "device_type": F.lit("thermostat"),
        "site": F.lit("Oslo"),
        "events": F.lit(1),
    }
    schema = spark.read.format("delta").load(path).schema
    return spark.range(n).select(
        *(columns.get(f.name, F.rand(first)).cast(f.dataType).alias(f.name) for f in schema)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=int, default=50, help="minutes of the hour already stored")
    ap.add_argument(
        "--rows-per-minute", type=int, default=180_000, help="rows a minute (3,000 events/s)"
    )
    ap.add_argument("--batch-rows", type=int, default=30_000, help="rows a MERGE adds")
    ap.add_argument("--rounds", type=int, default=4, help="MERGEs with each bound")
    args = ap.parse_args()
    if max(args.rows_per_minute, args.batch_rows * 2 * args.rounds) > FLEET:
        raise SystemExit(f"[bench] more rows a minute than the fleet's {FLEET:,} devices")
    with tempfile.TemporaryDirectory(prefix="bench-merge-bound-") as tmp:
        settings = ProcessorSettings(
            lake=LakeSettings(root=str(Path(tmp) / "lake")), jars_dir=str(ensure_jar_dir("spark"))
        )
        spark = build_session(settings, "bench-merge-bound")
        lake_setup.ensure_tables(spark, settings)
        path = settings.lake.table(Table.GOLD_DEVICE_1M)
        stored = args.minutes * args.rows_per_minute
        t0 = time.monotonic()
        history = minute_rows(spark, path, stored, f"floor(id / {args.rows_per_minute})", 0)
        # Files a sixth of a minute wide, as 10-second micro-batches write them.
        history = history.repartitionByRange(6 * args.minutes, "window_start")
        history.write.format("delta").mode("append").save(path)
        say(f"stored {stored:,} rows over {args.minutes} minutes in {time.monotonic() - t0:.1f} s")
        times: dict[str, list[float]] = {"hour": [], "minute": []}
        for r in range(2 * args.rounds):
            bound = "hour" if r % 2 == 0 else "minute"
            first = r * args.batch_rows
            batch = minute_rows(spark, path, args.batch_rows, str(args.minutes), first).cache()
            earliest = batch.agg(since_floor_s(F.col("window_start"))).collect()[0][0]
            since = int(HOUR.timestamp()) if bound == "hour" else earliest
            t0 = time.monotonic()
            writes.merge(
                batch,
                path,
                TABLES[Table.GOLD_DEVICE_1M].key,
                since=("window_start", since),
                update=gold.combine_device_minutes(),
                nonempty=True,
            )
            times[bound].append(time.monotonic() - t0)
            batch.unpersist()
            say(f"MERGE bounded at the {bound}: {times[bound][-1]:.2f} s")
        table = spark.read.format("delta").load(path)
        want = stored + 2 * args.rounds * args.batch_rows
        rows, keys = table.count(), table.select("device_id", "window_start").distinct().count()
        if rows != want or keys != want:
            raise SystemExit(f"[bench] the table holds {rows:,} rows, {keys:,} keys: want {want:,}")
        say(f"checked: the table holds {want:,} rows, each key once")
        spark.stop()
    hour, minute = (statistics.median(times[b][1:] or times[b]) for b in ("hour", "minute"))
    say(
        f"MERGE of {args.batch_rows:,} rows at minute {args.minutes} of the hour: bounded at "
        f"the hour {hour:.2f} s, at the batch's minute {minute:.2f} s (ratio {minute / hour:.2f})"
    )
    print(json.dumps({
        "minutes": args.minutes, "stored_rows": stored, "batch_rows": args.batch_rows,
        "merge_s_hour_bound": round(hour, 3), "merge_s_minute_bound": round(minute, 3),
        "minute_over_hour": round(minute / hour, 3),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
