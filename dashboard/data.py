"""Reading the gold tables with delta-rs and polars: no JVM.

Pure functions of a table location; the Streamlit pages cache their results.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

GOLD_DEVICE_1M = "gold/device_1m"


def read_table(
    uri: str, columns: list[str] | None = None, since: datetime | None = None,
    time_column: str = "window_start",
) -> pl.DataFrame | None:  # fmt: skip
    """Read a Delta table's columns, optionally only rows at or after ``since``.

    Args:
        uri: Table location.
        columns: Columns to read (default: all).
        since: Keep rows whose ``time_column`` is at or after this naive-UTC time.
        time_column: Column ``since`` filters on.

    Returns:
        The rows, or None when there is no table there yet.
    """
    try:
        table = DeltaTable(uri)
    except TableNotFoundError:
        return None
    filters = [(time_column, ">=", since)] if since is not None else None
    arrow = table.to_pyarrow_table(columns=columns, filters=filters)
    return pl.from_arrow(arrow)  # type: ignore[return-value]


@dataclass(frozen=True)
class Overview:
    """The headline numbers of the fleet over the lookback window."""

    active_devices: int
    events: int
    events_per_min: float
    windows: int
    latest_window: datetime | None


def overview(gold: pl.DataFrame, now: datetime, lookback: timedelta) -> Overview:
    """KPIs from the 1-minute device aggregates.

    Args:
        gold: Rows of ``gold/device_1m``.
        now: Reference time (naive UTC, like the table's timestamps).
        lookback: Window of time the KPIs cover.
    """
    recent = gold.filter(pl.col("window_start") >= now - lookback)
    events = int(recent["events"].sum()) if recent.height else 0
    minutes = recent["window_start"].n_unique() if recent.height else 0
    return Overview(
        active_devices=recent["device_id"].n_unique() if recent.height else 0,
        events=events,
        events_per_min=events / minutes if minutes else 0.0,
        windows=recent.height,
        latest_window=recent["window_start"].max() if recent.height else None,  # type: ignore[arg-type]
    )


def events_per_minute(gold: pl.DataFrame) -> pl.DataFrame:
    """Events per minute and device type, for the time-series chart."""
    return (
        gold.group_by("window_start", "device_type")
        .agg(pl.col("events").sum())
        .sort("window_start", "device_type")
    )
