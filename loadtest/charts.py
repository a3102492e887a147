"""The load-test report's charts: altair specs, rendered to self-contained SVG by vl-convert.

The report's pages (Markdown and HTML) embed the SVG files, so they show without a
network or a JavaScript runtime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

import altair as alt
import polars as pl
import vl_convert

WIDTH, HEIGHT = 480, 200


def rate_chart(
    series: Mapping[str, Sequence[float]], *, title: str, x_label: str, y_label: str
) -> alt.Chart:
    """One line per series over x = 0, 1, 2, ..., with a legend.

    Args:
        series: Values by series name, the i-th at x = i.
        title: The chart's title.
        x_label: The x axis's title.
        y_label: The y axis's title.
    """
    rows = pl.DataFrame(
        {
            "x": [i for values in series.values() for i in range(len(values))],
            "series": [name for name, values in series.items() for _ in values],
            "y": [float(v) for values in series.values() for v in values],
        },
        schema={"x": pl.Int64, "series": pl.Utf8, "y": pl.Float64},
    )
    return cast(
        alt.Chart,
        alt.Chart(rows, title=title, width=WIDTH, height=HEIGHT)
        .mark_line(strokeWidth=1.5)
        .encode(
            x=alt.X("x:Q", title=x_label),
            y=alt.Y("y:Q", title=y_label),
            color=alt.Color("series:N", title=None, sort=list(series)),
        ),
    )


def bars_chart(
    groups: Mapping[str, Mapping[str, float]],
    *,
    title: str,
    y_label: str,
    limit: float | None = None,
) -> alt.Chart | alt.LayerChart:
    """Grouped bars, one group per key of ``groups`` and one bar per inner key; a dashed limit.

    Args:
        groups: Values by group, then by bar.
        title: The chart's title.
        y_label: The y axis's title.
        limit: A value to draw as a dashed line across the bars, if any.
    """
    rows = pl.DataFrame(
        [(group, bar, float(v)) for group, bars in groups.items() for bar, v in bars.items()],
        schema={"group": pl.Utf8, "bar": pl.Utf8, "value": pl.Float64},
        orient="row",
    )
    order = list(dict.fromkeys(bar for bars in groups.values() for bar in bars))
    bars = cast(
        alt.Chart,
        alt.Chart(rows, title=title, width=WIDTH, height=HEIGHT)
        .mark_bar()
        .encode(
            x=alt.X("group:N", title=None, sort=list(groups)),
            xOffset=alt.XOffset("bar:N", sort=order),
            y=alt.Y("value:Q", title=y_label),
            color=alt.Color("bar:N", title=None, sort=order),
            tooltip=["group:N", "bar:N", alt.Tooltip("value:Q", format=",.3f")],
        ),
    )
    if limit is None:
        return bars
    rule = (
        alt.Chart(pl.DataFrame({"limit": [float(limit)]}))
        .mark_rule(color="#d62728", strokeDash=[5, 3])
        .encode(y="limit:Q")
    )
    return cast(alt.LayerChart, alt.layer(bars, rule))


def to_svg(chart: alt.Chart | alt.LayerChart) -> str:
    """The chart as one self-contained SVG document."""
    return str(vl_convert.vegalite_to_svg(chart.to_json()))
