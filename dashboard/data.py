"""What the pages show, computed from table rows: polars in, DataFrames and dataclasses out.

No Streamlit and no I/O, so that every number on a page can be checked on a
hand-made frame (the producer's report is read by ``common.report.ProducerReport``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import cast
from urllib.parse import quote_plus, urlencode

import numpy as np
import polars as pl

from common.contract import FIELD_BY_NAME, METRIC_NAMES
from common.report import ProducerReport

STALE = "stale"
# Statuses as shown: the device's own report, or stale when nothing recent arrived.
STATUS_COLORS: dict[str, str] = {
    "online": "#2e7d32",
    "degraded": "#f9a825",
    "offline": "#c62828",
    STALE: "#757575",
}
STATUS_SHAPES: dict[str, str] = {
    "online": "circle",
    "degraded": "triangle-up",
    "offline": "square",
    STALE: "cross",
}
MINUTE = timedelta(minutes=1)
DEVICE_PAGE = "device"  # the URL path Streamlit gives views/device.py
# Device ids that quote_plus leaves as they are (letters, digits and _.-~).
_URL_SAFE = r"^[A-Za-z0-9_.~-]*$"
# What ``complete_windows`` leaves out, as the pages say it.
PARTIAL_MINUTES = (
    "the current minute and the first and last minute of a run are left out, as they "
    "are only partly filled"
)


def metric_label(metric: str) -> str:
    """``temperature_c`` -> ``Temperature (°C)``: label and unit come from the contract."""
    return FIELD_BY_NAME[metric].title


def format_duration(seconds: float | None) -> str:
    """``42.0`` -> ``42.0 s``, ``150`` -> ``2.5 min``, ``5400`` -> ``1.5 h``; None -> ``—``."""
    if seconds is None:
        return "—"
    if abs(seconds) < 60:
        return f"{seconds:.1f} s"
    if abs(seconds) < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:,.1f} h"


# ---------------------------------------------------------------- overview


@dataclass(frozen=True)
class OverviewKpis:
    """The headline numbers of the selected range, sites and device types.

    Attributes:
        active_devices: Devices whose last event is at most ``active_minutes`` old.
        events: Events in the range.
        events_per_min: Mean events per complete minute (see ``complete_windows``);
            None without one.
        latest_window: Start of the newest 1-minute window.
        freshness_s: Seconds from the newest event in gold to now.
        metric_averages: Event-weighted mean of each metric's 1-minute averages.
    """

    active_devices: int
    events: int
    events_per_min: float | None
    latest_window: datetime | None
    freshness_s: float | None
    metric_averages: dict[str, float]


@dataclass(frozen=True)
class GoldParts:
    """Partial aggregates of ``gold/device_1m`` rows, which combine by summing.

    Attributes:
        cube: Per window_start, device_type and site: ``events`` and, per metric,
            ``<metric>:sum`` (sum of avg x events) and ``<metric>:weight`` (events of
            the rows that have the metric).
        devices: Per device_id (with device_type and site, all three categorical): its
            newest ``last_event_time`` in each part. ``combine_parts`` stacks the parts'
            rows without grouping them again (that would be a group-by of the whole fleet
            per refresh), so a device may have a row per part: count distinct ids.
    """

    cube: pl.DataFrame
    devices: pl.DataFrame

    @property
    def empty(self) -> bool:
        """True when no row went in."""
        return self.cube.height == 0


CUBE_KEYS = ("window_start", "device_type", "site")
DEVICE_KEYS = ("device_id", "device_type", "site")
_EMPTY_GOLD_SCHEMA: dict[str, pl.DataType] = {
    "window_start": pl.Datetime("us", "UTC"),
    "device_id": pl.String(),
    "device_type": pl.String(),
    "site": pl.String(),
    "events": pl.Int64(),
    "last_event_time": pl.Datetime("us", "UTC"),
}


def fleet_cube(gold: pl.DataFrame) -> pl.DataFrame:
    """The ``GoldParts.cube`` of some ``gold/device_1m`` rows."""
    metrics = [m for m in METRIC_NAMES if f"{m}_avg" in gold.columns]
    weighted = gold.lazy().select(
        *CUBE_KEYS,
        "events",
        *[(pl.col(f"{m}_avg") * pl.col("events")).alias(f"{m}:sum") for m in metrics],
        *[
            pl.when(pl.col(f"{m}_avg").is_not_null())
            .then(pl.col("events"))
            .otherwise(0)
            .alias(f"{m}:weight")
            for m in metrics
        ],
    )
    # Plain sums only: polars' fastest group-by path; lazy, so that the weighted
    # columns are never materialized whole.
    return weighted.group_by(*CUBE_KEYS).agg(pl.all().sum()).collect()


def gold_parts(gold: pl.DataFrame) -> GoldParts:
    """Partial aggregates of some ``gold/device_1m`` rows (e.g. one data file's)."""
    # Categorical keys: the parts of every file stay cached (a row per device and file,
    # a million on a large fleet), and the KPIs count their distinct ids as integers.
    devices = gold.select(pl.col(DEVICE_KEYS).cast(pl.Categorical), "last_event_time")
    window = gold["window_start"]
    # Rows of one window have a row per device already (the table's key): no group-by.
    if window.min() != window.max():
        devices = devices.group_by(*DEVICE_KEYS).agg(pl.col("last_event_time").max())
    return GoldParts(cube=fleet_cube(gold), devices=devices)


def distinct_count(values: pl.Series) -> int:
    """Distinct non-null values; a categorical's through a bitmap of its codes.

    The KPIs count a million distinct device ids among several million rows on every
    refresh: marking their integer codes is a few times faster than hashing them.
    """
    if not isinstance(values.dtype, pl.Categorical):
        return values.drop_nulls().n_unique()
    codes = values.drop_nulls().to_physical().to_numpy()
    if codes.size == 0:
        return 0
    seen = np.zeros(int(codes.max()) + 1, dtype=bool)
    seen[codes] = True
    return int(seen.sum())


def _within(column: str, start: datetime | None, end: datetime | None) -> list[pl.Expr]:
    bounds = []
    if start is not None:
        bounds.append(pl.col(column) >= start)
    if end is not None:
        bounds.append(pl.col(column) < end)
    return bounds


def combine_parts(
    parts: list[GoldParts], start: datetime | None = None, end: datetime | None = None
) -> GoldParts:
    """Sum partial aggregates and keep the windows starting in ``[start, end)``.

    The cubes are summed; the devices' rows are stacked (see ``GoldParts.devices``).
    A device's row of a part is kept if its newest event time lies in ``[start, end)``: with
    whole-minute bounds, it does exactly when the device has a window in the range.
    With an ``end``, build the parts from rows already within it: a part's newest time
    for a device may lie after ``end`` while older rows of the part are inside.
    """
    if not parts:
        return gold_parts(pl.DataFrame(schema=_EMPTY_GOLD_SCHEMA))
    cube = pl.concat([p.cube for p in parts], how="diagonal_relaxed")
    devices = pl.concat([p.devices for p in parts], how="vertical_relaxed")
    if bounds := _within("window_start", start, end):
        cube = cube.filter(*bounds)
    if bounds := _within("last_event_time", start, end):
        devices = devices.filter(*bounds)
    sums = [c for c in cube.columns if c not in CUBE_KEYS]
    return GoldParts(
        cube=cube.group_by(*CUBE_KEYS).agg(pl.col(sums).fill_null(0).sum()),
        # Not grouped again: overview_kpis counts distinct ids and takes the newest time,
        # which the stacked rows give as they are.
        devices=devices,
    )


def scope_parts(parts: GoldParts, scope: Callable[[pl.DataFrame], pl.DataFrame]) -> GoldParts:
    """The parts of the selected sites and device types (e.g. ``Filters.scope``)."""
    return GoldParts(cube=scope(parts.cube), devices=scope(parts.devices))


def overview_kpis(parts: GoldParts, now: datetime, active_minutes: int) -> OverviewKpis:
    """KPIs from the partial aggregates of the range's ``gold/device_1m`` rows.

    Args:
        parts: ``combine_parts`` of the range, scoped to the selected sites and types.
        now: Current time (aware UTC).
        active_minutes: A device is active if its last event is this recent.
    """
    if parts.empty:
        return OverviewKpis(0, 0, None, None, None, {})
    cube, devices = parts.cube, parts.devices
    complete = complete_windows(cube, now)
    metrics = [m for m in METRIC_NAMES if f"{m}:weight" in cube.columns]
    totals = cube.select(
        [pl.col(f"{m}:sum").sum() for m in metrics] + [pl.col(f"{m}:weight").sum() for m in metrics]
    ).row(0, named=True)
    averages = {
        m: float(totals[f"{m}:sum"]) / totals[f"{m}:weight"]
        for m in metrics
        if totals[f"{m}:weight"]
    }
    minutes = complete["window_start"].n_unique()
    newest = devices["last_event_time"].max()
    active = devices.filter(pl.col("last_event_time") >= now - timedelta(minutes=active_minutes))
    return OverviewKpis(
        active_devices=distinct_count(active["device_id"]),
        events=int(cube["events"].sum()),
        events_per_min=float(complete["events"].sum()) / minutes if minutes else None,
        latest_window=cube["window_start"].max(),  # type: ignore[arg-type]  # polars types a max as any Python value; of a datetime column it is a datetime
        # A device clock slightly ahead of the dashboard's reads as fresh, not negative.
        freshness_s=(
            max(0.0, (now - cast(datetime, newest)).total_seconds()) if newest is not None else None
        ),
        metric_averages=averages,
    )


def complete_windows(cube: pl.DataFrame, now: datetime) -> pl.DataFrame:
    """Rows of the 1-minute windows that are complete.

    A window is complete when it has ended by ``now`` and the minutes on both sides
    of it have data: the current minute, and the first and last minute of a run
    (the producer starts and stops mid-minute), may be only partly filled, and the
    last ended minute still gets rows until the processor has moved past it.

    Args:
        cube: Rows of ``fleet_cube`` (or of ``gold/device_1m``), one scope.
        now: Current time (aware UTC).
    """
    present = cube["window_start"].unique().implode()
    return cube.filter(
        pl.col("window_start") + MINUTE <= now,
        (pl.col("window_start") - MINUTE).is_in(present),
        (pl.col("window_start") + MINUTE).is_in(present),
    )


def events_per_minute(cube: pl.DataFrame, by: str) -> pl.DataFrame:
    """Events in each 1-minute window per value of ``by`` (``device_type`` or ``site``).

    Args:
        cube: Rows of ``fleet_cube`` (or of ``gold/device_1m``).
        by: Column to split the series by.
    """
    return cube.group_by("window_start", by).agg(pl.col("events").sum()).sort("window_start", by)


def metric_over_time(cube: pl.DataFrame, metric: str, by: str = "device_type") -> pl.DataFrame:
    """Event-weighted mean of one metric per 1-minute window and value of ``by``.

    Args:
        cube: Rows of ``fleet_cube``.
        metric: Contract metric name.
        by: Column to split the series by.
    """
    if f"{metric}:weight" not in cube.columns:
        return pl.DataFrame(schema={"window_start": pl.Datetime("us", "UTC"), by: pl.String})
    return (
        cube.group_by("window_start", by)
        .agg(pl.col(f"{metric}:sum").sum(), pl.col(f"{metric}:weight").sum())
        .filter(pl.col(f"{metric}:weight") > 0)
        .select(
            "window_start", by, (pl.col(f"{metric}:sum") / pl.col(f"{metric}:weight")).alias(metric)
        )
        .sort("window_start", by)
    )


def metrics_present(gold: pl.DataFrame, suffix: str = "avg") -> list[str]:
    """Metrics with at least one non-null ``<metric>_<suffix>`` value, in contract order."""
    present = []
    for metric in METRIC_NAMES:
        column = f"{metric}_{suffix}"
        if column in gold.columns and gold[column].null_count() < gold.height:
            present.append(metric)
    return present


@dataclass(frozen=True)
class Latency:
    """End-to-end latency of recent events: event time -> processed in silver."""

    p50_s: float
    p95_s: float
    events: int


def latency(silver: pl.DataFrame) -> Latency | None:
    """Percentiles (linear interpolation) of ``process_latency_s``; None without rows."""
    values = silver["process_latency_s"].drop_nulls()
    if values.len() == 0:
        return None
    return Latency(
        p50_s=float(values.quantile(0.5, "linear")),  # type: ignore[arg-type]  # None only for no values, returned above
        p95_s=float(values.quantile(0.95, "linear")),  # type: ignore[arg-type]  # None only for no values, returned above
        events=values.len(),
    )


def shown_status(status: pl.DataFrame, now: datetime, active_minutes: int) -> pl.DataFrame:
    """``gold/device_status`` rows with the status to show.

    ``status`` becomes ``stale`` for a device whose last event is older than
    ``active_minutes`` (the threshold of the Active devices KPI, so the two agree);
    ``reported_status`` keeps what the device last said.
    """
    recent = pl.col("last_event_time") >= now - timedelta(minutes=active_minutes)
    return status.with_columns(
        reported_status=pl.col("status"),
        status=pl.when(recent).then(pl.col("status")).otherwise(pl.lit(STALE)),
    )


def status_counts(status: pl.DataFrame) -> dict[str, int]:
    """Devices per status (of ``shown_status``), every known status included."""
    counts = dict.fromkeys(STATUS_COLORS, 0)
    for row in status.group_by("status").len().iter_rows():
        counts[row[0]] = row[1]
    return counts


# Problems first, so that they sit at the top left of their site's block.
_SEVERITY = {"offline": 0, "degraded": 1, STALE: 2, "online": 3}


def device_grid(status: pl.DataFrame) -> pl.DataFrame:
    """Each device's cell in a grid per site, no coordinates needed.

    Every site gets a block of ``per_row`` columns (the square root of its largest
    site's device count, rounded up); within it, devices go row by row, offline,
    degraded and stale ones first, then by id.

    Args:
        status: Rows of ``shown_status``.

    Returns:
        The rows with ``col`` and ``row`` (0-based cell of the device in its site).
    """
    if status.height == 0:
        return status.with_columns(col=pl.lit(0), row=pl.lit(0))
    largest = int(status.group_by("site").len()["len"].max())  # type: ignore[arg-type]  # polars types a max as any Python value; of a count it is an int
    per_row = max(1, math.ceil(math.sqrt(largest)))
    ordered = status.with_columns(
        _severity=pl.col("status").replace_strict(_SEVERITY, default=len(_SEVERITY))
    ).sort("site", "_severity", "device_id")
    rank = pl.int_range(pl.len()).over("site")
    return ordered.with_columns(col=rank % per_row, row=rank // per_row).drop("_severity")


def with_device_links(grid: pl.DataFrame, params: Mapping[str, str | list[str]]) -> pl.DataFrame:
    """``grid`` with ``link``: the relative URL of each device's Device page.

    Args:
        grid: Rows with ``device_id``.
        params: Query parameters the link keeps (the view's filters).
    """
    rest = urlencode(params, doseq=True)
    tail = f"&{rest}" if rest else ""
    # One column expression, not a Python string per device (50,000 on a large fleet):
    # only ids with characters quote_plus changes are encoded one by one.
    ids = grid["device_id"]
    escaped = {d: quote_plus(d) for d in ids.filter(~ids.str.contains(_URL_SAFE)).unique()}
    encoded = ids.replace(escaped) if escaped else ids
    return grid.with_columns(
        link=pl.concat_str(pl.lit(f"{DEVICE_PAGE}?device="), encoded, pl.lit(tail))
    )


# The devices grid shows one page of the fleet at a time: bounded rows per render.
PAGE_SIZES: tuple[int, ...] = (50, 100, 200, 500, 1000)
DEFAULT_PAGE_SIZE = 200


def page_count(rows: int, size: int) -> int:
    """Pages of ``size`` rows that ``rows`` rows fill (at least one, an empty page)."""
    return max(1, math.ceil(rows / max(1, size)))


def attention_page(status: pl.DataFrame, page: int, size: int) -> pl.DataFrame:
    """One page of devices, those that need attention first.

    The order is offline, degraded, stale, online (any other status last), each by
    device id: a fixed order, so a page keeps its devices from one refresh to the
    next unless their status changes. Only the rows up to the page's end are ordered
    (a partial sort), not the whole fleet.

    Args:
        status: Rows of ``shown_status``.
        page: The page, from 1.
        size: Rows per page.

    Returns:
        The page's rows in that order; none past the last page.
    """
    page, size = max(1, page), max(1, size)
    start, end = (page - 1) * size, page * size
    ranked = status.with_columns(
        _severity=pl.col("status").replace_strict(_SEVERITY, default=len(_SEVERITY))
    )
    # Only the statuses whose rows reach into the page are ordered: page 1 of a million
    # devices with a thousand offline sorts those thousand, not the fleet.
    keep, skipped, before = [], 0, 0
    for severity, rows in ranked.group_by("_severity").len().sort("_severity").iter_rows():
        if before + rows > start and before < end:
            keep.append(severity)
        elif before + rows <= start:
            skipped += rows
        before += rows
    reaching = ranked.filter(pl.col("_severity").is_in(keep))
    top = reaching.bottom_k(end - skipped, by=["_severity", "device_id"])
    return top.sort("_severity", "device_id").slice(start - skipped, size).drop("_severity")


# ---------------------------------------------------------------- device search

SEARCH_LIMIT = 50  # matches offered to pick from: a search never lists the fleet
INDEX_COLUMNS = ("device_id", "site", "device_type")


def device_index(devices: pl.DataFrame) -> pl.DataFrame:
    """The devices a search looks through: one row per id, by id.

    Args:
        devices: Rows with ``device_id``, ``site`` and ``device_type`` (e.g.
            ``dim/devices``), possibly several per id; null ids are left out.

    Returns:
        ``device_id``, ``site`` and ``device_type`` as strings, sorted by id.
    """
    return (
        devices.select(pl.col(INDEX_COLUMNS).cast(pl.String))
        .drop_nulls("device_id")
        .unique("device_id", keep="first", maintain_order=True)
        .sort("device_id")
    )


@dataclass(frozen=True)
class DeviceMatches:
    """What a device search found.

    Attributes:
        shown: At most the limit's rows of ``device_index``: ids that start with the
            query first, then those that contain it elsewhere, each group by id.
        total: How many devices match.
    """

    shown: pl.DataFrame
    total: int


def search_devices(
    index: pl.DataFrame,
    query: str,
    *,
    sites: Sequence[str] = (),
    device_types: Sequence[str] = (),
    limit: int = SEARCH_LIMIT,
) -> DeviceMatches:
    """Devices whose id contains ``query`` (case-insensitive), in the sites and types.

    Args:
        index: Rows of ``device_index`` (sorted by id).
        query: Text to find in the id; blank matches every device.
        sites: Keep these sites only (none: all).
        device_types: Keep these device types only (none: all).
        limit: Most rows in ``shown``.

    Returns:
        The first ``limit`` matches and their total.
    """
    frame = index
    if sites:
        frame = frame.filter(pl.col("site").is_in(list(sites)))
    if device_types:
        frame = frame.filter(pl.col("device_type").is_in(list(device_types)))
    needle = query.strip().lower()
    if not needle:
        return DeviceMatches(shown=frame.head(limit), total=frame.height)
    at = pl.col("device_id").str.to_lowercase().str.find(needle, literal=True)
    found = frame.with_columns(_at=at).filter(pl.col("_at").is_not_null())
    # The index is sorted by id, so each group's first rows are its smallest ids.
    prefixed = found.filter(pl.col("_at") == 0).head(limit)
    inside = found.filter(pl.col("_at") > 0).head(limit - prefixed.height)
    return DeviceMatches(shown=pl.concat([prefixed, inside]).drop("_at"), total=found.height)


# ---------------------------------------------------------------- alerts


def alerts_with_recovery(alerts: pl.DataFrame, recoveries: pl.DataFrame | None) -> pl.DataFrame:
    """Alerts joined with their recovery, newest first, with a ``state`` column.

    ``state`` is ``recovered`` when the alert has a recovery time, else ``open`` (not
    recovered yet, or not within the recovery window).
    """
    if recoveries is None:
        recoveries = pl.DataFrame(
            schema={
                "alert_id": pl.String,
                "recovered_time": pl.Datetime("us", "UTC"),
                "time_to_recover_s": pl.Float64,
            }
        )
    joined = alerts.join(
        recoveries.select("alert_id", "recovered_time", "time_to_recover_s").unique("alert_id"),
        on="alert_id",
        how="left",
    )
    return joined.with_columns(
        state=pl.when(pl.col("recovered_time").is_not_null())
        .then(pl.lit("recovered"))
        .otherwise(pl.lit("open"))
    ).sort("event_time", "alert_id", descending=[True, False])


@dataclass(frozen=True)
class AlertSummary:
    """Counts and time to recover of a set of alerts."""

    total: int
    open: int
    recovered: int
    median_ttr_s: float | None
    p95_ttr_s: float | None


def alert_summary(alerts: pl.DataFrame) -> AlertSummary:
    """Summary of rows from ``alerts_with_recovery``."""
    ttr = alerts["time_to_recover_s"].drop_nulls()
    recovered = int((alerts["state"] == "recovered").sum())
    return AlertSummary(
        total=alerts.height,
        open=alerts.height - recovered,
        recovered=recovered,
        median_ttr_s=float(ttr.quantile(0.5, "linear")) if ttr.len() else None,  # type: ignore[arg-type]  # None only for no values
        p95_ttr_s=float(ttr.quantile(0.95, "linear")) if ttr.len() else None,  # type: ignore[arg-type]  # None only for no values
    )


def alerts_per_minute(alerts: pl.DataFrame, now: datetime) -> pl.DataFrame:
    """Alerts per ended minute of event time and metric (the current minute is left out)."""
    return (
        alerts.with_columns(minute=pl.col("event_time").dt.truncate("1m"))
        .filter(pl.col("minute") + MINUTE <= now)
        .group_by("minute", "metric")
        .len("alerts")
        .sort("minute", "metric")
    )


# ---------------------------------------------------------------- device


def thresholds(profile: dict[str, object] | None) -> dict[str, tuple[float | None, float | None]]:
    """(low, high) alert thresholds per metric from a ``dim/devices`` row."""
    if profile is None:
        return {}
    out: dict[str, tuple[float | None, float | None]] = {}
    for metric in METRIC_NAMES:
        low, high = profile.get(f"{metric}_low"), profile.get(f"{metric}_high")
        if low is not None or high is not None:
            out[metric] = (low, high)  # type: ignore[assignment]  # a dim/devices row's thresholds are doubles or null
    return out


def metric_band(gold: pl.DataFrame, metric: str) -> pl.DataFrame:
    """A device's 1-minute min, avg and max of one metric over time."""
    return (
        gold.filter(pl.col(f"{metric}_avg").is_not_null())
        .select(
            "window_start",
            pl.col(f"{metric}_min").alias("min"),
            pl.col(f"{metric}_avg").alias("avg"),
            pl.col(f"{metric}_max").alias("max"),
        )
        .sort("window_start")
    )


def threshold_breaches(band: pl.DataFrame, low: float | None, high: float | None) -> int:
    """1-minute windows whose min is below ``low`` or max above ``high``."""
    condition = pl.lit(False)
    if low is not None:
        condition = condition | (pl.col("min") < low)
    if high is not None:
        condition = condition | (pl.col("max") > high)
    return band.filter(condition).height


@dataclass(frozen=True)
class SessionSummary:
    """A device's connectivity sessions in the range."""

    sessions: int
    connected_s: float
    longest_s: float | None
    events: int


def session_summary(sessions: pl.DataFrame) -> SessionSummary:
    """Count, total and longest duration of sessions."""
    if sessions.height == 0:
        return SessionSummary(0, 0.0, None, 0)
    return SessionSummary(
        sessions=sessions.height,
        connected_s=float(sessions["duration_s"].sum()),
        longest_s=float(sessions["duration_s"].max()),  # type: ignore[arg-type]  # polars types a max as any Python value; of a float column it is a float
        events=int(sessions["events"].sum()),
    )


# ---------------------------------------------------------------- pipeline health


def query_health(metrics: pl.DataFrame) -> pl.DataFrame:
    """One row per streaming query (by name): its latest progress and the range's totals.

    Columns: query_name, last_batch_time, batch_id, input_rows_per_s,
    processed_rows_per_s, batch_duration_ms, watermark_delay_s (progress time minus
    watermark; null before the first watermark), kafka_offsets_behind, state_rows,
    rows_dropped_by_watermark (sum over the range), batches (in the range).
    """
    ordered = metrics.sort("timestamp", "batch_id")
    latest = ordered.group_by("query_name").agg(
        pl.col("timestamp").last().alias("last_batch_time"),
        pl.col("batch_id").last(),
        pl.col("input_rows_per_s").last(),
        pl.col("processed_rows_per_s").last(),
        pl.col("batch_duration_ms").last(),
        (pl.col("timestamp") - pl.col("watermark"))
        .last()
        .dt.total_milliseconds()
        .truediv(1000.0)
        .alias("watermark_delay_s"),
        pl.col("kafka_offsets_behind").last(),
        pl.col("state_rows").last(),
        pl.col("rows_dropped_by_watermark").sum(),
        pl.len().alias("batches"),
    )
    return latest.sort("query_name")


def quarantine_counts(quarantine: pl.DataFrame) -> pl.DataFrame:
    """Quarantined rows per reason, most frequent first."""
    return (
        quarantine.group_by("reason").len("rows").sort(["rows", "reason"], descending=[True, False])
    )


def schema_drift(drift: pl.DataFrame) -> pl.DataFrame:
    """Undeclared fields seen so far, one row per field, most rows first.

    Args:
        drift: Rows of ``ops/schema_drift`` (one per micro-batch, field and version).

    Returns:
        ``field``, ``rows`` (that carried it), ``first_seen`` and ``last_seen`` (when
        the processor saw it), ``versions`` (the schema versions that sent it).
    """
    return (
        drift.group_by("field")
        .agg(
            pl.col("rows").sum(),
            pl.col("seen_time").min().alias("first_seen"),
            pl.col("seen_time").max().alias("last_seen"),
            pl.col("schema_version").unique().sort().alias("versions"),
        )
        .sort(["rows", "field"], descending=[True, False])
    )


def drift_line(field: str, rows: int, since: datetime, now: datetime) -> str:
    """``new field `signal_dbm` seen on 312 rows since 14:05 UTC`` (the date too, if not today)."""
    when = since.astimezone(UTC)
    shown = (
        f"{when:%H:%M}" if when.date() == now.astimezone(UTC).date() else f"{when:%Y-%m-%d %H:%M}"
    )
    return f"new field `{field}` seen on {rows:,} row{'s' if rows != 1 else ''} since {shown} UTC"


# ---------------------------------------------------------------- load test


def per_second_frame(report: ProducerReport) -> pl.DataFrame:
    """Events sent in each second of the run, with the target rate alongside."""
    return pl.DataFrame(
        {
            "second": list(range(1, len(report.per_second) + 1)),
            "sent": report.per_second,
            "target": [report.target_rate] * len(report.per_second),
        },
        schema={"second": pl.Int64, "sent": pl.Int64, "target": pl.Float64},
    )
