"""Overview: fleet KPIs, time series per device type and site, devices by site and status."""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
import streamlit as st

from common.contract import METRIC_NAMES
from common.lake import Table
from dashboard import charts, data, display, lake, ui
from dashboard.filters import filters_to_params, floor_minute, range_label

view = ui.current_view()
settings, filters = view.settings, view.filters

st.title("Overview")
metric = ui.initial("metric", METRIC_NAMES[0], lambda m: m in METRIC_NAMES)
metric = st.selectbox(
    "Metric over time", METRIC_NAMES, index=METRIC_NAMES.index(metric),
    format_func=data.metric_label, key="metric",
)  # fmt: skip
ui.publish("metric", metric, METRIC_NAMES[0])


def _kpis(now: datetime, gold: data.GoldParts) -> int:
    """The KPIs of the range; returns the active devices."""
    kpi = data.overview_kpis(gold, now, settings.active_minutes)
    start = filters.start(now)
    alerts = ui.load(
        settings, Table.GOLD_ALERTS, lake.ALERT_COLUMNS,
        time_column="event_time", start=start, end=ui.reads_end(view),
    ).scope(filters)  # fmt: skip
    recoveries = ui.load(
        settings, Table.GOLD_ALERT_RECOVERIES, lake.RECOVERY_COLUMNS,
        time_column="recovered_time", start=start, end=None,
    )  # fmt: skip
    window = timedelta(seconds=settings.latency_window_s)
    silver = ui.load(
        settings, Table.SILVER_EVENTS, lake.LATENCY_COLUMNS,
        time_column="event_time", start=floor_minute(now) - window, end=ui.reads_end(view),
    ).scope(filters)  # fmt: skip
    latency = None
    if silver.frame is not None:
        latency = data.latency(silver.frame.filter(pl.col("event_time") >= now - window))

    c = st.columns(5)
    c[0].metric(
        "Active devices",
        f"{kpi.active_devices:,}",
        help=f"Devices with an event in the last {settings.active_minutes} min; the others "
        "show as stale among the devices below",
    )
    c[1].metric(
        "Events / min",
        f"{kpi.events_per_min:,.0f}" if kpi.events_per_min is not None else "—",
        help=f"Mean events per complete minute in the range: {data.PARTIAL_MINUTES}",
    )
    if alerts.frame is not None:
        joined = data.alerts_with_recovery(alerts.frame, recoveries.frame)
        open_alerts = f"{data.alert_summary(display.group_alerts(joined)).open:,}"
        alerts_help = display.OPEN_ALERTS_HELP
    else:
        open_alerts = "—"
        alerts_help = "No alerts can be read yet"
    c[2].metric(
        display.open_alerts_label(range_label(filters.range)), open_alerts, help=alerts_help
    )
    c[3].metric(
        display.latency_label(settings.latency_window_s),
        f"{latency.p50_s:.1f} s" if latency else "—",
        help=display.latency_help(
            settings.latency_window_s,
            latency.events if latency else None,
            latency.p95_s if latency else None,
            settings.env_name("latency_window_s"),
        ),
    )
    c[4].metric(
        display.FRESHNESS_LABEL,
        data.format_duration(kpi.freshness_s),
        help="Time since the newest event of the fleet's 1-minute figures",
    )
    present = [m for m in METRIC_NAMES if m in kpi.metric_averages]
    for row in range(0, len(present), 4):
        cols = st.columns(4)
        for col, m in zip(cols, present[row : row + 4], strict=False):
            col.metric(
                f"Avg {data.metric_label(m)}",
                f"{kpi.metric_averages[m]:,.1f}",
                help="Event-weighted mean of the 1-minute averages in the range",
            )
    return kpi.active_devices


def _page_controls(devices: int) -> tuple[int, int]:
    """The devices grid's page size and page (from 1), kept in the URL."""
    size = _number(ui.initial("per_page", data.DEFAULT_PAGE_SIZE), data.DEFAULT_PAGE_SIZE)
    if size not in data.PAGE_SIZES:
        size = data.DEFAULT_PAGE_SIZE
    left, right, _ = st.columns([1, 1, 3])
    size = left.selectbox(
        "Devices per page", data.PAGE_SIZES, index=data.PAGE_SIZES.index(size), key="per_page"
    )
    pages = data.page_count(devices, size)
    page = _number(ui.initial("page", 1), 1)
    page = right.number_input(
        f"Page (of {pages:,})", min_value=1, max_value=pages, value=min(max(1, page), pages),
        step=1, key="page",
    )  # fmt: skip
    ui.publish("per_page", size, data.DEFAULT_PAGE_SIZE)
    ui.publish("page", page, 1)
    return int(size), int(page)


def _number(value: object, fallback: int) -> int:
    try:
        return int(str(value))
    except ValueError:
        return fallback


def _devices(now: datetime, active: int = 0) -> None:
    """One page of the devices by site and status, those that need attention first.

    ``active`` devices are known to report already. A page holds at most the largest
    of ``data.PAGE_SIZES`` devices, whatever the fleet's size.
    """
    status = ui.load(settings, Table.GOLD_DEVICE_STATUS, lake.STATUS_COLUMNS).scope(filters)
    if not status.ready or status.frame is None:
        already = (
            f"{active:,} device{'s' if active != 1 else ''} sent readings in the last "
            f"{settings.active_minutes} min"
            if active
            else None
        )
        ui.waiting(status, ranged=False, already=already)
        return
    shown = data.shown_status(status.frame, now, settings.active_minutes)
    size, page = _page_controls(shown.height)
    rows = data.attention_page(shown, page, size)
    grid = data.with_device_links(
        data.device_grid(rows), filters_to_params(filters, ui.default_range_of(settings))
    )
    st.altair_chart(charts.device_grid(grid), width="content")
    first = (page - 1) * size + 1
    st.caption(
        f"Devices {first:,}–{first + rows.height - 1:,} of {shown.height:,}: offline, "
        f"degraded and stale ones first, then by id."
    )
    counts = data.status_counts(shown)
    st.caption(
        " · ".join(f"{name}: {n:,}" for name, n in counts.items())
        + f" — {data.STALE}: nothing received for over {settings.active_minutes} min "
        f"({settings.env_name('active_minutes')}), whatever the device last reported"
    )


def render(now: datetime) -> None:
    """One refresh of the page."""
    gold = ui.load_gold_parts(settings, filters, filters.start(now), ui.reads_end(view))
    if not gold.ready or gold.parts is None:
        ui.waiting(gold)
        _devices(now)
        return
    active = _kpis(now, gold.parts)
    cube = data.complete_windows(gold.parts.cube, now)
    if cube.height == 0:
        st.info(
            f"The charts start after the first complete minute: {data.PARTIAL_MINUTES}.",
            icon=":material/hourglass_empty:",
        )
        _devices(now, active)
        return
    left, right = st.columns(2)
    left.altair_chart(
        charts.lines(
            data.events_per_minute(cube, "device_type"), "window_start", "events",
            "device_type", title="Events per minute by device type", y_title="events / min",
        ),
        width="stretch",
    )  # fmt: skip
    right.altair_chart(
        charts.lines(
            data.events_per_minute(cube, "site"), "window_start", "events", "site",
            title="Events per minute by site", y_title="events / min",
        ),
        width="stretch",
    )  # fmt: skip
    series = data.metric_over_time(cube, metric)
    if series.height:
        st.altair_chart(
            charts.lines(
                series, "window_start", metric, "device_type",
                title=f"{data.metric_label(metric)} by device type (1-minute averages)",
                y_title=data.metric_label(metric),
            ),
            width="stretch",
        )  # fmt: skip
    else:
        st.info(
            f"No {data.metric_label(metric)} readings in the selection.", icon=":material/info:"
        )
    st.caption(f"Complete minutes only: {data.PARTIAL_MINUTES}.")
    _devices(now, active)


ui.live(view, render)
