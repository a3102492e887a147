"""Which queries a schema change rebuilds, and in what order (pure parts of processor.evolution)."""

from __future__ import annotations

from common.lake import Query, Table, written_by
from common.lake_settings import LakeSettings
from processor.evolution import (
    REBUILDABLE,
    renamed_leftovers,
    stale_queries,
    stateful_leftovers,
    stream_readers,
    with_readers,
)
from processor.tables import TableChange


def test_only_queries_with_per_column_state_are_stale_and_each_says_why():
    changes = {
        Table.SILVER_EVENTS: TableChange(added=("signal_dbm",)),
        Table.GOLD_DEVICE_1M: TableChange(added=("signal_dbm_min", "signal_dbm_avg")),
        Table.GOLD_SITE_TYPE_WINDOWS: TableChange(
            added=("signal_dbm_avg",), unwritten=("co2_ppm_avg",)
        ),
        Table.GOLD_FLEET_SUMMARY: TableChange(),
    }
    # The sliding windows keep no state: device_status recomputes them from device_1m
    # (and empties them when it is rebuilt, so windows of an old slide do not linger).
    assert stale_queries(changes) == {}
    assert Table.GOLD_SITE_TYPE_WINDOWS in written_by(Query.DEVICE_STATUS)
    assert stale_queries({Table.GOLD_DEVICE_SESSIONS: TableChange(unwritten=("x",))}) == {
        Query.GOLD_DEVICE_SESSIONS: "its state keeps one aggregate per column of "
        "gold/device_sessions (column x no longer written)"
    }
    # device_status adds up each device's readings: a new column would miss the past ones.
    assert stale_queries({Table.GOLD_DEVICE_STATUS: TableChange(added=("events",))}) == {
        Query.DEVICE_STATUS: "each row of gold/device_status adds up its device's readings so far "
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
    # Silver's tables are streamed by device_status, sessions and alerts, but silver is
    # not rebuildable (it reads Kafka): its readers are named, not rebuilt through it.
    assert stream_readers(Query.SILVER) == (
        Query.DEVICE_STATUS, Query.GOLD_DEVICE_SESSIONS, Query.ALERTS,
    )  # fmt: skip
    assert stream_readers(Query.ALERTS) == (Query.ALERT_RECOVERIES,)


def test_a_rebuild_empties_exactly_the_tables_its_query_writes():
    assert {q: written_by(q) for q in REBUILDABLE} == {
        Query.DEVICE_STATUS: (
            Table.GOLD_SITE_TYPE_WINDOWS, Table.GOLD_DEVICE_STATUS, Table.GOLD_FLEET_SUMMARY,
        ),
        Query.GOLD_DEVICE_SESSIONS: (Table.GOLD_DEVICE_SESSIONS,),
        Query.ALERTS: (Table.GOLD_ALERTS, Table.GOLD_ALERT_CLEARS, Table.STATE_ALERT_DETECTOR),
        Query.ALERT_RECOVERIES: (Table.GOLD_ALERT_RECOVERIES,),
        Query.ALERTS_RT: (Table.GOLD_ALERTS_RT,),
    }  # fmt: skip


def test_an_alerts_checkpoint_with_an_earlier_versions_state_is_rebuilt(tmp_path):
    lake = LakeSettings(root=str(tmp_path))
    (tmp_path / "_checkpoints" / "alerts" / "offsets").mkdir(parents=True)
    assert stateful_leftovers(lake) == {}
    (tmp_path / "_checkpoints" / "alerts" / "state" / "0" / "1").mkdir(parents=True)
    assert stateful_leftovers(lake) == {
        Query.ALERTS: "its checkpoint holds an earlier version's detector state (now a table)"
    }
    assert Query.ALERTS in REBUILDABLE


def test_a_table_created_beside_its_old_name_rebuilds_its_writer(tmp_path):
    lake = LakeSettings(root=str(tmp_path))
    created = {Table.GOLD_SITE_TYPE_WINDOWS: TableChange(created=True)}
    assert renamed_leftovers(created, lake) == {}  # a new lake: no old table
    (tmp_path / "gold" / "site_type_10m" / "_delta_log").mkdir(parents=True)
    assert renamed_leftovers(created, lake) == {
        Query.DEVICE_STATUS: "gold/site_type_10m is now gold/site_type_windows and is written "
        f"again from silver (delete {tmp_path}/gold/site_type_10m once nothing of yours reads it)"
    }
    # Found, not created: the table was rebuilt at an earlier start.
    assert renamed_leftovers({Table.GOLD_SITE_TYPE_WINDOWS: TableChange()}, lake) == {}
