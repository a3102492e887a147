"""Reading Delta tables with delta-rs and polars: no JVM.

Every read names its columns and, for time-series tables, a time range, so that
polars reads only those columns and skips row groups outside the range. Timestamps
come back as ``datetime[us, UTC]`` whether the table stores ``timestamp`` or
``timestamp_ntz`` (the latter is taken as UTC).

The table names and the columns each view reads follow ``docs/tables.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import unquote

import polars as pl
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from common import delta_scan
from common.contract import METRIC_NAMES
from common.delta_table import open_delta_table

METRIC_AVGS: tuple[str, ...] = tuple(f"{m}_avg" for m in METRIC_NAMES)

# The columns each view reads, per table.
OVERVIEW_GOLD_COLUMNS: tuple[str, ...] = (
    "window_start",
    "window_end",
    "device_id",
    "device_type",
    "site",
    "events",
    *METRIC_AVGS,
    "last_event_time",
)
DEVICE_GOLD_COLUMNS: tuple[str, ...] = (
    "window_start",
    "window_end",
    "device_id",
    "events",
    *(f"{m}_{s}" for m in METRIC_NAMES for s in ("min", "avg", "max")),
)
STATUS_COLUMNS: tuple[str, ...] = (
    "device_id",
    "device_type",
    "site",
    "building",
    "lat",
    "lon",
    "status",
    "battery_pct",
    "last_event_time",
)
DEVICE_DIM_COLUMNS: tuple[str, ...] = (
    "device_id",
    "device_type",
    "site",
    "building",
    "lat",
    "lon",
    "model",
    "firmware",
    "install_date",
    "battery_powered",
    *(f"{m}_{b}" for m in METRIC_NAMES for b in ("low", "high")),
)
ALERT_COLUMNS: tuple[str, ...] = (
    "alert_id",
    "device_id",
    "device_type",
    "site",
    "metric",
    "kind",
    "value",
    "threshold",
    "zscore",
    "event_time",
    "detected_time",
)
RECOVERY_COLUMNS: tuple[str, ...] = ("alert_id", "recovered_time", "time_to_recover_s")
SESSION_COLUMNS: tuple[str, ...] = (
    "device_id",
    "device_type",
    "site",
    "session_start",
    "session_end",
    "events",
    "duration_s",
)
PIPELINE_COLUMNS: tuple[str, ...] = (
    "query_name",
    "query_id",
    "run_id",
    "batch_id",
    "timestamp",
    "num_input_rows",
    "input_rows_per_s",
    "processed_rows_per_s",
    "batch_duration_ms",
    "watermark",
    "state_rows",
    "rows_dropped_by_watermark",
    "kafka_offsets_behind",
)
QUARANTINE_COLUMNS: tuple[str, ...] = ("reason", "ingest_time")
DRIFT_COLUMNS: tuple[str, ...] = ("field", "schema_version", "rows", "seen_time")
LATENCY_COLUMNS: tuple[str, ...] = ("event_time", "device_type", "site", "process_latency_s")


class TableUnreadableError(Exception):
    """A table exists but cannot be read as ``docs/tables.md`` describes it."""


@dataclass(frozen=True)
class TimeRange:
    """A half-open UTC interval ``[start, end)`` of one time column."""

    column: str
    start: datetime | None = None
    end: datetime | None = None


def open_table(uri: str, storage_options: Mapping[str, str] | None = None) -> DeltaTable | None:
    """The latest snapshot of the Delta table at ``uri``, or None if there is none yet.

    Args:
        uri: The table's location (``LakeSettings.table``).
        storage_options: How to reach it (``LakeSettings.storage_options``: S3's endpoint
            and keys); polars' reads of the snapshot use them too.
    """
    try:
        return open_delta_table(uri, storage_options)
    except TableNotFoundError:
        return None


def written(table: DeltaTable) -> bool:
    """Whether the snapshot holds a data file: whether a row was ever kept.

    The processor creates its tables empty at start: a table that exists may have none.
    """
    return bool(table.file_uris())


def _literal(value: datetime, dtype: pl.DataType) -> pl.Expr:
    """A datetime literal of the column's own type (aware or naive UTC)."""
    utc = value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(dtype, pl.Datetime) or dtype.time_zone is None:
        return pl.lit(utc.replace(tzinfo=None), dtype=pl.Datetime("us"))
    if dtype.time_zone == "UTC":
        return pl.lit(utc, dtype=pl.Datetime("us", "UTC"))
    return pl.lit(utc, dtype=pl.Datetime("us", "UTC")).dt.convert_time_zone(dtype.time_zone)


FileReader = Callable[[str, tuple[str, ...], tuple[tuple[str, str], ...]], pl.DataFrame]


def read_file(
    uri: str, columns: tuple[str, ...], equals: tuple[tuple[str, str], ...]
) -> pl.DataFrame:
    """Some columns of one Delta data file, with equal-to filters.

    Delta never changes a data file once written, so the result can be cached by
    ``uri``. Columns the file lacks (added to the table later) come back null.
    """
    scan = pl.scan_parquet(uri)
    present = scan.collect_schema()
    select = [pl.col(c) if c in present else pl.lit(None).alias(c) for c in columns]
    if any(c not in present for c, _ in equals):
        return utc_datetimes(scan.select(select).head(0).collect())
    predicates = [pl.col(c) == v for c, v in equals]
    return utc_datetimes(
        (scan.filter(*predicates) if predicates else scan).select(select).collect()
    )


def _local(uri: str) -> bool:
    return uri.startswith(("/", "file:"))


def data_files(
    table: DeltaTable, time: TimeRange | None, equals: Mapping[str, str] | None = None
) -> list[str] | None:
    """The snapshot's data files that may hold rows in ``time``, pruned by file statistics.

    A file is left out when its minimum and maximum of the time column put it outside
    the range, or those of an ``equals`` column (e.g. ``device_id``) cannot hold the
    value: a device's page then reads only the files that may hold its rows (all of
    them when every file spans the fleet's ids, as most do).

    Returns:
        File locations; None when the table needs delta-rs's full reader: partition
        columns, deletion vectors or other reader features, column mapping, or files
        not on the local file system.
    """
    metadata = table.metadata()
    if metadata.partition_columns:
        return None
    if set(table.protocol().reader_features or ()) - {"timestampNtz"}:
        return None
    if metadata.configuration.get("delta.columnMapping.mode", "none") != "none":
        return None
    uris = delta_scan.file_paths(table)
    if not all(_local(u) for u in uris):
        return None
    keep = [*_time_bounds(time), *(_holds(c, v) for c, v in (equals or {}).items())]
    if not keep:
        return uris
    actions = utc_datetimes(pl.DataFrame(table.get_add_actions(flatten=True)))
    # A column without statistics (for an equal-to filter, without text ones) prunes
    # nothing: its bounds read as unknown (null).
    schema = actions.schema
    columns = [*([(time.column, False)] if time else []), *((c, True) for c in equals or {})]
    unknown = [
        f"{side}.{column}"
        for column, text in columns
        for side in ("min", "max")
        if schema.get(f"{side}.{column}") is None
        or (text and schema[f"{side}.{column}"] != pl.String)
    ]
    actions = actions.with_columns(pl.lit(None).alias(c) for c in dict.fromkeys(unknown))
    by_name = {u.rsplit("/", 1)[-1]: u for u in uris}
    kept = []
    for path in actions.filter(*keep)["path"].to_list():
        uri = by_name.get(unquote(path).rsplit("/", 1)[-1])
        if uri is None:
            return None
        kept.append(uri)
    return kept


def _time_bounds(time: TimeRange | None) -> list[pl.Expr]:
    """Files' statistics that may hold rows in ``time`` (none: no range)."""
    if time is None:
        return []
    low, high = pl.col(f"min.{time.column}"), pl.col(f"max.{time.column}")
    bounds = []
    if time.start is not None:
        bounds.append(high.is_null() | (high >= _aware(time.start)))
    if time.end is not None:
        bounds.append(low.is_null() | (low < _aware(time.end)))
    return bounds


def _holds(column: str, value: str) -> pl.Expr:
    """Files' statistics that may hold ``value`` in ``column``."""
    low, high = pl.col(f"min.{column}"), pl.col(f"max.{column}")
    return (low.is_null() | (low <= value)) & (high.is_null() | (high >= value))


def _aware(value: datetime) -> datetime:
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)


def read(
    table: DeltaTable,
    name: str,
    columns: Iterable[str],
    *,
    time: TimeRange | None = None,
    equals: Mapping[str, str] | None = None,
    file_reader: FileReader = read_file,
) -> pl.DataFrame:
    """Read some columns of one snapshot, optionally a time range and equal-to filters.

    Plain tables are read file by file through ``file_reader`` (which may cache, as
    data files are immutable), skipping files whose statistics put them outside the
    range; a refresh after a commit then reads only the new files. Other tables go
    through polars' Delta reader.

    Args:
        table: The snapshot (see ``open_table``).
        name: Table name for messages, e.g. ``gold/alerts``.
        columns: Columns to read.
        time: Keep rows whose ``time.column`` lies in ``[start, end)``.
        equals: Keep rows whose column equals the value, e.g. ``{"device_id": "dev-00001"}``.
        file_reader: Reads one data file (default: ``read_file``).

    Returns:
        The rows; datetime columns as ``datetime[us, UTC]``.

    Raises:
        TableUnreadableError: a column is missing or the files cannot be read.
    """
    wanted = list(dict.fromkeys(columns))
    equals = dict(equals or {})
    try:
        scan = delta_scan.scan(table)
        schema = check_columns(
            scan, name, [*wanted, *equals, *([time.column] if time is not None else [])]
        )
        files = data_files(table, time, equals)
        if files is None:
            return _read_scan(scan, schema, wanted, time, equals)
        read_columns = tuple(dict.fromkeys([*wanted, *([time.column] if time else [])]))
        frames = [file_reader(uri, read_columns, tuple(sorted(equals.items()))) for uri in files]
        if not frames:
            return utc_datetimes(scan.select(wanted).head(0).collect())
        frame = pl.concat(frames, how="vertical_relaxed", rechunk=False)
    except (DeltaError, OSError, pl.exceptions.PolarsError) as exc:
        raise TableUnreadableError(f"{name}: {exc}") from exc
    if time is not None:
        if time.start is not None:
            frame = frame.filter(pl.col(time.column) >= _aware(time.start))
        if time.end is not None:
            frame = frame.filter(pl.col(time.column) < _aware(time.end))
    return frame.select(wanted).rechunk()  # contiguous: faster group-bys downstream


def check_columns(scan: pl.LazyFrame, name: str, needed: Iterable[str]) -> pl.Schema:
    """The table's schema, if it has every ``needed`` column.

    Raises:
        TableUnreadableError: naming the missing columns.
    """
    schema = scan.collect_schema()
    missing = [c for c in dict.fromkeys(needed) if c not in schema]
    if missing:
        raise TableUnreadableError(f"{name} has no column {', '.join(missing)}")
    return schema


def _read_scan(
    scan: pl.LazyFrame,
    schema: pl.Schema,
    wanted: list[str],
    time: TimeRange | None,
    equals: Mapping[str, str],
) -> pl.DataFrame:
    predicates: list[pl.Expr] = []
    if time is not None:
        dtype = schema[time.column]
        if time.start is not None:
            predicates.append(pl.col(time.column) >= _literal(time.start, dtype))
        if time.end is not None:
            predicates.append(pl.col(time.column) < _literal(time.end, dtype))
    for column, value in equals.items():
        predicates.append(pl.col(column) == value)
    query = (scan.filter(*predicates) if predicates else scan).select(wanted)
    return utc_datetimes(query.collect())


def utc_datetimes(frame: pl.DataFrame) -> pl.DataFrame:
    """Cast every datetime column to ``datetime[us, UTC]`` (naive values are taken as UTC)."""
    casts = []
    for column, dtype in frame.schema.items():
        if not isinstance(dtype, pl.Datetime):
            continue
        expr = pl.col(column).dt.cast_time_unit("us")
        if dtype.time_zone is None:
            expr = expr.dt.replace_time_zone("UTC")
        elif dtype.time_zone != "UTC":
            expr = expr.dt.convert_time_zone("UTC")
        casts.append(expr)
    return frame.with_columns(casts) if casts else frame
