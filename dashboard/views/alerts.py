"""Alerts: the live feed of the alerts topic, then the history with time to recover.

The live section reads the dashboard's feed of the alerts topic (``ui.live_feed``)
about once a second; the history below reads the Delta tables at the page's refresh,
with its own metric, kind and state filters.
"""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
import streamlit as st

from common.alerts import ALERT_KINDS as KINDS
from common.contract import METRIC_NAMES
from common.deliveries import delivery_states
from common.lake import Table
from dashboard import charts, data, display, lake, live_alerts, ui
from dashboard.settings import DashboardSettings

STATES = ("all", "open", "recovered")
LIVE_WHAT = (
    "The real-time path: each reading outside its device's thresholds, as the processor "
    "sends it to the alerts topic, newest first, whatever the time range; whether it "
    "has recovered is not known here."
)
HISTORY_WHAT = (
    "The lake's alerts in the selected time range: the detector's threshold and z-score "
    "alerts, one row per reading and metric with the kinds it raised, and when it "
    "recovered. They land a few seconds to a minute after the live ones."
)

view = ui.current_view()
settings, filters = view.settings, view.filters


def render_live(feed: live_alerts.LiveFeed) -> None:
    """One refresh of the live section: the feed's state and its newest alerts."""
    status = feed.status
    kept = feed.alerts()
    rows = filters.scope(live_alerts.alert_frame(kept))
    if not status.healthy:
        st.warning(f"Live alerts: {status.reason}.", icon=":material/cloud_off:")
    scoped = bool(filters.sites or filters.device_types)
    refresh = None if view.paused else settings.live_refresh_s
    st.caption(live_alerts.live_line(status, rows.height, len(kept), scoped, refresh))
    if rows.height:
        shown = rows.head(settings.live_alerts_rows)
        states = delivery_states(settings.deliveries_path, shown["alert_id"].to_list())
        st.table(live_alerts.alert_table(shown, datetime.now(UTC), states), hide_index=True)


def live_section() -> None:
    """The newest alerts of the alerts topic, refreshed every ``live_refresh_s``."""
    st.subheader("Live alerts")
    st.caption(LIVE_WHAT)
    if not settings.live_alerts:
        st.caption(
            ":material/notifications_off: Live alerts are off "
            f"({DashboardSettings.env_name('live_alerts')}=false)."
        )
        return
    feed = ui.live_feed(settings)

    @st.fragment(run_every=None if view.paused else settings.live_refresh_s)
    def _live() -> None:
        render_live(feed)

    _live()


st.title("Alerts")
live_section()
st.subheader("History")
st.caption(HISTORY_WHAT)
left, middle, right = st.columns(3)
metrics = left.multiselect(
    "Metrics", METRIC_NAMES, format_func=data.metric_label, key="alert_metric",
    default=ui.initial("alert_metric", list[str](), lambda v: all(m in METRIC_NAMES for m in v)),
    placeholder="All metrics",
)  # fmt: skip
kinds = middle.multiselect(
    "Kinds", KINDS, key="kind", placeholder="All kinds",
    default=ui.initial("kind", list[str](), lambda v: all(k in KINDS for k in v)),
)  # fmt: skip
state = (
    right.segmented_control(
        "State", STATES, key="state", default=ui.initial("state", "all", lambda v: v in STATES)
    )
    or "all"
)
ui.publish("alert_metric", metrics, [])
ui.publish("kind", kinds, [])
ui.publish("state", state, "all")


def render(now: datetime) -> None:
    """One refresh of the page."""
    start, end = filters.start(now), ui.reads_end(view)
    alerts = ui.load(
        settings, Table.GOLD_ALERTS, lake.ALERT_COLUMNS,
        time_column="event_time", start=start, end=end,
    ).scope(filters)  # fmt: skip
    if not alerts.ready or alerts.frame is None:
        ui.waiting(alerts)
        return
    recoveries = ui.load(
        settings, Table.GOLD_ALERT_RECOVERIES, lake.RECOVERY_COLUMNS,
        time_column="recovered_time", start=start,
    )  # fmt: skip
    if recoveries.frame is None:
        ui.waiting(recoveries)
    rows = display.group_alerts(data.alerts_with_recovery(alerts.frame, recoveries.frame))
    if metrics:
        rows = rows.filter(pl.col("metric").is_in(metrics))
    rows = display.with_any_kind(rows, kinds)
    if state != "all":
        rows = rows.filter(pl.col("state") == state)

    summary = data.alert_summary(rows)
    c = st.columns(5)
    c[0].metric(
        "Alerts", f"{summary.total:,}",
        help="Readings and metrics that alerted in the range, whatever kinds each raised",
    )  # fmt: skip
    c[1].metric("Open", f"{summary.open:,}", help="Not recovered (yet, or within the window)")
    c[2].metric("Recovered", f"{summary.recovered:,}")
    c[3].metric("Median time to recover", data.format_duration(summary.median_ttr_s))
    c[4].metric("p95 time to recover", data.format_duration(summary.p95_ttr_s))
    if rows.height == 0:
        st.info("No alerts match the selected metrics, kinds and state.", icon=":material/info:")
        return
    st.altair_chart(
        charts.bars(
            display.metric_labels(data.alerts_per_minute(rows, now)), "minute:T", "alerts:Q",
            title="Alerts per ended minute by metric", color="metric:N",
        ),
        width="stretch",
    )  # fmt: skip
    ui.table(
        display.alert_rows(rows).select(
            "event_time", "device_id", "site", "metric", "kinds", "value",
            "threshold", "zscore", "state", "time_to_recover_s",
        ),
        ui.alert_column_config(),
    )  # fmt: skip


ui.live(view, render)
