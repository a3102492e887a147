"""Altair charts: a DataFrame in, a chart out. Data is aggregated before it gets here."""

from __future__ import annotations

import altair as alt
import polars as pl

from dashboard.data import STATUS_COLORS

HEIGHT = 260


def lines(
    frame: pl.DataFrame, x: str, y: str, color: str, *, title: str, y_title: str
) -> alt.Chart:
    """A multi-series line chart over time."""
    return (
        alt.Chart(frame, title=title)
        .mark_line(point=frame.height <= 120)
        .encode(
            x=alt.X(f"{x}:T", title=None),
            y=alt.Y(f"{y}:Q", title=y_title),
            color=alt.Color(f"{color}:N", title=color.replace("_", " ")),
            tooltip=[alt.Tooltip(f"{x}:T", format="%H:%M"), f"{color}:N", f"{y}:Q"],
        )
        .properties(height=HEIGHT)
    )


def device_map(status: pl.DataFrame) -> alt.Chart:
    """Devices at their coordinates, coloured by status (no tiles: works offline)."""
    return (
        alt.Chart(status, title="Devices by status")
        .mark_circle(size=70, opacity=0.8)
        .encode(
            longitude="lon:Q",
            latitude="lat:Q",
            color=alt.Color(
                "status:N",
                scale=alt.Scale(domain=list(STATUS_COLORS), range=list(STATUS_COLORS.values())),
            ),
            tooltip=[
                "device_id:N",
                "device_type:N",
                "site:N",
                "status:N",
                alt.Tooltip("battery_pct:Q", format=".0f"),
                alt.Tooltip("last_event_time:T", format="%H:%M:%S"),
            ],
        )
        .project(type="mercator")
        .properties(height=360)
    )


def metric_band(
    band: pl.DataFrame, title: str, low: float | None, high: float | None
) -> alt.LayerChart:
    """A metric's 1-minute min-max band and average, with its alert thresholds as rules."""
    base = alt.Chart(band).encode(x=alt.X("window_start:T", title=None))
    layers: list[alt.Chart] = [
        base.mark_area(opacity=0.25).encode(y=alt.Y("min:Q", title=title), y2="max:Q"),
        base.mark_line().encode(
            y="avg:Q",
            tooltip=[
                alt.Tooltip("window_start:T", format="%H:%M"),
                alt.Tooltip("min:Q", format=".2f"),
                alt.Tooltip("avg:Q", format=".2f"),
                alt.Tooltip("max:Q", format=".2f"),
            ],
        ),
    ]
    bounds = [(name, value) for name, value in (("low", low), ("high", high)) if value is not None]
    if bounds:
        rules = pl.DataFrame(
            {"threshold": [n for n, _ in bounds], "value": [float(v) for _, v in bounds]}
        )
        layers.append(
            alt.Chart(rules)
            .mark_rule(color="#c62828", strokeDash=[6, 4])
            .encode(y="value:Q", tooltip=["threshold:N", "value:Q"])
        )
    return alt.layer(*layers, title=title).properties(height=220)


def sessions_timeline(sessions: pl.DataFrame) -> alt.Chart:
    """Connectivity sessions as bars from start to end."""
    return (
        alt.Chart(sessions)
        .mark_bar(height=18)
        .encode(
            x=alt.X("session_start:T", title=None),
            x2="session_end:T",
            y=alt.Y("device_id:N", title=None),
            tooltip=[
                alt.Tooltip("session_start:T", format="%H:%M:%S"),
                alt.Tooltip("session_end:T", format="%H:%M:%S"),
                "events:Q",
                alt.Tooltip("duration_s:Q", format=".0f"),
            ],
        )
        .properties(height=110)
    )


def bars(frame: pl.DataFrame, x: str, y: str, *, title: str, color: str | None = None) -> alt.Chart:
    """A bar chart; horizontal, longest bar first, when ``y`` is categorical (``:N``)."""
    chart = alt.Chart(frame, title=title).mark_bar()
    x_field, y_field = x.split(":")[0], y.split(":")[0]
    if y.endswith(":N"):
        x_enc, y_enc = alt.X(x), alt.Y(y, sort="-x", axis=alt.Axis(labelLimit=320))
    else:
        x_enc, y_enc = alt.X(x, title=None), alt.Y(y)
    encoding: dict[str, object] = {"x": x_enc, "y": y_enc, "tooltip": [x_field, y_field]}
    if color is not None:
        encoding["color"] = color
    return chart.encode(**encoding).properties(height=HEIGHT)


def send_rate(per_second: pl.DataFrame) -> alt.LayerChart:
    """Events sent per second of the run against the target rate."""
    base = alt.Chart(per_second).encode(x=alt.X("second:Q", title="second of the run"))
    sent = base.mark_line().encode(
        y=alt.Y("sent:Q", title="events / s"), tooltip=["second", "sent"]
    )
    target = base.mark_line(color="#c62828", strokeDash=[6, 4]).encode(y="target:Q")
    return alt.layer(sent, target, title="Sent per second (dashed: target)").properties(
        height=HEIGHT
    )
