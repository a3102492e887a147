"""The dashboard page through Streamlit's AppTest, on gold tables seeded here."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from deltalake import write_deltalake
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


@pytest.fixture
def lake(tmp_path, monkeypatch):
    monkeypatch.setenv("IOT_LAKE_ROOT", str(tmp_path))
    return tmp_path


def _app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=30)
    at.run()
    assert not at.exception, at.exception
    return at


def test_empty_lake_shows_waiting_state(lake):
    at = _app()
    assert [i.value for i in at.info] == ["Waiting for data: the gold table has no rows yet."]
    assert len(at.metric) == 0


def test_kpis_match_the_seeded_gold_rows(lake):
    now = datetime.now(UTC).replace(tzinfo=None, second=0, microsecond=0)
    rows = []
    # 3 devices over the last 5 minutes; one old row outside the 60-minute lookback.
    for minute in range(5):
        for dev, n in (("dev-1", 10), ("dev-2", 20), ("dev-3", 30)):
            rows.append((now - timedelta(minutes=minute), dev, "thermostat", n + minute))
    rows.append((now - timedelta(minutes=120), "dev-9", "thermostat", 1000))
    gold = pl.DataFrame(
        rows, schema=["window_start", "device_id", "device_type", "events"], orient="row"
    ).with_columns(window_end=pl.col("window_start") + pl.duration(minutes=1), site=pl.lit("A"))
    write_deltalake(str(lake / "gold" / "device_1m"), gold.to_arrow())

    expected_events = sum(n for _, _, _, n in rows[:-1])  # 15 rows: 300 + 3 * (0+1+2+3+4)
    at = _app()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Active devices"] == "3"
    assert metrics["Events"] == f"{expected_events:,}"
    assert metrics["Events / min"] == f"{expected_events / 5:,.0f}"
    assert metrics["Latest window (UTC)"] == now.strftime("%H:%M")
    assert not at.info
