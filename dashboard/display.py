"""How the pages word and shape what they show: labels, groupings, empty states.

Pure functions (polars in, frames and strings out, no Streamlit and no I/O), so that
each choice a page makes can be checked on a hand-made frame.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

import polars as pl

from common.alerts import ALERT_KINDS
from common.contract import FIELD_BY_NAME
from common.report import ProducerReport

# ---------------------------------------------------------------- KPI definitions


def window_text(seconds: float) -> str:
    """A window as said: ``300`` -> ``5 min``, ``3600`` -> ``1 h``, ``90`` -> ``90 s``."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def latency_label(window_s: float) -> str:
    """The latency KPI's label, with the window it is measured over."""
    return f"Latency p50, last {window_text(window_s)}"


def latency_help(window_s: float, events: int | None, p95_s: float | None, setting: str) -> str:
    """What the latency KPI measures, and why it can exceed the data freshness beside it."""
    over = (
        f"over the {events:,} events whose event time is in the last {window_text(window_s)} "
        f"({setting}); p95 {p95_s:.1f} s"
        if events is not None and p95_s is not None
        else f"over the events of the last {window_text(window_s)} ({setting}): none yet"
    )
    return (
        f"End to end: from a reading's event time to its processing into the lake, {over}. "
        "A backlog "
        "processed late (the processor starting after the producer, say) keeps it high "
        "until those events leave the window; data freshness is the age of the newest "
        "event alone."
    )


FRESHNESS_LABEL = "Freshness, newest event"


def open_alerts_label(range_text: str) -> str:
    """The open alerts KPI's label, with the range it counts: ``Open alerts, last 1 h``."""
    return f"Open alerts, {range_text[0].lower()}{range_text[1:]}"


OPEN_ALERTS_HELP = (
    "Alerts of the lake's history (the detector's threshold and z-score alerts, one per "
    "reading and metric whatever kinds it raised) in the range without a recovery yet. "
    "The Alerts page's live feed is another path: the threshold alerts the real-time "
    "path sent, newest first, open or recovered."
)


# ---------------------------------------------------------------- alerts


def metric_label(metric: str) -> str:
    """``temperature_c`` -> ``Temperature (°C)``; a name the contract does not know as is."""
    field = FIELD_BY_NAME.get(metric)
    return field.title if field is not None else metric


def metric_labels(frame: pl.DataFrame, column: str = "metric") -> pl.DataFrame:
    """``frame`` with the metric names in ``column`` replaced by the contract's labels."""
    names = frame[column].unique().drop_nulls().to_list()
    mapping = {name: metric_label(name) for name in names}
    return frame.with_columns(pl.col(column).replace_strict(mapping, default=pl.col(column)))


READING_KEYS = ("device_id", "event_time", "metric")
GROUPED_COLUMNS = (
    "event_time", "device_id", "device_type", "site", "metric", "kinds", "value",
    "threshold", "zscore", "state", "recovered_time", "time_to_recover_s",
)  # fmt: skip
_KIND_ORDER = {kind: i for i, kind in enumerate(ALERT_KINDS)}


def group_alerts(alerts: pl.DataFrame) -> pl.DataFrame:
    """One row per reading and metric that alerted, with the kinds it raised.

    The detector raises one alert per kind (``threshold_high`` and ``zscore`` for one
    spike, say); a person reads them as one event. A reading is its device and event
    time (``gold/alerts`` keeps no event id).

    Args:
        alerts: Rows of ``data.alerts_with_recovery`` (``state``, ``recovered_time``,
            ``time_to_recover_s`` included).

    Returns:
        ``event_time``, ``device_id``, ``device_type``, ``site``, ``metric``, ``kinds``
        (list, in ``ALERT_KINDS`` order), ``value``, ``threshold`` (of the threshold
        kind, null for a z-score alone), ``zscore``, ``state`` (``open`` while any of
        its kinds is open), ``recovered_time`` and ``time_to_recover_s`` (the latest
        kind's, null while open); newest first, then by device and metric.
    """
    rank = pl.col("kind").replace_strict(_KIND_ORDER, default=len(_KIND_ORDER))
    recovered = pl.col("state").eq("recovered").all()
    return (
        alerts.sort(rank)
        .group_by(READING_KEYS, maintain_order=True)
        .agg(
            pl.col("device_type").first(),
            pl.col("site").first(),
            pl.col("kind").unique(maintain_order=True).alias("kinds"),
            pl.col("value").first(),
            pl.col("threshold").drop_nulls().first(),
            pl.col("zscore").drop_nulls().first(),
            pl.when(recovered).then(pl.lit("recovered")).otherwise(pl.lit("open")).alias("state"),
            pl.when(recovered).then(pl.col("recovered_time").max()).alias("recovered_time"),
            pl.when(recovered).then(pl.col("time_to_recover_s").max()).alias("time_to_recover_s"),
        )
        .select(GROUPED_COLUMNS)
        .sort(["event_time", "device_id", "metric"], descending=[True, False, False])
    )


def with_any_kind(grouped: pl.DataFrame, kinds: list[str]) -> pl.DataFrame:
    """The rows of ``group_alerts`` that raised at least one of ``kinds`` (all if none)."""
    if not kinds:
        return grouped
    return grouped.filter(pl.col("kinds").list.eval(pl.element().is_in(kinds)).list.any())


def alert_rows(grouped: pl.DataFrame) -> pl.DataFrame:
    """Rows of ``group_alerts`` as a table shows them: contract labels, kinds as text."""
    return metric_labels(grouped).with_columns(pl.col("kinds").list.join(", "))


# ---------------------------------------------------------------- load test


INJECTED = "injected on purpose"
DELIVERY_ERROR = "delivery error"


def delivery_errors(report: ProducerReport) -> pl.DataFrame:
    """The report's failed messages, the injected faults apart from real errors.

    The producer counts every failure in ``errors`` and those it caused on purpose
    (its fault injection's oversized messages) in ``expected_errors`` as well.

    Returns:
        ``kind``, ``count``, ``cause`` (``INJECTED`` or ``DELIVERY_ERROR``): real errors
        first, most frequent first within each.
    """
    injected: Mapping[str, int] = report.expected_errors
    rows: list[tuple[str, int, str]] = []
    for kind, count in report.errors.items():
        fake = min(count, injected.get(kind, 0))
        if count - fake:
            rows.append((kind, count - fake, DELIVERY_ERROR))
        if fake:
            rows.append((kind, fake, INJECTED))
    frame = pl.DataFrame(
        rows, schema={"kind": pl.String, "count": pl.Int64, "cause": pl.String}, orient="row"
    )
    return frame.sort(
        [pl.col("cause") == INJECTED, "count", "kind"], descending=[False, True, False]
    )


# ---------------------------------------------------------------- empty states


class Emptiness(StrEnum):
    """Why a table has no rows to show."""

    UNREADABLE = "unreadable"  # it exists but cannot be read
    NOT_WRITTEN = "not_written"  # no table, or a table without a single row
    NOT_SELECTED = "not_selected"  # it has rows, none in the selected range or scope


def emptiness(*, problem: str | None, exists: bool, ranged: bool, restricted: bool) -> Emptiness:
    """Which empty state applies to a read without rows.

    Args:
        problem: Why the table cannot be read, if it cannot.
        exists: Whether the table exists and has held a row.
        ranged: Whether the read kept a time range only.
        restricted: Whether sites or device types were selected.
    """
    if problem is not None:
        return Emptiness.UNREADABLE
    if not exists or not (ranged or restricted):
        return Emptiness.NOT_WRITTEN
    return Emptiness.NOT_SELECTED


def empty_text(
    *,
    emptiness: Emptiness,
    noun: str,
    none: str,
    why: str,
    late: str,
    ranged: bool,
    restricted: bool,
    problem: str | None = None,
    already: str | None = None,
) -> str:
    """The empty state's words; never at odds with what the page shows beside it.

    Args:
        emptiness: Which state (``emptiness``).
        noun: What the rows are, e.g. ``"the devices' status"``.
        none: The opening, e.g. ``"No devices"``.
        why: What brings the first rows (a lake with no data at all).
        late: Why the rows can lag while other data is in (``already``).
        ranged: Whether the read kept a time range.
        restricted: Whether sites or device types were selected.
        problem: Why the table cannot be read.
        already: What the page shows already, e.g. ``"50 devices sent readings in the
            last 5 min"``; given, a table not written yet is said to lag, not to wait
            for the first reading.
    """
    if emptiness is Emptiness.UNREADABLE:
        return f"Cannot read {noun} right now ({problem}); retrying at the next refresh."
    if emptiness is Emptiness.NOT_WRITTEN:
        if already:
            return f"{none} to show yet, although {already}. {late}"
        return f"{none} yet. {why}"
    scope = "sites and device types" if restricted else ""
    where = " and ".join(p for p in ("time range" if ranged else "", scope) if p)
    return f"{none} in the selected {where}. {why}"
