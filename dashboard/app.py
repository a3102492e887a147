"""Streamlit entry point: ``streamlit run dashboard/app.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import altair as alt
import polars as pl
import streamlit as st

from common.settings import load_settings
from dashboard.data import GOLD_DEVICE_1M, events_per_minute, overview, read_table
from dashboard.settings import DashboardSettings

st.set_page_config(page_title="IoT Pulse", page_icon="📡", layout="wide")


@st.cache_data(ttl=2.0, show_spinner=False)
def _gold(uri: str, since: datetime) -> pl.DataFrame | None:
    return read_table(uri, since=since)


def _render(settings: DashboardSettings) -> None:
    now = datetime.now(UTC).replace(tzinfo=None)
    lookback = timedelta(minutes=settings.lookback_minutes)
    # Round 'since' down to the minute so the cache key changes once a minute.
    since = (now - lookback).replace(second=0, microsecond=0)
    gold = _gold(settings.lake.table(GOLD_DEVICE_1M), since)
    if gold is None or gold.height == 0:
        st.info("Waiting for data: the gold table has no rows yet.", icon="⏳")
        return
    kpi = overview(gold, now, lookback)
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Active devices", f"{kpi.active_devices:,}")
    c2.metric("Events", f"{kpi.events:,}")
    c3.metric("Events / min", f"{kpi.events_per_min:,.0f}")
    c4.metric(
        "Latest window (UTC)", kpi.latest_window.strftime("%H:%M") if kpi.latest_window else "-"
    )
    series = events_per_minute(gold).to_pandas()
    chart = (
        alt.Chart(series)
        .mark_line(point=True)
        .encode(x="window_start:T", y="events:Q", color="device_type:N")
        .properties(height=300)
    )
    st.altair_chart(chart, use_container_width=True)
    st.dataframe(
        gold.sort("window_start", descending=True).head(200).to_pandas(),
        use_container_width=True,
        hide_index=True,
    )


def main() -> None:
    """Render the page, refreshing live."""
    settings = load_settings(DashboardSettings)
    st.title("📡 IoT Pulse")
    st.caption(f"Gold table: {settings.lake.table(GOLD_DEVICE_1M)}")

    @st.fragment(run_every=settings.refresh_s)
    def live() -> None:
        _render(settings)

    live()


main()
