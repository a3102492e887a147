"""The dashboard's pure parts: filters in the URL, Delta reading, the computations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from deltalake import DeltaTable, write_deltalake

from common.report import ProducerReport
from dashboard import data, lake
from dashboard.filters import (
    Filters,
    filters_from_params,
    filters_to_params,
    parse_range,
    range_from_minutes,
    range_label,
    range_options,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

# ---------------------------------------------------------------- filters


def test_ranges_parse_and_print():
    assert parse_range("15m") == timedelta(minutes=15)
    assert parse_range("6h") == timedelta(hours=6)
    assert parse_range("7d") == timedelta(days=7)
    assert [parse_range(t) for t in ("0m", "1w", "h", "", "5 m")] == [None] * 5
    assert [range_from_minutes(m) for m in (60, 90, 1440, 2880, 15)] == [
        "1h",
        "90m",
        "1d",
        "2d",
        "15m",
    ]
    assert range_label("6h") == "Last 6 h"
    assert range_label("15m") == "Last 15 min"
    assert range_options("90m", "2d") == ["15m", "1h", "90m", "6h", "24h", "2d", "7d"]


def test_filters_round_trip_through_query_params():
    filters = Filters("6h", ("Austin", "Boston"), ("thermostat",))
    params = filters_to_params(filters, "1h")
    assert params == {"range": "6h", "site": ["Austin", "Boston"], "type": ["thermostat"]}
    assert filters_from_params(params, "1h") == filters
    # defaults stay out of the URL; malformed values fall back
    assert filters_to_params(Filters("1h"), "1h") == {}
    assert filters_from_params({"range": "forever", "site": ["", "A", "A"]}, "1h") == Filters(
        "1h", ("A",), ()
    )


def test_filters_start_and_scope():
    filters = Filters("1h", ("A",), ("x", "y"))
    assert filters.start(T0 + timedelta(seconds=42)) == T0 - timedelta(hours=1)
    frame = pl.DataFrame(
        {"site": ["A", "A", "B", "A"], "device_type": ["x", "z", "x", "y"], "v": [1, 2, 3, 4]}
    )
    assert filters.scope(frame)["v"].to_list() == [1, 4]
    assert Filters("1h").scope(frame)["v"].to_list() == [1, 2, 3, 4]
    assert filters.scope(frame.drop("site"))["v"].to_list() == [1, 3, 4]


# ---------------------------------------------------------------- reading


def _minutes(n: int, tz: str | None = "UTC") -> pl.DataFrame:
    starts = [T0 - timedelta(minutes=n - 1 - i) for i in range(n)]
    frame = pl.DataFrame({"window_start": starts, "device_id": [f"d{i % 3}" for i in range(n)]})
    frame = frame.with_columns(events=pl.int_range(0, n, eager=True))
    if tz is None:
        frame = frame.with_columns(pl.col("window_start").dt.replace_time_zone(None))
    return frame


@pytest.mark.parametrize("folder", ["t", "a lake/t"])  # delta-rs gives a space as %20
def test_read_keeps_the_time_range_and_the_equal_filter(tmp_path, folder):
    uri = str(tmp_path / folder)
    frame = _minutes(30)
    for part in range(3):  # three files, ten minutes each
        write_deltalake(uri, frame.slice(part * 10, 10).to_arrow(), mode="append")
    table = DeltaTable(uri)
    time = lake.TimeRange("window_start", T0 - timedelta(minutes=5), T0)
    # Statistics prune the two files that end before the range starts.
    assert len(lake.data_files(table, time) or []) == 1
    out = lake.read(table, "t", ["window_start", "events"], time=time)
    assert out["events"].to_list() == [24, 25, 26, 27, 28]
    assert out.schema["window_start"] == pl.Datetime("us", "UTC")
    only = lake.read(table, "t", ["events"], time=time, equals={"device_id": "d1"})
    assert only["events"].to_list() == [25, 28]
    assert sorted(lake.read(table, "t", ["events"])["events"].to_list()) == list(range(30))


def test_read_reads_each_file_once_through_the_file_reader(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, _minutes(10).to_arrow())
    calls: list[str] = []

    def counting(uri: str, columns, equals) -> pl.DataFrame:
        calls.append(uri)
        return lake.read_file(uri, columns, equals)

    cache: dict[tuple, pl.DataFrame] = {}

    def cached(uri: str, columns, equals) -> pl.DataFrame:
        key = (uri, columns, equals)
        if key not in cache:
            cache[key] = counting(uri, columns, equals)
        return cache[key]

    lake.read(DeltaTable(uri), "t", ["events"], file_reader=cached)
    write_deltalake(uri, _minutes(2).to_arrow(), mode="append")
    out = lake.read(DeltaTable(uri), "t", ["events"], file_reader=cached)
    assert sorted(out["events"].to_list()) == sorted([*range(10), 0, 1])
    assert len(calls) == 2 and len(set(calls)) == 2  # the first file was not read again


def test_read_naive_timestamps_as_utc(tmp_path):
    uri = str(tmp_path / "ntz")
    write_deltalake(uri, _minutes(10, tz=None).to_arrow())
    table = DeltaTable(uri)
    time = lake.TimeRange("window_start", T0 - timedelta(minutes=2), None)
    out = lake.read(table, "ntz", ["window_start", "events"], time=time)
    assert out["window_start"].to_list() == [T0 - timedelta(minutes=m) for m in (2, 1, 0)]


def test_partitioned_tables_use_the_delta_reader(tmp_path):
    uri = str(tmp_path / "parted")
    write_deltalake(uri, _minutes(9).to_arrow(), partition_by=["device_id"])
    table = DeltaTable(uri)
    assert lake.data_files(table, None) is None
    out = lake.read(
        table, "parted", ["events"], time=lake.TimeRange("window_start", T0 - timedelta(minutes=3))
    )
    assert sorted(out["events"].to_list()) == [5, 6, 7, 8]


def test_missing_table_and_missing_columns(tmp_path):
    assert lake.open_table(str(tmp_path / "nothing")) is None
    uri = str(tmp_path / "t")
    write_deltalake(uri, _minutes(3).to_arrow())
    with pytest.raises(lake.TableUnreadableError, match="t has no column status, site"):
        lake.read(DeltaTable(uri), "t", ["events", "status", "site"])


def test_files_written_before_a_column_was_added_read_it_as_null(tmp_path):
    uri = str(tmp_path / "evolve")
    write_deltalake(uri, _minutes(2).to_arrow())
    later = _minutes(1).with_columns(status=pl.lit("online"))
    write_deltalake(uri, later.to_arrow(), mode="append", schema_mode="merge")
    out = lake.read(DeltaTable(uri), "evolve", ["events", "status"])
    assert out.sort("status", nulls_last=True).rows() == [(0, "online"), (0, None), (1, None)]


# ---------------------------------------------------------------- computations


def _gold(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={
            "window_start": pl.Datetime("us", "UTC"),
            "device_id": pl.String,
            "device_type": pl.String,
            "site": pl.String,
            "events": pl.Int64,
            "temperature_c_avg": pl.Float64,
            "co2_ppm_avg": pl.Float64,
            "last_event_time": pl.Datetime("us", "UTC"),
        },
        orient="row",
    ).with_columns(window_end=pl.col("window_start") + pl.duration(minutes=1))


def test_overview_kpis_by_hand():
    now = T0 + timedelta(seconds=30)
    gold = _gold(
        [
            (T0 - timedelta(minutes=10), "a", "t", "S", 10, 20.0, None, T0 - timedelta(minutes=9)),
            (T0 - timedelta(minutes=1), "a", "t", "S", 30, 24.0, None, T0 - timedelta(seconds=5)),
            (T0 - timedelta(minutes=1), "b", "q", "S", 20, None, 800.0, T0 - timedelta(seconds=2)),
            (T0, "b", "q", "S", 5, None, 600.0, T0 + timedelta(seconds=20)),
        ]
    )
    kpi = data.overview_kpis(data.gold_parts(gold), now, active_minutes=5)
    assert kpi.active_devices == 2
    assert kpi.events == 65
    # T0-10 stands alone, T0-1 has no minute before it, T0 is open: none is complete.
    assert kpi.events_per_min is None
    assert kpi.latest_window == T0
    assert kpi.freshness_s == 10.0
    assert kpi.metric_averages == {
        "temperature_c": (20.0 * 10 + 24.0 * 30) / 40,
        "co2_ppm": (800.0 * 20 + 600.0 * 5) / 25,
    }
    cube = data.fleet_cube(gold)
    assert data.events_per_minute(cube, "device_type").rows() == [
        (T0 - timedelta(minutes=10), "t", 10),
        (T0 - timedelta(minutes=1), "q", 20),
        (T0 - timedelta(minutes=1), "t", 30),
        (T0, "q", 5),
    ]
    assert data.metric_over_time(cube, "co2_ppm").rows() == [
        (T0 - timedelta(minutes=1), "q", 800.0),
        (T0, "q", 600.0),
    ]
    assert data.overview_kpis(data.gold_parts(gold.head(0)), now, 5) == data.OverviewKpis(
        0, 0, None, None, None, {}
    )
    assert data.overview_kpis(data.combine_parts([]), now, 5).events == 0


def _fleet_minutes(events: list[int], site: str = "S") -> pl.DataFrame:
    """One device's consecutive minutes from T0 with these event counts."""
    return _gold(
        [
            (T0 + timedelta(minutes=m), "a", "t", site, n, 20.0, None,
             T0 + timedelta(minutes=m, seconds=59))
            for m, n in enumerate(events)
        ]
    )  # fmt: skip


def test_events_per_min_counts_complete_minutes_only():
    # The run starts mid-minute (7,913), then three full minutes of 12,000, then the
    # current minute, 25 s in.
    now = T0 + timedelta(minutes=4, seconds=25)
    gold = _fleet_minutes([7913, 12000, 12000, 12000, 5000])
    kpi = data.overview_kpis(data.gold_parts(gold), now, active_minutes=5)
    assert kpi.events_per_min == 12000.0
    assert kpi.events == 7913 + 3 * 12000 + 5000
    complete = data.complete_windows(data.fleet_cube(gold), now)
    assert complete["window_start"].sort().to_list() == [
        T0 + timedelta(minutes=m) for m in (1, 2, 3)
    ]
    # The lines plot the same minutes: no drop at either edge.
    assert data.events_per_minute(complete, "site")["events"].to_list() == [12000] * 3


def test_the_last_minute_of_a_stopped_run_is_left_out():
    # Stopped 40 s into the fourth minute (4,800): long after, the three full minutes remain.
    gold = _fleet_minutes([6000, 12000, 12000, 12000, 4800])
    later = T0 + timedelta(hours=1)
    assert data.overview_kpis(data.gold_parts(gold), later, 5).events_per_min == 12000.0
    assert data.overview_kpis(data.gold_parts(gold), later, 5).active_devices == 0
    # The minute just ended counts once the processor has rows of the next one.
    cube = data.fleet_cube(_fleet_minutes([6000, 12000, 12000, 12000]))
    at = T0 + timedelta(minutes=4, seconds=3)
    assert data.complete_windows(cube, at)["events"].to_list() == [12000, 12000]


def test_shown_status_marks_silent_devices_stale_and_the_grid_shows_each():
    status = pl.DataFrame(
        {
            "device_id": ["d1", "d2", "d3", "d4", "d5", "d6", "d7"],
            "site": ["A", "A", "A", "A", "A", "B", "B"],
            "status": ["online", "offline", "degraded", "online", "online", "online", "degraded"],
            "last_event_time": [T0 - timedelta(minutes=m) for m in (1, 2, 3, 6, 4, 7, 1)],
        },
        schema_overrides={"last_event_time": pl.Datetime("us", "UTC")},
    )
    shown = data.shown_status(status, T0, active_minutes=5)
    assert shown.select("device_id", "status", "reported_status").rows() == [
        ("d1", "online", "online"),
        ("d2", "offline", "offline"),
        ("d3", "degraded", "degraded"),
        ("d4", "stale", "online"),
        ("d5", "online", "online"),
        ("d6", "stale", "online"),
        ("d7", "degraded", "degraded"),
    ]
    assert data.status_counts(shown) == {"online": 2, "degraded": 2, "offline": 1, "stale": 2}
    # 5 devices at A: 3 per row; problems first, then by id.
    grid = data.device_grid(shown)
    assert grid.select("site", "device_id", "col", "row").rows() == [
        ("A", "d2", 0, 0),
        ("A", "d3", 1, 0),
        ("A", "d4", 2, 0),
        ("A", "d1", 0, 1),
        ("A", "d5", 1, 1),
        ("B", "d7", 0, 0),
        ("B", "d6", 1, 0),
    ]


def test_device_links_keep_the_view_and_escape_the_id():
    grid = pl.DataFrame({"device_id": ["dev-00001", "a&b c"]})
    links = data.with_device_links(grid, {"range": "6h", "site": ["Austin", "São Paulo"]})
    assert links["link"].to_list() == [
        "device?device=dev-00001&range=6h&site=Austin&site=S%C3%A3o+Paulo",
        "device?device=a%26b+c&range=6h&site=Austin&site=S%C3%A3o+Paulo",
    ]
    assert data.with_device_links(grid.head(1), {})["link"].to_list() == ["device?device=dev-00001"]


def test_alerts_per_minute_leaves_out_the_current_minute():
    alerts = pl.DataFrame(
        {
            "metric": ["co2_ppm", "co2_ppm", "power_w", "co2_ppm"],
            # 11:58:50, 11:59:50, 11:59:55 and 12:00:10, in the current minute
            "event_time": [T0 + timedelta(seconds=s) for s in (-70, -10, -5, 10)],
        },
        schema_overrides={"event_time": pl.Datetime("us", "UTC")},
    )
    per_minute = data.alerts_per_minute(alerts, T0 + timedelta(seconds=30))
    assert per_minute.rows() == [(T0 - timedelta(minutes=2), "co2_ppm", 1),
                                 (T0 - timedelta(minutes=1), "co2_ppm", 1),
                                 (T0 - timedelta(minutes=1), "power_w", 1)]  # fmt: skip


def test_freshness_is_never_negative():
    gold = _gold([(T0, "a", "t", "S", 1, 1.0, None, T0 + timedelta(seconds=50))])
    parts = data.gold_parts(gold)
    assert data.overview_kpis(parts, T0 + timedelta(seconds=10), 5).freshness_s == 0.0


def test_parts_of_files_combine_to_the_parts_of_all_rows():
    rows = _gold(
        [
            (T0 - timedelta(minutes=m), f"d{m % 4}", "t" if m % 2 else "q", "S" if m % 4 else "R",
             10 + m, 20.0 + m if m % 2 else None, None if m % 2 else 500.0 + m,
             T0 - timedelta(minutes=m) + timedelta(seconds=40))
            for m in range(40)
        ]
    )  # fmt: skip
    files = [rows.slice(0, 13), rows.slice(13, 14), rows.slice(27, 13)]
    order = list(data.CUBE_KEYS)

    def in_range(frame: pl.DataFrame, start, end) -> pl.DataFrame:
        keep = [pl.col("window_start") >= start]
        if end is not None:
            keep.append(pl.col("window_start") < end)
        return frame.filter(*keep)

    for start, end, now in (
        # live: no end, the files' parts are of all their rows
        (T0 - timedelta(minutes=25), None, T0),
        # pinned clock: parts are built from the range's rows
        (T0 - timedelta(minutes=25), T0 - timedelta(minutes=5), T0 - timedelta(minutes=5)),
    ):
        parts = [data.gold_parts(f if end is None else in_range(f, start, end)) for f in files]
        combined = data.combine_parts(parts, start, end)
        direct = data.gold_parts(in_range(rows, start, end))
        assert combined.cube.sort(order).equals(
            direct.cube.select(combined.cube.columns).sort(order)
        )
        # The parts' device rows are stacked, not grouped again: grouped, they are the
        # devices of all rows; the KPIs count distinct ids either way.
        newest = combined.devices.group_by(data.DEVICE_KEYS).agg(pl.col("last_event_time").max())
        assert newest.sort("device_id").equals(direct.devices.sort("device_id"))
        assert combined.devices.height > direct.devices.height  # d0..d3 are in several files
        assert data.overview_kpis(combined, now, 10) == data.overview_kpis(direct, now, 10)


def test_alerts_with_recovery_and_summary():
    ts = pl.Datetime("us", "UTC")
    alerts = pl.DataFrame(
        {
            "alert_id": ["a", "b", "c", "d"],
            "event_time": [T0 - timedelta(minutes=m) for m in (4, 3, 2, 1)],
        },
        schema={"alert_id": pl.String, "event_time": ts},
    )
    recoveries = pl.DataFrame(
        {
            "alert_id": ["a", "b", "c"],
            "recovered_time": [T0, None, T0],
            "time_to_recover_s": [240.0, None, 120.0],
        },
        schema={"alert_id": pl.String, "recovered_time": ts, "time_to_recover_s": pl.Float64},
    )
    joined = data.alerts_with_recovery(alerts, recoveries)
    assert joined.select("alert_id", "state").rows() == [
        ("d", "open"),
        ("c", "recovered"),
        ("b", "open"),
        ("a", "recovered"),
    ]
    assert data.alert_summary(joined) == data.AlertSummary(4, 2, 2, 180.0, 120.0 + 0.95 * 120.0)
    no_table = data.alerts_with_recovery(alerts, None)
    assert data.alert_summary(no_table) == data.AlertSummary(4, 4, 0, None, None)


def test_query_health_takes_the_latest_batch_per_query():
    ts = pl.Datetime("us", "UTC")
    metrics = pl.DataFrame(
        {
            "query_name": ["q", "q", "k"],
            "batch_id": [2, 1, 7],
            "timestamp": [T0, T0 - timedelta(seconds=5), T0],
            "input_rows_per_s": [2.0, 1.0, 9.0],
            "processed_rows_per_s": [3.0, 1.0, 9.0],
            "batch_duration_ms": [200, 100, 50],
            "watermark": [T0 - timedelta(seconds=90), None, None],
            "kafka_offsets_behind": [None, None, 12],
            "state_rows": [5, 4, 0],
            "rows_dropped_by_watermark": [1, 2, 0],
        },
        schema_overrides={"timestamp": ts, "watermark": ts, "kafka_offsets_behind": pl.Int64},
    )
    health = data.query_health(metrics)
    assert health.select(
        "query_name", "batch_id", "input_rows_per_s", "watermark_delay_s",
        "kafka_offsets_behind", "rows_dropped_by_watermark", "batches",
    ).rows() == [("k", 7, 9.0, None, 12, 0, 1), ("q", 2, 2.0, 90.0, None, 3, 2)]  # fmt: skip


def test_threshold_breaches_and_labels():
    band = pl.DataFrame({"min": [10.0, 14.0, 20.0], "max": [20.0, 29.0, 27.0]})
    assert data.threshold_breaches(band, 15.0, 28.0) == 2
    assert data.threshold_breaches(band, None, 28.0) == 1
    assert data.threshold_breaches(band, None, None) == 0
    assert data.metric_label("pm25_ugm3") == "PM2.5 (µg/m³)"
    assert data.thresholds({"temperature_c_low": 15.0, "temperature_c_high": None}) == {
        "temperature_c": (15.0, None)
    }
    assert [data.format_duration(s) for s in (None, 42.0, 150.0, 5400.0)] == [
        "—",
        "42.0 s",
        "2.5 min",
        "1.5 h",
    ]


def test_per_second_frame():
    report = ProducerReport(
        target_rate=0.0, sent=5, acked=5, undelivered=0, duration_s=1.5, achieved_rate=3.3,
        errors={}, ack_latency_ms={}, per_second=[3, 2],
    )  # fmt: skip
    assert data.per_second_frame(report).rows() == [(1, 3, 0.0), (2, 2, 0.0)]


# ---------------------------------------------------------------- schema drift


def test_schema_drift_sums_each_field_over_batches_and_versions():
    t = T0.replace(hour=14, minute=5)
    drift = pl.DataFrame(
        {
            "field": ["signal_dbm", "fw", "signal_dbm", "signal_dbm"],
            "schema_version": [2, 1, 2, 1],
            "rows": [300, 4, 10, 2],
            "seen_time": [
                t,
                t + timedelta(minutes=1),
                t + timedelta(minutes=2),
                t + timedelta(minutes=3),
            ],
        }  # fmt: skip
    )
    summary = data.schema_drift(drift)
    assert summary.to_dicts() == [
        {"field": "signal_dbm", "rows": 312, "first_seen": t, "last_seen": t + timedelta(minutes=3),
         "versions": [1, 2]},
        {"field": "fw", "rows": 4, "first_seen": t + timedelta(minutes=1),
         "last_seen": t + timedelta(minutes=1), "versions": [1]},
    ]  # fmt: skip
    assert data.drift_line("signal_dbm", 312, t, now=t + timedelta(hours=2)) == (
        "new field `signal_dbm` seen on 312 rows since 14:05 UTC"
    )
    assert data.drift_line("fw", 1, t, now=t + timedelta(days=1)) == (
        "new field `fw` seen on 1 row since 2026-03-01 14:05 UTC"
    )


def test_parts_of_two_files_scoped_to_a_site_count_its_active_devices():
    from dashboard.filters import Filters

    def row(minutes_ago: int, device: str, site: str) -> tuple:
        at = T0 - timedelta(minutes=minutes_ago)
        return (at, device, "t", site, 10, 20.0, None, at + timedelta(seconds=40))

    older = _gold([row(30, "d1", "A"), row(30, "d2", "B"), row(30, "d3", "B")])
    newer = _gold([row(2, "d1", "A"), row(2, "d2", "B"), row(20, "d3", "B")])
    parts = data.combine_parts(
        [data.gold_parts(older), data.gold_parts(newer)], T0 - timedelta(hours=1)
    )
    assert parts.devices.schema["device_id"] == pl.Categorical  # grouped by integers
    site_b = data.scope_parts(parts, Filters("1h", sites=("B",)).scope)
    kpi = data.overview_kpis(site_b, T0 + timedelta(seconds=30), active_minutes=5)
    assert (kpi.active_devices, kpi.events) == (1, 40)  # d2 only: d3's last reading is old
    # d2 and d3 once per file: both files have rows of theirs in the range.
    assert sorted(site_b.devices["device_id"].cast(pl.String).to_list()) == ["d2", "d2", "d3", "d3"]


# ---------------------------------------------------------------- devices at fleet scale

_RANK = {"offline": 0, "degraded": 1, "stale": 2, "online": 3}


def _status_rows(statuses: dict[str, str]) -> pl.DataFrame:
    return pl.DataFrame(
        {"device_id": list(statuses), "status": list(statuses.values())},
        schema={"device_id": pl.String, "status": pl.String},
    )


def test_attention_page_orders_problems_first_and_pages_them():
    statuses = {
        "d09": "online", "d01": "online", "d05": "stale", "d02": "offline", "d08": "degraded",
        "d03": "online", "d07": "offline", "d04": "degraded", "d06": "rebooting",
    }  # fmt: skip
    frame = _status_rows(statuses)
    # Independently: sorted by (rank, id), an unknown status after online.
    order = sorted(statuses, key=lambda d: (_RANK.get(statuses[d], 4), d))
    assert order == ["d02", "d07", "d04", "d08", "d05", "d01", "d03", "d09", "d06"]
    pages = [data.attention_page(frame, page, 4)["device_id"].to_list() for page in (1, 2, 3)]
    assert pages == [order[0:4], order[4:8], order[8:9]]
    assert pages == [["d02", "d07", "d04", "d08"], ["d05", "d01", "d03", "d09"], ["d06"]]
    assert data.attention_page(frame, 4, 4).height == 0  # past the last page
    # Every page of every size, pages starting and ending inside a status's rows too.
    for size in range(1, 11):
        for page in range(1, len(order) // size + 3):
            got = data.attention_page(frame, page, size)["device_id"].to_list()
            assert got == order[(page - 1) * size : page * size], (size, page)
    assert data.attention_page(frame, 1, 100)["device_id"].to_list() == order
    # Every column kept, none added.
    assert data.attention_page(frame, 1, 2).columns == ["device_id", "status"]
    assert data.attention_page(frame.head(0), 1, 4).height == 0


def test_page_count():
    assert [data.page_count(rows, 50) for rows in (0, 1, 50, 51, 100, 1_000_000)] == [
        1, 1, 1, 2, 2, 20_000,
    ]  # fmt: skip


def _index() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "device_id": ["dev-00017", "DEV-00170", "dev-00001", "17-north", "x-117", "dev-00017"],
            "site": ["A", "B", "A", "A", "B", "A"],
            "device_type": ["t", "t", "q", "t", "q", "t"],
        }
    )


def test_device_index_keeps_each_id_once_by_id():
    devices = pl.concat(
        [_index(), pl.DataFrame({"device_id": [None], "site": ["A"], "device_type": ["t"]})]
    ).with_columns(pl.col("site").cast(pl.Categorical))
    index = data.device_index(devices)
    assert index.rows() == [
        ("17-north", "A", "t"),
        ("DEV-00170", "B", "t"),
        ("dev-00001", "A", "q"),
        ("dev-00017", "A", "t"),
        ("x-117", "B", "q"),
    ]
    assert index.schema == {"device_id": pl.String, "site": pl.String, "device_type": pl.String}


def test_search_devices_prefix_first_then_substring_case_insensitive():
    index = data.device_index(_index())
    found = data.search_devices(index, " 17 ")
    # "17-north" starts with 17; the others contain it later, by id (upper case first).
    assert found.shown["device_id"].to_list() == ["17-north", "DEV-00170", "dev-00017", "x-117"]
    assert found.total == 4
    found = data.search_devices(index, "dev-0017")
    assert (found.shown["device_id"].to_list(), found.total) == (["DEV-00170"], 1)
    found = data.search_devices(index, "DEV-0001")  # dev-00017 only: DEV-00170 has 0017
    assert (found.shown["device_id"].to_list(), found.total) == (["dev-00017"], 1)
    found = data.search_devices(index, "Dev-00")
    assert found.shown["device_id"].to_list() == ["DEV-00170", "dev-00001", "dev-00017"]
    found = data.search_devices(index, "nothing")
    assert (found.shown.height, found.total) == (0, 0)


def test_search_devices_narrows_by_site_and_type_and_limits_the_list():
    index = data.device_index(_index())
    assert data.search_devices(index, "17", sites=["A"]).shown["device_id"].to_list() == [
        "17-north", "dev-00017",
    ]  # fmt: skip
    assert data.search_devices(index, "", device_types=["q"]).shown["device_id"].to_list() == [
        "dev-00001", "x-117",
    ]  # fmt: skip
    assert data.search_devices(index, "1", sites=["B"], device_types=["t"]).total == 1
    limited = data.search_devices(index, "17", limit=2)
    assert (limited.shown["device_id"].to_list(), limited.total) == (["17-north", "DEV-00170"], 4)
    # A blank search offers the first ids.
    blank = data.search_devices(index, "  ", limit=3)
    assert (blank.shown["device_id"].to_list(), blank.total) == (
        ["17-north", "DEV-00170", "dev-00001"], 5,
    )  # fmt: skip
    # A million ids, of which 20 contain "12345" (01234x.., 0d12345): only the limit's rows come back.
    many = pl.DataFrame(
        {"device_id": [f"d-{i:07d}" for i in range(1_000_000)], "site": "A", "device_type": "t"}
    )
    found = data.search_devices(many, "12345", limit=5)
    expected = sorted(d for d in (f"d-{i:07d}" for i in range(1_000_000)) if "12345" in d)
    assert found.total == len(expected) == 20
    assert found.shown["device_id"].to_list() == expected[:5]


def test_distinct_count_of_categorical_codes_and_of_strings():
    ids = ["d3", "d1", None, "d3", "d2", "d1", "d3"]
    assert data.distinct_count(pl.Series(ids, dtype=pl.Categorical)) == len({"d1", "d2", "d3"})
    assert data.distinct_count(pl.Series(ids, dtype=pl.String)) == 3
    assert data.distinct_count(pl.Series(["d9"], dtype=pl.Categorical).head(0)) == 0
    assert data.distinct_count(pl.Series([None, None], dtype=pl.Categorical)) == 0


def test_parts_of_one_window_keep_a_row_per_device_ungrouped():
    at = T0 - timedelta(minutes=1)
    rows = _gold(
        [(at, d, "t", "S", 10, 20.0, None, at + timedelta(seconds=s)) for d, s in
         (("d1", 10), ("d2", 50), ("d3", 20))]
    )  # fmt: skip
    parts = data.gold_parts(rows)
    assert parts.devices.select(pl.col("device_id").cast(pl.String), "last_event_time").rows() == [
        ("d1", at + timedelta(seconds=10)),
        ("d2", at + timedelta(seconds=50)),
        ("d3", at + timedelta(seconds=20)),
    ]
    kpi = data.overview_kpis(parts, T0, active_minutes=1)
    # Active: newest event at or after 11:59:00: all three; freshness from d2's 11:59:50.
    assert (kpi.active_devices, kpi.freshness_s) == (3, 10.0)


def test_files_that_cannot_hold_the_device_are_not_read(tmp_path):
    uri = str(tmp_path / "t")
    frame = _minutes(30)
    for ids in (["d0", "d1"], ["d2"]):  # one file of d0 and d1, one of d2
        write_deltalake(uri, frame.filter(pl.col("device_id").is_in(ids)).to_arrow(), mode="append")
    table = DeltaTable(uri)
    files = table.file_uris()
    (of_d2,) = [f for f in files if pl.read_parquet(f)["device_id"].to_list()[0] == "d2"]
    (of_d01,) = set(files) - {of_d2}
    assert lake.data_files(table, None, {"device_id": "d2"}) == [of_d2]
    assert lake.data_files(table, None, {"device_id": "d1"}) == [of_d01]
    assert lake.data_files(table, None, {"device_id": "d9"}) == []
    assert sorted(lake.data_files(table, None) or []) == sorted(files)
    # With the time range too: both prune.
    time = lake.TimeRange("window_start", T0 - timedelta(minutes=5), T0)
    assert lake.data_files(table, time, {"device_id": "d2"}) == [of_d2]
    read: list[str] = []

    def reader(uri: str, columns, equals) -> pl.DataFrame:
        read.append(uri)
        return lake.read_file(uri, columns, equals)

    out = lake.read(table, "t", ["events"], equals={"device_id": "d2"}, file_reader=reader)
    assert sorted(out["events"].to_list()) == [e for e in range(30) if e % 3 == 2]
    assert read == [of_d2]
