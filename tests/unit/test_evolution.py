"""Which queries a schema change rebuilds, and in what order (pure parts of processor.evolution)."""

from __future__ import annotations

from common.lake import Query
from processor.evolution import REBUILDS, stale_queries, with_readers
from processor.tables import TableChange


def test_only_queries_with_per_column_state_are_stale_and_each_says_why():
    changes = {
        "silver": TableChange(added=("signal_dbm",)),
        "gold_device_1m": TableChange(added=("signal_dbm_min", "signal_dbm_avg")),
        "site_type_10m": TableChange(added=("signal_dbm_avg",), unwritten=("co2_ppm_avg",)),
        "fleet_summary": TableChange(),
    }
    # The sliding windows keep no state: device_status recomputes them from device_1m
    # (and empties them when it is rebuilt, so windows of an old slide do not linger).
    assert stale_queries(changes) == {}
    assert "site_type_10m" in REBUILDS[Query.DEVICE_STATUS]
    assert stale_queries({"device_sessions": TableChange(unwritten=("x",))}) == {
        Query.GOLD_DEVICE_SESSIONS: "its state keeps one aggregate per column of "
        "device_sessions (column x no longer written)"
    }
    # device_status adds up each device's readings: a new column would miss the past ones.
    assert stale_queries({"device_status": TableChange(added=("events",))}) == {
        Query.DEVICE_STATUS: "each row of device_status adds up its device's readings so far "
        "(column events added)"
    }
    assert stale_queries({}) == {}


def test_a_rebuilt_query_brings_the_queries_that_stream_from_its_tables():
    assert with_readers(["alerts"]) == ["alerts", "alert_recoveries"]
    assert with_readers(["alert_recoveries", "alerts"]) == ["alert_recoveries", "alerts"]
    assert with_readers(["device_status", "gold_device_sessions"]) == [
        "device_status",
        "gold_device_sessions",
    ]
