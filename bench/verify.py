"""``loadtest verify``'s time and peak memory at 1, 10 and 100 million readings.

The bench makes a run's manifest and lake of its own: ``N`` readings of ``N / 100``
devices at 30,000 events/s on the wall clock, a JSON-lines manifest as the producer
writes it, and the ``bronze/events``, ``silver/events`` and ``silver/quarantine``
Delta tables as the processor writes them, with ``LOST`` readings left out of bronze
and silver on purpose so that a verify that reads nothing cannot pass. Each size is
then verified by ``python -m loadtest verify`` in a process of its own (its peak
resident memory is the process's own), once with this checkout and, with
``--eager-ref REF`` (a git ref of the implementation that held every table in
memory), once with that implementation beside it, up to ``--eager-max`` readings.
Each verify must find exactly the ``LOST`` readings missing and nothing else.

The last line printed is one JSON object::

    {"verify_s_1000000": ..., "peak_gb_1000000": ..., "eager_verify_s_1000000": ...,
     "eager_peak_gb_1000000": ..., ..., "sizes": [...]}

Usage: ``python bench/verify.py [--millions 1,10,100] [--eager-ref REF] [--keep DIR]``
(the 100-million lake takes about 10 GB of disk while it is made and verified).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import polars as pl  # noqa: E402
from deltalake import write_deltalake  # noqa: E402

LOST = 7  # readings acknowledged but left out of the lake
RATE = 30_000  # events/s of the synthetic run
PARTITIONS = 4
CHUNK = 2_000_000  # readings made and written at a time
START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _event_id(i: pl.Expr) -> pl.Expr:
    """A UUID-shaped text unique to reading ``i``."""
    return pl.format(
        "{}-0000-4000-8000-{}",
        i.cast(pl.String).str.pad_start(8, "0"),
        i.cast(pl.String).str.pad_start(12, "0"),
    )


def _chunk(first: int, n: int, devices: int) -> pl.DataFrame:
    """Readings ``first`` to ``first + n``: ids, device, seq, times, partition, offset."""
    i = pl.int_range(first, first + n, eager=True).alias("i").to_frame()
    us = (pl.col("i") * 1_000_000 // RATE).cast(pl.Int64)
    t0 = int(START.timestamp() * 1_000_000)
    return i.select(
        _event_id(pl.col("i")).alias("event_id"),
        pl.format("dev-{}", (pl.col("i") % devices).cast(pl.String).str.pad_start(7, "0")).alias(
            "device_id"
        ),
        (pl.col("i") // devices + 1).alias("seq"),
        pl.from_epoch(us + t0, time_unit="us").dt.replace_time_zone("UTC").alias("event_time"),
        pl.from_epoch(us + t0 + 40_000, time_unit="us")
        .dt.replace_time_zone("UTC")
        .alias("kafka_timestamp"),
        pl.from_epoch(us + t0 + 900_000, time_unit="us")
        .dt.replace_time_zone("UTC")
        .alias("ingest_time"),
        pl.from_epoch(us + t0 + 2_000_000, time_unit="us")
        .dt.replace_time_zone("UTC")
        .alias("processed_time"),
        ((pl.col("i") % devices) % PARTITIONS).cast(pl.Int32).alias("partition"),
        (pl.col("i") // PARTITIONS).alias("offset"),
        pl.col("i"),
    )


def make_run(folder: Path, n: int) -> None:
    """The manifest and the lake of a synthetic run of ``n`` readings."""
    devices = max(PARTITIONS, n // 100)
    devices -= devices % PARTITIONS  # device d in partition d % 4: offsets i // 4 are dense
    lake, lost = folder / "lake", set(range(0, n, n // LOST)[:LOST])
    started = time.monotonic()
    for first in range(0, n, CHUNK):
        rows = _chunk(first, min(CHUNK, n - first), devices)
        kept = rows.filter(~pl.col("i").is_in(list(lost)))
        payload = pl.concat_str(
            pl.lit('{"event_id":"'), "event_id", pl.lit('","device_id":"'), "device_id",
            pl.lit('","seq":'), pl.col("seq").cast(pl.String), pl.lit(',"event_time":"'),
            pl.col("event_time").dt.strftime("%Y-%m-%dT%H:%M:%S%.3fZ"),
            pl.lit('","schema_version":1,"status":"online","temperature_c":21.5,'
                   '"humidity_pct":40.0,"battery_pct":88.0}'),
        ).cast(pl.Binary)  # fmt: skip
        bronze = kept.select(
            payload.alias("value"), "partition", "offset", "kafka_timestamp", "ingest_time"
        )
        write_deltalake(str(lake / "bronze/events"), bronze.to_arrow(), mode="append")
        silver = kept.drop("i")
        write_deltalake(str(lake / "silver/events"), silver.to_arrow(), mode="append")
        print(f"[bench] made {first + len(rows):,} of {n:,} readings", file=sys.stderr, flush=True)
    quarantine = pl.DataFrame(
        schema={"reason": pl.String, "raw": pl.String, "event_id": pl.String,
                "partition": pl.Int32, "offset": pl.Int64}
    )  # fmt: skip
    write_deltalake(str(lake / "silver/quarantine"), quarantine.to_arrow())
    _write_manifest(folder / "manifest.jsonl", n, devices)
    print(f"[bench] {n:,} readings made in {time.monotonic() - started:.0f} s", file=sys.stderr)


def _write_manifest(path: Path, n: int, devices: int) -> None:
    """The producer's JSON-lines manifest: a header, then one line per device."""
    header = {
        "type": "header", "manifest_version": 1,
        "run": {"seed": 1, "fleet_size": devices, "start_time": None, "replay": None},
        "totals": {"messages_sent": n, "messages_failed": 0, "events_acked": n},
    }  # fmt: skip
    per_device = n // devices
    seqs = pl.DataFrame({"s": range(per_device)})
    step = max(1, CHUNK // per_device)
    with path.open("wb") as fh:
        fh.write(json.dumps(header).encode() + b"\n")
        for d0 in range(0, devices, step):
            d = pl.DataFrame({"d": range(d0, min(devices, d0 + step))})
            # Reading i = s * devices + d is seq s + 1 of device d (as _chunk makes them).
            lines = (
                d.join(seqs, how="cross")
                .with_columns(_event_id(pl.col("s") * devices + pl.col("d")).alias("event_id"))
                .group_by("d", maintain_order=True)
                .agg((pl.col("s") + 1).alias("seqs"), pl.col("event_id").alias("event_ids"))
                .select(
                    pl.lit("device").alias("type"),
                    pl.format("dev-{}", pl.col("d").cast(pl.String).str.pad_start(7, "0")).alias(
                        "device_id"
                    ),
                    pl.col("seqs").list.len().alias("acked"),
                    "seqs",
                    "event_ids",
                )
            )
            buffer = BytesIO()
            lines.write_ndjson(buffer)
            fh.write(buffer.getvalue())


def verify_once(folder: Path, tree: Path, out: Path) -> dict[str, Any]:
    """``python -m loadtest verify`` from ``tree`` on the run in ``folder``: time and memory."""
    measure = (
        "import resource, runpy, sys, time\n"
        # This checkout is installed in editable mode: its finder must not shadow ``tree``.
        "sys.meta_path[:] = [f for f in sys.meta_path\n"
        "    if not (getattr(f, '__module__', '') or '').startswith('__editable__')]\n"
        f"sys.path.insert(0, {str(tree)!r})\n"
        "sys.argv = ['loadtest'] + sys.argv[1:]\n"
        "t = time.monotonic()\n"
        "try:\n"
        "    runpy.run_module('loadtest', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        "import loadtest.verify\n"
        f"assert loadtest.verify.__file__.startswith({str(tree)!r}), loadtest.verify.__file__\n"
        "print('BENCH', time.monotonic() - t, "
        "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, code, file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", measure, "verify", "--manifest", str(folder / "manifest.jsonl"),
         "--lake-root", str(folder / "lake"), "--slack-s", "30", "--out", str(out)],
        cwd=tree, capture_output=True, text=True, check=False,
    )  # fmt: skip
    line = next((ln for ln in proc.stderr.splitlines() if ln.startswith("BENCH ")), None)
    if line is None:
        raise SystemExit(f"verify from {tree} failed:\n{proc.stderr[-3000:]}")
    _, seconds, kb, _code = line.split()
    found = json.loads((out / "verify.json").read_text())
    missing = found["loss"]["missing_from_bronze"]
    if (
        missing != LOST
        or found["loss"]["total"] != LOST
        or found["duplicates"]["silver_duplicated_ids"]
    ):
        raise SystemExit(f"verify from {tree} found {found['loss']} instead of {LOST} lost")
    return {"verify_s": round(float(seconds), 1), "peak_gb": round(int(kb) / 1e6, 2)}


def eager_tree(ref: str, work: Path) -> Path:
    """The project's Python packages at git ref ``ref``, in a folder of their own."""
    archive = subprocess.run(
        ["git", "archive", ref, "common", "loadtest", "producer"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout  # fmt: skip
    tree = work / "eager"
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    return tree


def main() -> None:
    """Make each size's run, verify it, and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--millions", default="1,10,100", help="run sizes, in millions")
    parser.add_argument("--eager-ref", help="git ref of the in-memory verify, to run beside")
    parser.add_argument("--eager-max", type=float, default=10, help="its largest size, millions")
    parser.add_argument("--keep", type=Path, help="make the runs here and keep them")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-verify-"))
    work.mkdir(parents=True, exist_ok=True)
    eager = eager_tree(args.eager_ref, work) if args.eager_ref else None
    figures: dict[str, Any] = {"sizes": []}
    try:
        for millions in (float(m) for m in args.millions.split(",")):
            n = int(millions * 1_000_000)
            folder = work / f"run-{n}"
            if not (folder / "manifest.jsonl").is_file():
                make_run(folder, n)
            got = verify_once(folder, ROOT, work / f"out-{n}")
            figures[f"verify_s_{n}"], figures[f"peak_gb_{n}"] = got["verify_s"], got["peak_gb"]
            row = {"readings": n, **got}
            if eager is not None and millions <= args.eager_max:
                old = verify_once(folder, eager, work / f"eager-out-{n}")
                figures[f"eager_verify_s_{n}"] = old["verify_s"]
                figures[f"eager_peak_gb_{n}"] = old["peak_gb"]
                row |= {f"eager_{k}": v for k, v in old.items()}
            figures["sizes"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            if args.keep is None:
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
