"""Thin I/O for ``verify``: the manifest file and the Delta tables (delta-rs, no JVM)."""

from __future__ import annotations

import glob
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl
from deltalake.exceptions import TableNotFoundError

from common import cli, delta_scan
from common.cli import local_path
from common.delta_table import open_delta_table
from common.lake import CHECKPOINTS, Query, Table, table_location
from common.lake_settings import QUICK_LOOK, LakeSettings
from loadtest.truth import Truth, read_truth_files
from loadtest.verify import LakeFrames

COLUMNS: dict[str, list[str]] = {
    Table.BRONZE_EVENTS: ["value", "partition", "offset", "kafka_timestamp", "ingest_time"],
    Table.SILVER_EVENTS: [
        "event_id", "device_id", "seq", "event_time", "partition", "offset",
        "kafka_timestamp", "ingest_time", "processed_time",
    ],
    Table.SILVER_QUARANTINE: ["reason", "raw", "event_id", "partition", "offset"],
    Table.OPS_PIPELINE_METRICS: [
        "query_name", "timestamp", "batch_duration_ms", "num_input_rows",
        "rows_dropped_by_watermark",
    ],
}  # fmt: skip


class LakeReadError(RuntimeError):
    """A table or the manifest could not be read."""


def scan_table(
    root: str,
    name: str,
    *,
    required: bool = True,
    storage_options: Mapping[str, str] | None = None,
) -> pl.LazyFrame:
    """One table's ``COLUMNS``, scanned lazily (nothing is read until a query collects it).

    Args:
        root: The lake root (folder or URI).
        name: e.g. ``Table.SILVER_EVENTS``.
        required: Raise when the table does not exist; else return an empty frame.
        storage_options: How to reach the lake (``LakeSettings.storage_options``).

    Raises:
        LakeReadError: The table is missing (and required), cannot be read, or lacks a
            column.
    """
    uri = table_location(root, name)
    try:
        table = open_delta_table(uri, storage_options)
    except TableNotFoundError as exc:
        if not required:
            return pl.LazyFrame(schema={c: pl.Null for c in COLUMNS[name]})
        raise LakeReadError(
            f"no Delta table at {uri}: has the processor run against this lake?"
        ) from exc
    except OSError as exc:  # an object store that does not answer, or refuses the keys
        raise LakeReadError(f"cannot read {uri}: {exc}") from exc
    names = {f.name for f in table.schema().fields}
    lacking = [c for c in COLUMNS[name] if c not in names]
    if lacking:
        raise LakeReadError(f"{uri} lacks the columns {', '.join(lacking)} (see docs/tables.md)")
    return delta_scan.scan(table).select(COLUMNS[name])


def silver_committed_offsets(root: str) -> dict[int, int]:
    """Per Kafka partition, the offset silver's last committed batch read up to (exclusive).

    Read from silver's checkpoint under a local lake root. Empty when unknown: no batch
    committed yet, a source other than Kafka, or a lake on object storage.
    """
    local = local_path(root)
    if local is None:
        return {}
    checkpoint = local / CHECKPOINTS / Query.SILVER
    try:
        batches = [int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
        # "v1", the batch's metadata, then each source's offsets (silver's first: Kafka's).
        lines = (checkpoint / "offsets" / str(max(batches))).read_text().splitlines()
        source = json.loads(lines[2])
        return {int(p): int(o) for topic in source.values() for p, o in topic.items()}
    except (OSError, ValueError, IndexError, AttributeError, TypeError):
        return {}


def read_lake(root: str, storage_options: Mapping[str, str] | None = None) -> LakeFrames:
    """The tables ``verify`` reads, scanned lazily, and gold's commits.

    ``ops/pipeline_metrics`` may be absent (an empty frame).

    Args:
        root: The lake root (folder or URI).
        storage_options: How to reach the lake (``LakeSettings.storage_options``).
    """
    options = storage_options
    if options:  # an object store: a first look, within seconds if it does not answer
        first = table_location(root, Table.BRONZE_EVENTS)
        try:
            open_delta_table(first, dict(options) | QUICK_LOOK)
        except TableNotFoundError:
            pass  # said below, with the table's name
        except OSError as exc:
            raise LakeReadError(
                f"the lake's store did not answer for {first} ({cli.one_line(str(exc))}): "
                f"check {LakeSettings.env_name('s3_endpoint')} and the keys"
            ) from exc
    metrics = scan_table(root, Table.OPS_PIPELINE_METRICS, required=False, storage_options=options)
    if metrics.collect_schema().get("timestamp") == pl.Null:
        metrics = pl.LazyFrame(
            schema={
                "query_name": pl.String,
                "timestamp": pl.Datetime("us", "UTC"),
                "batch_duration_ms": pl.Int64,
                "num_input_rows": pl.Int64,
                "rows_dropped_by_watermark": pl.Int64,
            }
        )
    return LakeFrames(
        bronze=scan_table(root, Table.BRONZE_EVENTS, storage_options=options),
        silver=scan_table(root, Table.SILVER_EVENTS, storage_options=options),
        quarantine=scan_table(root, Table.SILVER_QUARANTINE, storage_options=options),
        metrics=metrics,
        silver_read_to=silver_committed_offsets(root),
        gold_commits=commit_times(
            root, Table.GOLD_DEVICE_1M, operations={"MERGE"}, storage_options=options
        ),
    )


def commit_times(
    root: str,
    name: str,
    operations: set[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> pl.DataFrame:
    """``committed``: the time of every commit of a table (its Delta history), oldest first.

    Args:
        root: The lake root.
        name: The table, e.g. ``gold/device_1m``.
        operations: Keep only these operations (e.g. ``{"MERGE"}``); None: all.
        storage_options: How to reach the lake (``LakeSettings.storage_options``).
    """
    try:
        history = open_delta_table(table_location(root, name), storage_options).history()
    except (TableNotFoundError, OSError):
        history = []
    stamps = sorted(
        int(c["timestamp"])
        for c in history
        if "timestamp" in c and (operations is None or c.get("operation") in operations)
    )
    return pl.DataFrame({"committed": stamps}, schema={"committed": pl.Int64}).select(
        pl.from_epoch("committed", time_unit="ms")
        .dt.replace_time_zone("UTC")
        .cast(pl.Datetime("us", "UTC"))
    )


def check_manifest(path: Path) -> None:
    """Fail unless ``path`` is a file, before anything else is read.

    Raises:
        LakeReadError: No file at ``path``, in one line naming it.
    """
    if not path.is_file():
        raise LakeReadError(
            f"no manifest at {path}: run the producer with --manifest-path (docs/manifest.md)"
        )


def named_files(specs: Sequence[str], what: str, pattern: str = "*.jsonl") -> list[Path]:
    """The files that files, folders (their ``pattern``) and globs name, in order, once each.

    Args:
        specs: File paths, folders, or glob patterns.
        what: What the files are, for messages (``manifest``, ``report``).
        pattern: The files a folder holds.

    Raises:
        LakeReadError: A name matches no file, in one line naming it.
    """
    out: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            found = sorted(p for p in path.glob(pattern) if p.is_file())
            if not found:
                raise LakeReadError(f"no {what} ({pattern}) in the folder {path}")
        elif glob.has_magic(spec):
            found = sorted(Path(p) for p in glob.glob(spec) if Path(p).is_file())
            if not found:
                raise LakeReadError(f"no {what} matches {spec}: check the pattern")
        elif what == "manifest":
            check_manifest(path)
            found = [path]
        elif not path.is_file():
            raise LakeReadError(f"no {what} at {path}")
        else:
            found = [path]
        out += [p for p in found if p not in out]
    return out


def read_truth(paths: Path | Sequence[Path]) -> Truth:
    """The producer's manifest file, or the manifests of a run's shards, as one ``Truth``.

    Raises:
        LakeReadError: A file is missing or not a manifest, or the manifests are not
            each shard of one run exactly once.
    """
    files = [paths] if isinstance(paths, Path) else list(paths)
    for path in files:
        check_manifest(path)
    try:
        return read_truth_files(files)
    except (ValueError, KeyError, TypeError) as exc:
        if len(files) == 1:
            raise LakeReadError(f"{files[0]} is not a readable producer manifest: {exc}") from exc
        raise LakeReadError(f"the {len(files)} manifests are not one run's: {exc}") from exc
