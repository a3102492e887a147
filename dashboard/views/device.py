"""Device drill-down: one device's metrics against its thresholds, alerts and sessions."""

from __future__ import annotations

from datetime import datetime

import streamlit as st

from common.lake import Table
from dashboard import charts, data, display, lake, ui

view = ui.current_view()
settings, filters = view.settings, view.filters

st.title("Device")
_SEARCHED = "_iot_device_searched"  # set when the search text changes


def _picker() -> str | None:
    """The device to show: from the URL, or found by a search of its id.

    The search looks through the cached index of the fleet, narrowed by the sidebar's
    sites and device types, and offers at most ``data.SEARCH_LIMIT`` matches: no
    widget ever lists the whole fleet. A device named in the URL (the Overview's
    links) opens whether or not it is among the matches.
    """
    query = st.text_input(
        "Find a device", value=ui.initial("find", ""), key="find",
        placeholder="Device id, or part of it",
        help="Ids that start with the text come first, then those that contain it "
        "(case-insensitive), in the sites and device types selected in the sidebar",
        on_change=lambda: st.session_state.update({_SEARCHED: True}),
    )  # fmt: skip
    # Only a search typed in this run opens its first match: one restored from the URL
    # or from an earlier visit leaves the device named in the URL as it is.
    searched = bool(st.session_state.pop(_SEARCHED, False))
    ui.publish("find", query.strip(), "")
    index = ui.device_index(view, settings.now())
    found = (
        data.search_devices(index, query, sites=filters.sites, device_types=filters.device_types)
        if index is not None
        else None
    )
    ids: list[str] = found.shown["device_id"].to_list() if found is not None else []
    chosen = ui.initial("device", "")
    if chosen not in ids and ids and (searched or not chosen):
        chosen = ids[0]  # a new search, or no device yet: its first match
    options = ids if chosen in ids or not chosen else sorted({*ids, chosen})
    device = st.selectbox(
        "Device", options, index=options.index(chosen) if chosen else None, key="device",
        placeholder="No devices yet",
    )  # fmt: skip
    if found is not None and query.strip() and found.total == 0:
        st.caption(f"No device id contains “{query.strip()}”{_in_scope()}.")
    elif found is not None and found.total > len(ids):
        st.caption(
            f"{len(ids):,} of {found.total:,} matching devices{_in_scope()} listed: type "
            "more of an id to narrow them."
        )
    ui.publish("device", device or "", "")
    return device


def _in_scope() -> str:
    """`` in the selected sites and device types`` when the sidebar narrows the fleet."""
    return (
        " in the selected sites and device types" if filters.sites or filters.device_types else ""
    )


device = _picker()


def _profile(device_id: str) -> dict[str, object] | None:
    dim = ui.load(
        settings, Table.DIM_DEVICES, lake.DEVICE_DIM_COLUMNS, equals={"device_id": device_id}
    )
    if dim.frame is None or dim.frame.height == 0:
        ui.waiting(dim, ranged=False)
        return None
    row = dim.frame.row(0, named=True)
    st.caption(
        f"{row['device_type']} · {row['site']}, {row['building']} · {row['model']} "
        f"(firmware {row['firmware']}) · installed {row['install_date']} · "
        + ("battery-powered" if row["battery_powered"] else "mains-powered")
    )
    return row


def _status(device_id: str, now: datetime, events: int) -> None:
    """The device's status, battery and last event; ``events`` of it are in the range."""
    status = ui.load(
        settings, Table.GOLD_DEVICE_STATUS, lake.STATUS_COLUMNS, equals={"device_id": device_id}
    )
    if status.frame is None or status.frame.height == 0:
        already = f"{events:,} of its events are in the selected time range" if events else None
        ui.waiting(status, ranged=False, already=already)
        return
    row = data.shown_status(status.frame, now, settings.active_minutes).row(0, named=True)
    c = st.columns(3)
    c[0].metric(
        "Status",
        str(row["status"]),
        help=f"Last reported: {row['reported_status']}; {data.STALE} after "
        f"{settings.active_minutes} min without an event",
    )
    battery = row["battery_pct"]
    c[1].metric("Battery", f"{battery:.0f} %" if battery is not None else "—")
    c[2].metric("Last event (UTC)", f"{row['last_event_time']:%H:%M:%S}")


def render(now: datetime) -> None:
    """One refresh of the page."""
    if not device:
        text = ui.empty_state(Table.GOLD_DEVICE_STATUS)
        st.info(f"{text.none} yet. {text.why}", icon=":material/hourglass_empty:")
        return
    profile = _profile(device)
    start, end = filters.start(now), ui.reads_end(view)
    gold = ui.load(
        settings, Table.GOLD_DEVICE_1M, lake.DEVICE_GOLD_COLUMNS,
        time_column="window_start", start=start, end=end, equals={"device_id": device},
    )  # fmt: skip
    events = int(gold.frame["events"].sum()) if gold.frame is not None else 0
    _status(device, now, events)
    alerts = ui.load(
        settings, Table.GOLD_ALERTS, lake.ALERT_COLUMNS,
        time_column="event_time", start=start, end=end, equals={"device_id": device},
    )  # fmt: skip
    recoveries = ui.load(
        settings, Table.GOLD_ALERT_RECOVERIES, lake.RECOVERY_COLUMNS,
        time_column="recovered_time", start=start, equals={"device_id": device},
    )  # fmt: skip
    sessions = ui.load(
        settings, Table.GOLD_DEVICE_SESSIONS, lake.SESSION_COLUMNS,
        time_column="session_end", start=start, end=end, equals={"device_id": device},
    )  # fmt: skip
    limits = data.thresholds(profile)
    joined = (
        display.group_alerts(data.alerts_with_recovery(alerts.frame, recoveries.frame))
        if alerts.frame is not None
        else None
    )
    bands = {}
    if gold.frame is not None:
        bands = {m: data.metric_band(gold.frame, m) for m in data.metrics_present(gold.frame)}

    c = st.columns(4)
    c[0].metric("Events", f"{events:,}" if gold.ready else "—")
    breaches = sum(
        data.threshold_breaches(b, *limits.get(m, (None, None))) for m, b in bands.items()
    )
    c[1].metric(
        "Minutes over a threshold",
        f"{breaches:,}" if bands and limits else "—",
        help="1-minute windows whose min or max crossed one of the profile's thresholds",
    )
    summary = data.alert_summary(joined) if joined is not None else None
    c[2].metric(
        "Alerts (open)", f"{summary.total:,} ({summary.open:,})" if summary else "—",
        help="Readings and metrics that alerted in the range, whatever kinds each raised "
        "(open: not recovered yet)",
    )  # fmt: skip
    session_summary = data.session_summary(sessions.frame) if sessions.frame is not None else None
    c[3].metric(
        "Sessions", f"{session_summary.sessions:,}" if session_summary else "—",
        help=(
            f"Connected {data.format_duration(session_summary.connected_s)} in the range"
            if session_summary
            else None
        ),
    )  # fmt: skip

    st.subheader("Metrics against thresholds")
    if not bands:
        ui.waiting(gold)
    for metric, band in bands.items():
        low, high = limits.get(metric, (None, None))
        st.altair_chart(
            charts.metric_band(band, data.metric_label(metric), low, high), width="stretch"
        )

    st.subheader("Alerts")
    if joined is None or joined.height == 0:
        ui.waiting(alerts if joined is None else alerts.scope(filters))
    else:
        ui.table(
            display.alert_rows(joined).select(
                "event_time", "metric", "kinds", "value", "threshold", "zscore", "state",
                "recovered_time", "time_to_recover_s",
            ),
            ui.alert_column_config(),
        )  # fmt: skip

    st.subheader("Connectivity sessions")
    if sessions.frame is None or sessions.frame.height == 0:
        ui.waiting(sessions)
    else:
        ordered = sessions.frame.sort("session_start")
        st.altair_chart(charts.sessions_timeline(ordered), width="stretch")
        ui.table(
            ordered.select("session_start", "session_end", "events", "duration_s").sort(
                "session_start", descending=True
            ),
            {
                "session_start": ui.utc_time_column("start"),
                "session_end": ui.utc_time_column("end"),
                "duration_s": st.column_config.NumberColumn("duration (s)", format="%.0f"),
            },
        )
        if session_summary is not None and session_summary.longest_s is not None:
            st.caption(
                f"Connected {data.format_duration(session_summary.connected_s)} in "
                f"{session_summary.sessions:,} sessions; longest "
                f"{data.format_duration(session_summary.longest_s)}."
            )


ui.live(view, render)
