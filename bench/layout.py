"""How ``gold/device_1m``'s file layout serves the dashboard's reads at a million devices.

The processor writes ``gold/device_1m`` in time order: each hot micro-batch adds a file
of its rows, every device of the fleet mixed in it. A time range is then read from few
files (Delta keeps each file's minimum and maximum), but one device's rows are in every
file of the range. ``python -m processor maintain`` compacts the files (OPTIMIZE); on a
table clustered by ``device_id`` and ``window_start`` (Delta's liquid clustering) the
compaction also sorts them along both, so a device's rows are in few files and few row
groups.

This bench writes ``--minutes`` of a ``--fleet``-device fleet reporting at ``--rate``
events/s (each ``--batch-s`` batch a file of its readings, as the hot path writes them;
delta-rs writes them, fast), then measures three copies side by side in one run:

* ``as written``: the hot path's files;
* ``compacted``: after OPTIMIZE on the unclustered table;
* ``clustered``: after OPTIMIZE on the table clustered by (device_id, window_start), as
  ``maintain`` does it.

Both OPTIMIZEs write files of at most ``--max-file-mb`` (``maintain``'s by default).

For each: the OPTIMIZE's wall time, the files, and the dashboard's own reads
(``dashboard.lake.read``, no cache): one device's rows over the whole range (the Device
page of a device not opened before; the median over ``--devices-read`` devices), and
every device's rows of the last ``--recent-min`` minutes (a time range, as the Overview
reads). Usage: ``python bench/layout.py [--fleet 1000000 --rate 3000 --minutes 60]``.
The last line of output is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

# Run as a script, this folder comes first on sys.path and its producer.py would
# shadow the producer package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from common.contract import METRIC_NAMES  # noqa: E402
from common.lake import Table  # noqa: E402
from dashboard import lake  # noqa: E402
from infra.jars import ensure_jar_dir  # noqa: E402
from processor.maintenance import MAX_FILE_BYTES, MAX_FILE_CONF  # noqa: E402

START = datetime(2026, 3, 1, 11, 0, tzinfo=UTC)
TS = pl.Datetime("us", "UTC")
LAYOUTS = ("as written", "compacted", "clustered")


def say(msg: str) -> None:
    """Print a progress line."""
    print(f"[bench] {msg}", flush=True)


def batch_rows(rng: np.random.Generator, fleet: int, n: int, at: datetime) -> pl.DataFrame:
    """One hot micro-batch's rows of ``gold/device_1m``: ``n`` distinct devices, one minute."""
    devices = rng.choice(fleet, size=n, replace=False)
    minute = at.replace(second=0, microsecond=0)
    columns: dict[str, object] = {
        "window_start": pl.Series([minute] * n, dtype=TS),
        "window_end": pl.Series([minute + timedelta(minutes=1)] * n, dtype=TS),
        "device_id": [f"dev-{i:07d}" for i in devices],
        "device_type": [
            ("thermostat", "air_quality", "vibration", "power_meter")[i % 4] for i in devices
        ],
        "site": [f"site-{i % 12:02d}" for i in devices],
        "events": np.ones(n, dtype=np.int64),
    }
    for metric in METRIC_NAMES:
        value = 50.0 + rng.normal(0, 5, n)
        for suffix in ("min", "avg", "max"):
            columns[f"{metric}_{suffix}"] = value
        columns[f"{metric}_count"] = np.ones(n, dtype=np.int64)
    columns["last_event_time"] = pl.Series([at] * n, dtype=TS)
    columns["last_seq"] = np.ones(n, dtype=np.int64)
    return pl.DataFrame(columns)


def write_as_the_hot_path(path: Path, args: argparse.Namespace) -> int:
    """Write ``--minutes`` of batches, a file each; return the rows written."""
    rng = np.random.default_rng(7)
    per_batch = int(args.rate * args.batch_s)
    batches = int(args.minutes * 60 / args.batch_s)
    for b in range(batches):
        at = START + timedelta(seconds=b * args.batch_s)
        write_deltalake(
            str(path), batch_rows(rng, args.fleet, per_batch, at).to_arrow(), mode="append"
        )
        if b % 50 == 49:
            say(f"  {b + 1}/{batches} batches written")
    return per_batch * batches


def copy_table(source: Path, dest: Path) -> None:
    """A copy of a Delta table whose data files are hard links (never changed in place)."""
    shutil.copytree(source, dest, copy_function=os.link)
    log = dest / "_delta_log"
    for f in log.iterdir():  # the log is written again by OPTIMIZE: its own copies
        f.unlink()
        shutil.copy2(source / "_delta_log" / f.name, f)


def optimize(spark: object, path: Path, cluster: bool) -> float:
    """OPTIMIZE the table (after CLUSTER BY when ``cluster``); return the OPTIMIZE's seconds."""
    from processor.tables import delta_identifier

    table = delta_identifier(str(path))
    if cluster:
        spark.sql(f"ALTER TABLE {table} CLUSTER BY (device_id, window_start)").collect()  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    spark.sql(f"OPTIMIZE {table}").collect()  # type: ignore[attr-defined]
    return time.perf_counter() - t0


def reads(path: Path, args: argparse.Namespace, wanted: list[str]) -> dict[str, float]:
    """The dashboard's reads of one layout, cold (no cache), with the files each touches."""
    table = DeltaTable(str(path))
    end = START + timedelta(minutes=args.minutes)
    whole = lake.TimeRange("window_start", START, None)
    device_s, device_files, device_rows = [], [], []
    for device in wanted:
        equals = {"device_id": device}
        files = lake.data_files(table, whole, equals)
        t0 = time.perf_counter()
        rows = lake.read(
            table, Table.GOLD_DEVICE_1M, lake.DEVICE_GOLD_COLUMNS, time=whole, equals=equals
        )
        device_s.append(time.perf_counter() - t0)
        device_files.append(len(files or []))
        device_rows.append(rows.height)
    recent = lake.TimeRange("window_start", end - timedelta(minutes=args.recent_min), None)
    t0 = time.perf_counter()
    rows = lake.read(table, Table.GOLD_DEVICE_1M, lake.OVERVIEW_GOLD_COLUMNS, time=recent)
    recent_s = time.perf_counter() - t0
    return {
        "files": len(table.file_uris()),
        "device_read_s": round(statistics.median(device_s), 3),
        "device_files_read": int(statistics.median(device_files)),
        "device_rows": int(statistics.median(device_rows)),
        "recent_read_s": round(recent_s, 3),
        "recent_files_read": len(lake.data_files(table, recent) or []),
        "recent_rows": rows.height,
    }


def main() -> int:
    """Write the table once, lay out two copies, measure the reads of all three."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fleet", type=int, default=1_000_000, help="devices (default 1,000,000)")
    p.add_argument("--rate", type=float, default=3000.0, help="events/s (default 3,000)")
    p.add_argument("--batch-s", type=float, default=20.0, help="seconds per batch (default 20)")
    p.add_argument("--minutes", type=int, default=60, help="minutes written (default 60)")
    p.add_argument(
        "--recent-min", type=int, default=15, help="the time read's minutes (default 15)"
    )
    p.add_argument("--devices-read", type=int, default=5, help="devices read (default 5)")
    p.add_argument(
        "--max-file-mb", type=int, default=MAX_FILE_BYTES // 2**20,
        help="OPTIMIZE's largest file, in MB (default: maintain's, %(default)s; Delta's: 1024)",
    )  # fmt: skip
    args = p.parse_args()

    from processor.session import build_session
    from processor.settings import ProcessorSettings

    with tempfile.TemporaryDirectory(prefix="iot-layout-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        rows_written = write_as_the_hot_path(root / "as written", args)
        say(f"{rows_written:,} rows written in {time.perf_counter() - t0:.0f} s")
        for layout in LAYOUTS[1:]:
            copy_table(root / "as written", root / layout)
        settings = ProcessorSettings(
            _env_file=None, master="local[2]", jars_dir=str(ensure_jar_dir("spark")),
            lake={"root": str(root)},
        )  # fmt: skip
        spark = build_session(settings, app_name="iot-pulse-bench-layout")
        spark.conf.set(MAX_FILE_CONF, str(args.max_file_mb * 2**20))
        optimize_s = {"as written": 0.0}
        for layout in LAYOUTS[1:]:
            optimize_s[layout] = round(optimize(spark, root / layout, layout == "clustered"), 1)
            say(f"{layout}: OPTIMIZE took {optimize_s[layout]} s")
        spark.stop()
        rng = np.random.default_rng(11)
        wanted = [f"dev-{i:07d}" for i in rng.choice(args.fleet, args.devices_read, replace=False)]
        figures: dict[str, object] = {
            "rows": rows_written, "fleet": args.fleet, "minutes": args.minutes,
            "max_file_mb": args.max_file_mb,
        }  # fmt: skip
        for layout in LAYOUTS:
            measured = reads(root / layout, args, wanted) | {"optimize_s": optimize_s[layout]}
            say(f"{layout}: {measured}")
            figures[layout.replace(" ", "_")] = measured
    written, compacted, clustered = (figures[layout.replace(" ", "_")] for layout in LAYOUTS)
    assert isinstance(written, dict) and isinstance(compacted, dict) and isinstance(clustered, dict)
    # Same rows whatever the layout: the layouts differ only in where rows are.
    for got in (compacted, clustered):
        assert (got["device_rows"], got["recent_rows"]) == (
            written["device_rows"], written["recent_rows"]
        )  # fmt: skip
    for read in ("device_read", "recent_read"):
        figures[f"{read}_clustered_over_compacted"] = round(
            clustered[f"{read}_s"] / compacted[f"{read}_s"], 3
        )
        figures[f"{read}_clustered_over_written"] = round(
            clustered[f"{read}_s"] / written[f"{read}_s"], 3
        )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
