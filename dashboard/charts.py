"""Altair charts: a DataFrame in, a chart out. Data is aggregated before it gets here."""

from __future__ import annotations

from typing import cast

import altair as alt
import polars as pl

from dashboard.data import STATUS_COLORS, STATUS_SHAPES

HEIGHT = 260
# Time axes read UTC, like every other time on the page, in 24-hour labels; the
# browser's own time zone and 12-hour default labels never apply.
_UTC_LABELS = {
    "year": "%Y",
    "quarter": "%b %d",
    "month": "%b %d",
    "week": "%b %d",
    "date": "%b %d",
    "hours": "%H:%M",
    "minutes": "%H:%M",
    "seconds": "%H:%M:%S",
    "milliseconds": "%H:%M:%S.%L",
}
TIME_TITLE = "time (UTC)"


def utc_x(field: str, *, minutes: bool = False) -> alt.X:
    """A time x axis on a UTC scale with 24-hour labels.

    With ``minutes``, each value stands for its whole UTC minute (bars span it).
    """
    return alt.X(
        f"{field}:T",
        title=TIME_TITLE,
        scale=alt.Scale(type="utc"),
        # At least a second between ticks: no tick lands on a fraction of a second.
        axis=alt.Axis(format=_UTC_LABELS, labelOverlap=True, tickMinStep=1000),
        timeUnit="utcyearmonthdatehoursminutes" if minutes else alt.Undefined,
    )


def utc_tooltip(field: str, title: str, *, seconds: bool = False) -> alt.Tooltip:
    """A tooltip of a time as UTC ``HH:MM`` (``HH:MM:SS`` with ``seconds``)."""
    return alt.Tooltip(
        f"{field}:T",
        timeUnit="utchoursminutesseconds" if seconds else "utchoursminutes",
        title=f"{title} (UTC)",
    )


def legend_below(title: str) -> alt.Legend:
    """A legend under the chart, wrapped in rows, its labels never cut short."""
    return alt.Legend(
        title=title, orient="bottom", direction="horizontal", columns=4, labelLimit=0,
        symbolStrokeWidth=2,
    )  # fmt: skip


def lines(
    frame: pl.DataFrame,
    x: str,
    y: str,
    color: str,
    *,
    title: str,
    y_title: str,
    y_format: str | None = None,
) -> alt.Chart:
    """A multi-series line chart over time.

    Each series has its own colour, dash and point shape, so that a line drawn over
    another of equal values still shows; the legend sits below the chart, every
    series named in full. ``y_format`` is a d3 format of the y axis (``",d"``).
    """
    legend = legend_below(color.replace("_", " "))
    axis = alt.Axis(format=y_format, tickMinStep=1) if y_format else alt.Axis()
    # Points only while few enough to read (and cheap to draw).
    points = alt.OverlayMarkDef(size=36, filled=False) if frame.height <= 240 else False
    return cast(
        alt.Chart,
        (
            alt.Chart(frame, title=title)
            .mark_line(point=points, strokeWidth=2)
            .encode(
                x=utc_x(x),
                y=alt.Y(f"{y}:Q", title=y_title, axis=axis),
                color=alt.Color(f"{color}:N", legend=legend),
                strokeDash=alt.StrokeDash(f"{color}:N", legend=legend),
                shape=alt.Shape(f"{color}:N", legend=legend),
                tooltip=[
                    utc_tooltip(x, "time", seconds=True),
                    alt.Tooltip(f"{color}:N", title=color.replace("_", " ")),
                    alt.Tooltip(f"{y}:Q", title=y_title, format=y_format or ",.2f"),
                ],
            )
            # Room above the title: fitted to its height with the legend below, the
            # chart's title was drawn partly above its frame.
            .properties(height=HEIGHT, padding={"top": 12, "left": 5, "right": 5, "bottom": 5})
        ),
    )


def device_grid(grid: pl.DataFrame) -> alt.FacetChart:
    """Every device as one mark in its site's block, shaped and coloured by status.

    Needs no map tiles or coordinates. ``grid`` is ``data.device_grid``'s rows with a
    ``link`` column: clicking a device opens that URL (its Device page).
    """
    # Cells shrink as sites grow so that four sites fit side by side (26 px up to 7 a row).
    per_row = int(cast("int | None", grid["col"].max()) or 0) + 1
    cell = max(8, min(26, 200 // per_row))
    status_scale = alt.Scale(domain=list(STATUS_COLORS), range=list(STATUS_COLORS.values()))
    shape_scale = alt.Scale(domain=list(STATUS_SHAPES), range=list(STATUS_SHAPES.values()))
    cells = (
        alt.Chart(grid)
        .mark_point(filled=True, size=int((cell * 0.5) ** 2), opacity=0.95, cursor="pointer")
        .encode(
            x=alt.X("col:O", axis=None),
            y=alt.Y("row:O", axis=None),
            color=alt.Color("status:N", scale=status_scale, title="status"),
            shape=alt.Shape("status:N", scale=shape_scale, title="status"),
            href="link:N",
            tooltip=[
                "device_id:N",
                "device_type:N",
                "site:N",
                alt.Tooltip("status:N", title="status"),
                alt.Tooltip("reported_status:N", title="last reported status"),
                alt.Tooltip("battery_pct:Q", format=".0f"),
                utc_tooltip("last_event_time", "last event", seconds=True),
            ],
        )
        .properties(width=alt.Step(cell), height=alt.Step(cell))
    )
    facets = cells.facet(
        facet=alt.Facet("site:N", title=None, header=alt.Header(labelFontSize=13)),
        columns=4,
        title="Devices by site (click one to open it)",
    )
    return cast(alt.FacetChart, facets)


def metric_band(
    band: pl.DataFrame, title: str, low: float | None, high: float | None
) -> alt.LayerChart:
    """A metric's 1-minute min-max band and average, with its alert thresholds as rules."""
    base = alt.Chart(band).encode(x=utc_x("window_start"))
    layers: list[alt.Chart] = [
        base.mark_area(opacity=0.25).encode(y=alt.Y("min:Q", title=title), y2="max:Q"),
        base.mark_line().encode(
            y="avg:Q",
            tooltip=[
                utc_tooltip("window_start", "minute"),
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
    return cast(alt.LayerChart, alt.layer(*layers, title=title).properties(height=220))


def sessions_timeline(sessions: pl.DataFrame) -> alt.Chart:
    """Connectivity sessions as bars from start to end."""
    return cast(
        alt.Chart,
        (
            alt.Chart(sessions)
            .mark_bar(height=18)
            .encode(
                x=utc_x("session_start"),
                x2="session_end:T",
                y=alt.Y("device_id:N", title=None),
                tooltip=[
                    utc_tooltip("session_start", "start", seconds=True),
                    utc_tooltip("session_end", "end", seconds=True),
                    "events:Q",
                    alt.Tooltip("duration_s:Q", format=".0f"),
                ],
            )
            .properties(height=110)
        ),
    )


def bars(frame: pl.DataFrame, x: str, y: str, *, title: str, color: str | None = None) -> alt.Chart:
    """A bar chart; horizontal, longest bar first, when ``y`` is categorical (``:N``).

    A temporal ``x`` (``:T``) reads UTC like every time axis here, a bar per minute.
    """
    chart = alt.Chart(frame, title=title).mark_bar()
    x_field, y_field = x.split(":")[0], y.split(":")[0]
    tooltip: list[object] = [x_field, y_field]
    height: int | alt.Step = HEIGHT
    if y.endswith(":N"):
        # A row per category, each labelled: the chart grows with the categories.
        axis = alt.Axis(labelLimit=320, labelOverlap=False, title=None)
        x_enc, y_enc = (
            alt.X(x, axis=alt.Axis(format=",d", tickMinStep=1)),
            alt.Y(y, sort="-x", axis=axis),
        )
        height = alt.Step(22)
    elif x.endswith(":T"):
        x_enc, y_enc = utc_x(x_field, minutes=True), alt.Y(y, axis=alt.Axis(tickMinStep=1))
        tooltip = [utc_tooltip(x_field, x_field), y_field]
    else:
        x_enc, y_enc = alt.X(x, title=None), alt.Y(y)
    encoding: dict[str, object] = {"x": x_enc, "y": y_enc, "tooltip": tooltip}
    if color is not None:
        name = color.split(":")[0]
        encoding["color"] = alt.Color(color, legend=legend_below(name.replace("_", " ")))
    return cast(alt.Chart, chart.encode(**encoding).properties(height=height))


def send_rate(per_second: pl.DataFrame) -> alt.LayerChart:
    """Events sent per second of the run against the target rate."""
    base = alt.Chart(per_second).encode(
        x=alt.X("second:Q", title="second of the run", axis=alt.Axis(format="d", tickMinStep=1))
    )
    sent = base.mark_line().encode(
        y=alt.Y("sent:Q", title="events / s"), tooltip=["second", "sent"]
    )
    target = base.mark_line(color="#c62828", strokeDash=[6, 4]).encode(y="target:Q")
    layered = alt.layer(sent, target, title="Sent per second (dashed: target)")
    return cast(alt.LayerChart, layered.properties(height=HEIGHT))
