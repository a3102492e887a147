"""Every dashboard page through Streamlit's AppTest, on Delta tables seeded per docs/tables.md.

The expected numbers are computed here from the seeded rows with plain Python, not
with the dashboard's functions.
"""

from __future__ import annotations

import json
import re
import statistics
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from streamlit.testing.v1 import AppTest

from common.alerts import LiveAlert
from common.kafka_settings import KafkaSettings
from dashboard import data, live_alerts, ui
from dashboard import pages as dashboard_pages
from processor.settings import ProcessorSettings
from producer.settings import SCENARIOS, ProducerSettings
from tests.browser.seed import (
    AS_OF,
    MINUTE,
    REPORT,
    SeededLake,
    device_status_frame,
    devices_frame,
    gold_device_1m_frame,
    seed_lake,
)

pytestmark = pytest.mark.usefixtures("streamlit_components_scanned_once")
APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
PAGES = tuple(page[0] for page in dashboard_pages.PAGES)
LABELS = {
    "temperature_c": "Avg Temperature (°C)",
    "humidity_pct": "Avg Humidity (%)",
    "co2_ppm": "Avg CO₂ (ppm)",
    "pm25_ugm3": "Avg PM2.5 (µg/m³)",
    "vibration_mm_s": "Avg Vibration (mm/s)",
    "power_w": "Avg Power (W)",
    "voltage_v": "Avg Voltage (V)",
}


@pytest.fixture
def lake(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "lake"
    root.mkdir()
    monkeypatch.setenv("IOT_LAKE_ROOT", str(root))
    monkeypatch.setenv("IOT_DASHBOARD_AS_OF", AS_OF.isoformat())
    monkeypatch.setenv("IOT_DASHBOARD_REPORT_PATH", str(tmp_path / "lake-report.json"))
    # No Kafka consumer in the test process: the live alerts tests below give the page one.
    monkeypatch.setenv("IOT_DASHBOARD_LIVE_ALERTS", "false")
    return root


@pytest.fixture
def seeded(lake) -> SeededLake:
    return seed_lake(lake)


def _run(script: str = "views/overview.py", /, **params: str | list[str]) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update(params)
    if script != PAGES[0]:
        at.switch_page(script)  # open the page's own URL, as a shared link does
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _chart_data(chart) -> list[list[dict]]:
    """The datasets of an Altair chart as AppTest sees it, as lists of rows."""
    return [pa.ipc.open_stream(d.data.data).read_all().to_pylist() for d in chart.proto.datasets]


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _rows(frame: pl.DataFrame) -> list[dict]:
    return list(frame.iter_rows(named=True))


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


# ---------------------------------------------------------------- empty states


def test_the_settings_the_empty_states_name_are_the_services_own():
    """The dashboard (its image holds common/ and dashboard/ only) cannot import the
    producer's or the processor's settings: the names it gives are checked here."""
    from dashboard import ui
    from processor.settings import ProcessorSettings

    texts = " ".join(state.why for state in ui.EMPTY_STATES.values())
    assert f"{ProducerSettings.env_name('scenario')}=realistic" in texts
    assert ProcessorSettings.env_name("session_gap") in texts
    assert ProducerSettings.env_name("report_path") in Path(
        "dashboard/views/loadtest.py"
    ).read_text(encoding="utf-8")


def test_every_page_waits_on_an_empty_lake(lake):
    demo = "(make demo starts the producer and the processor)"
    no_devices = (
        f"No devices yet. A device appears here once its first reading has been processed {demo}."
    )
    expected = {
        "views/overview.py": [
            "No readings yet. The fleet's figures appear about a minute after readings start "
            f"{demo}.",
            no_devices,
        ],
        "views/device.py": [no_devices],
        "views/alerts.py": [
            "No alerts yet. An alert is raised when a reading crosses its device's threshold "
            "or jumps far from its recent values. make demo's realistic scenario injects "
            "spikes that raise some within about two minutes (elsewhere: "
            f"{ProducerSettings.env_name('scenario')}=realistic)."
        ],
        "views/pipeline.py": [
            "No streaming progress yet. The processor records every micro-batch of its "
            f"streaming queries here {demo}.",
            "No quarantined records yet. Readings the processor cannot use (unparsable, "
            "missing fields, unknown devices) are set aside here once it runs.",
            "No undeclared fields yet. Fields that a reading's schema version does not "
            "declare are counted here once the processor sees them.",
        ],
        "views/loadtest.py": [
            f"Waiting for data: no producer report at {lake.parent / 'lake-report.json'} yet. "
            "Run the producer with IOT_PRODUCER_REPORT_PATH set to it (make demo does)."
        ],
    }
    for page in PAGES:
        at = _run(page)
        assert [i.value for i in at.info] == expected[page], page
        assert not at.warning, page
        assert _metrics(at) == {}, page
        _assert_no_table_names(at)


def test_empty_states_name_the_settings_as_the_services_spell_them():
    # The dashboard image has neither the producer nor the processor, so its texts
    # spell their settings out; these must stay what those services read.
    alerts = ui.EMPTY_STATES["gold/alerts"].why
    sessions = ui.EMPTY_STATES["gold/device_sessions"].why
    assert f"{ProducerSettings.env_name('scenario')}=realistic" in alerts
    assert "realistic" in SCENARIOS
    assert f"2 minutes by default, {ProcessorSettings.env_name('session_gap')}" in sessions
    assert ProcessorSettings.model_fields["session_gap"].default == "2 minutes"


def _assert_no_table_names(at: AppTest) -> None:
    """A person reads the page: no internal table name in a note or caption."""
    texts = [e.value for e in (*at.info, *at.caption, *at.success)]
    texts += [m.proto.help for m in at.metric]
    for text in texts:
        assert not re.search(r"\b(bronze|silver|gold|ops|dim)/", text), text


def test_empty_tables_wait_too(lake):
    for name, frame in (
        ("gold/device_1m", pl.DataFrame(schema={"window_start": pl.Datetime("us", "UTC")})),
        ("gold/alerts", pl.DataFrame(schema={"event_time": pl.Datetime("us", "UTC")})),
    ):
        write_deltalake(str(lake / name), frame.to_arrow())
    at = _run()
    # An empty table lacking the spec's columns is a problem, said so without a traceback.
    assert [w.value for w in at.warning] == [
        "Cannot read the fleet's readings right now (gold/device_1m has no column window_end, device_id, "
        "device_type, site, events, temperature_c_avg, humidity_pct_avg, co2_ppm_avg, "
        "pm25_ugm3_avg, vibration_mm_s_avg, power_w_avg, voltage_v_avg, last_event_time); "
        "retrying at the next refresh."
    ]


def test_a_lake_on_a_store_that_does_not_answer_is_a_one_line_warning(lake, monkeypatch):
    # Port 9 (discard) refuses: delta-rs's S3 client gives up in about 2 s per table.
    monkeypatch.setenv("IOT_LAKE_ROOT", "s3a://lake/iot")
    monkeypatch.setenv("IOT_LAKE_S3_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("IOT_LAKE_S3_REGION", "us-east-1")
    monkeypatch.setenv("IOT_LAKE_S3_ACCESS_KEY_ID", "test-key-id")  # else it asks the
    monkeypatch.setenv("IOT_LAKE_S3_SECRET_ACCESS_KEY", "test-secret")  # instance metadata
    at = _run()
    warnings = [w.value for w in at.warning]
    assert warnings and warnings[0].startswith(
        "Cannot read the fleet's readings right now (gold/device_1m: "
    ), warnings
    assert "127.0.0.1:9" in warnings[0]
    assert all("\n" not in w and "\x1b" not in w for w in warnings), warnings
    assert not any("test-secret" in w for w in warnings)


def test_only_gold_device_1m_shows_kpis_and_waits_for_the_rest(lake):
    seeded = seed_lake(lake, ("gold/device_1m",), report=False)
    at = _run()
    metrics = _metrics(at)
    assert metrics["Open alerts, last 1 h"] == "—"
    assert metrics["Latency p50, last 5 min"] == "—"
    assert metrics["Active devices"] == "5"
    # The grid's note agrees with "Active devices 5" beside it: the status table lags.
    assert [i.value for i in at.info] == [
        "No devices to show yet, although 5 devices sent readings in the last 5 min. The "
        "devices' status is written by a streaming query of its own, which has not "
        "committed yet; it shows once that query's first batch is in."
    ]
    _assert_no_table_names(at)
    assert seeded.frames["gold/device_1m"].height == 6 * 31 - 20


# ---------------------------------------------------------------- overview


def _complete(gold: list[dict]) -> list[dict]:
    """Rows of ended minutes whose neighbouring minutes both have rows."""
    starts = {r["window_start"] for r in gold}
    one = timedelta(minutes=1)
    return [
        r
        for r in gold
        if r["window_end"] <= AS_OF
        and r["window_start"] - one in starts
        and r["window_start"] + one in starts
    ]


def _overview_expected(
    seeded: SeededLake, range_: timedelta, sites=None, types=None
) -> dict[str, str]:
    start = AS_OF.replace(second=0) - range_
    hours = range_.total_seconds() / 3600
    range_text = f"{hours:g} h"

    def keep(row: dict) -> bool:
        return (sites is None or row["site"] in sites) and (
            types is None or row["device_type"] in types
        )

    gold = [
        r
        for r in _rows(seeded.frames["gold/device_1m"])
        if start <= r["window_start"] < AS_OF and keep(r)
    ]
    active = {r["device_id"] for r in gold if r["last_event_time"] >= AS_OF - timedelta(minutes=5)}
    complete = _complete(gold)
    per_min = sum(r["events"] for r in complete) / len({r["window_start"] for r in complete})
    freshness = (AS_OF - max(r["last_event_time"] for r in gold)).total_seconds()

    recovered = {
        r["alert_id"]
        for r in _rows(seeded.frames["gold/alert_recoveries"])
        if r["recovered_time"] is not None
    }
    open_alerts = [
        a
        for a in _rows(seeded.frames["gold/alerts"])
        if start <= a["event_time"] < AS_OF and keep(a) and a["alert_id"] not in recovered
    ]
    latencies = [
        r["process_latency_s"]
        for r in _rows(seeded.frames["silver/events"])
        if AS_OF - timedelta(seconds=300) <= r["event_time"] < AS_OF and keep(r)
    ]
    expected = {
        "Active devices": f"{len(active):,}",
        "Events / min": f"{per_min:,.0f}",
        f"Open alerts, last {range_text}": f"{len(open_alerts):,}",
        "Latency p50, last 5 min": f"{np.percentile(latencies, 50):.1f} s",
        "Freshness, newest event": _duration(freshness),
    }
    for metric, label in LABELS.items():
        pairs = [(r[f"{metric}_avg"], r["events"]) for r in gold if r[f"{metric}_avg"] is not None]
        if pairs:
            mean = sum(v * n for v, n in pairs) / sum(n for _, n in pairs)
            expected[label] = f"{mean:,.1f}"
    return expected


def test_overview_kpis_equal_independent_computation(seeded):
    at = _run()
    expected = _overview_expected(seeded, timedelta(hours=1))
    assert _metrics(at) == expected
    # Spot-check the independent computation itself on hand-known values.
    assert expected["Active devices"] == "5"  # dev-00006 went silent 20 minutes ago
    assert expected["Open alerts, last 1 h"] == "2"  # a2 (recovery row without a time), a4
    assert expected["Freshness, newest event"] == "10.0 s"  # newest 12:00:20, now 12:00:30
    assert not at.info and not at.warning
    assert at.query_params == {}


def test_overview_filters_come_from_and_go_to_the_url(seeded):
    at = _run(range="6h", site="Austin", type=["thermostat", "air_quality"])
    expected = _overview_expected(
        seeded, timedelta(hours=6), sites={"Austin"}, types={"thermostat", "air_quality"}
    )
    assert _metrics(at) == expected
    # The 3-hour-old minute (1,000 events a device) is inside 6 h: it moves the mean.
    assert expected != _overview_expected(
        seeded, timedelta(hours=1), sites={"Austin"}, types={"thermostat", "air_quality"}
    )
    assert at.selectbox(key="range").value == "6h"
    assert at.multiselect(key="site").value == ["Austin"]
    assert at.multiselect(key="type").value == ["thermostat", "air_quality"]
    assert at.query_params == {
        "range": "6h",
        "site": "Austin",
        "type": ["thermostat", "air_quality"],
    }

    at.multiselect(key="site").set_value([]).run()
    assert at.query_params == {"range": "6h", "type": ["thermostat", "air_quality"]}
    assert _metrics(at) == _overview_expected(
        seeded, timedelta(hours=6), types={"thermostat", "air_quality"}
    )


def test_overview_rereads_a_table_after_a_new_commit(seeded, lake):
    at = _run()
    before = _metrics(at)["Events / min"]
    extra = seeded.frames["gold/device_1m"].filter(
        pl.col("window_start") == AS_OF.replace(second=0) - timedelta(minutes=1)
    )
    write_deltalake(str(lake / "gold/device_1m"), extra.to_arrow(), mode="append")
    at.run()
    rows = _rows(pl.concat([seeded.frames["gold/device_1m"], extra]))
    complete = _complete(
        [r for r in rows if AS_OF.replace(second=0) - timedelta(hours=1) <= r["window_start"]]
    )
    per_min = sum(r["events"] for r in complete) / len({r["window_start"] for r in complete})
    assert _metrics(at)["Events / min"] == f"{per_min:,.0f}" != before


def _spec(chart) -> dict:
    return json.loads(chart.proto.spec)


def test_overview_charts_and_devices(seeded):
    at = _run()
    charts = at.get("vega_lite_chart")
    # events by type, events by site, metric over time (temperature, the default), devices
    assert len(charts) == 4
    start = AS_OF.replace(second=0) - timedelta(hours=1)
    gold = [r for r in _rows(seeded.frames["gold/device_1m"]) if start <= r["window_start"] < AS_OF]
    complete = _complete(gold)
    # The range's first minute and the open one are left out: 28 of the 30 minutes.
    assert len({r["window_start"] for r in complete}) == 28
    for chart, by in ((charts[0], "device_type"), (charts[1], "site")):
        expected: dict[tuple, int] = {}
        for r in complete:
            key = (r["window_start"], r[by])
            expected[key] = expected.get(key, 0) + r["events"]
        (shown,) = _chart_data(chart)
        assert {(p["window_start"], p[by]): p["events"] for p in shown} == expected
        x = _spec(chart)["encoding"]["x"]
        assert x["scale"] == {"type": "utc"} and x["title"] == "time (UTC)"
        assert x["axis"]["format"]["minutes"] == "%H:%M"
        assert x["axis"]["format"]["hours"] == "%H:%M"
        assert _spec(chart)["encoding"]["tooltip"][0] == {
            "field": "window_start", "type": "temporal",
            "timeUnit": "utchoursminutesseconds", "title": "time (UTC)",
        }  # fmt: skip
    sums: dict[tuple, list[float]] = {}
    for r in complete:
        if r["temperature_c_avg"] is not None:
            acc = sums.setdefault((r["window_start"], r["device_type"]), [0.0, 0])
            acc[0] += r["temperature_c_avg"] * r["events"]
            acc[1] += r["events"]
    (shown,) = _chart_data(charts[2])
    assert {(p["window_start"], p["device_type"]): p["temperature_c"] for p in shown} == (
        pytest.approx({k: total / n for k, (total, n) in sums.items()})
    )
    (cells,) = _chart_data(charts[3])
    # dev-00006 last reported offline 20 minutes ago: stale, the threshold being 5 minutes.
    assert {(c["device_id"], c["status"], c["reported_status"]) for c in cells} == {
        (r["device_id"], "stale" if r["device_id"] == "dev-00006" else r["status"], r["status"])
        for r in _rows(seeded.frames["gold/device_status"])
    }
    assert {c["device_id"]: c["link"] for c in cells}["dev-00003"] == "device?device=dev-00003"
    captions = [c.value for c in at.caption]
    assert (
        "online: 4 · degraded: 1 · offline: 0 · stale: 1 — stale: nothing received for over "
        "5 min (IOT_DASHBOARD_ACTIVE_MINUTES), whatever the device last reported"
    ) in captions
    _assert_no_table_names(at)


def test_overview_waits_for_the_first_complete_minute(lake):
    # The run's first minute (partial) and the current one: nothing complete yet.
    frame = gold_device_1m_frame().filter(pl.col("window_start") >= MINUTE - timedelta(minutes=1))
    write_deltalake(str(lake / "gold/device_1m"), frame.to_arrow())
    at = _run()
    assert _metrics(at)["Events / min"] == "—"
    assert _metrics(at)["Active devices"] == "5"
    assert [i.value for i in at.info][0] == (
        "The charts start after the first complete minute: the current minute and the first "
        "and last minute of a run are left out, as they are only partly filled."
    )
    assert at.get("vega_lite_chart") == []  # no line charts, and no device table yet


def test_status_counts_agree_with_active_devices_after_the_pipeline_stops(seeded, monkeypatch):
    # 50 minutes after the last event every device is stale, and Active devices is 0.
    monkeypatch.setenv("IOT_DASHBOARD_AS_OF", (AS_OF + timedelta(minutes=50)).isoformat())
    at = _run()
    assert _metrics(at)["Active devices"] == "0"
    (cells,) = _chart_data(at.get("vega_lite_chart")[-1])
    assert {c["status"] for c in cells} == {"stale"} and len(cells) == 6
    assert any(
        c.startswith("online: 0 · degraded: 0 · offline: 0 · stale: 6 — ")
        for c in (x.value for x in at.caption)
    )


def test_fifty_devices_at_three_sites_are_fifty_marks(lake):
    seed_lake(lake, ("gold/device_1m",), report=False)
    sites = ("Austin", "Boston", "Chicago")
    rows = [
        {
            "device_id": f"dev-{i:05d}",
            "device_type": "thermostat",
            "site": sites[i % 3],
            "building": "HQ",
            "lat": 30.0 + i % 3,
            "lon": -97.0,  # one point per site
            "status": "degraded" if i == 17 else "online",
            "battery_pct": None,
            "last_event_time": AS_OF - timedelta(seconds=10),
            "last_seq": i,
            "updated_time": AS_OF,
        }  # fmt: skip
        for i in range(50)
    ]
    frame = pl.DataFrame(rows, schema_overrides={"last_event_time": pl.Datetime("us", "UTC"),
                                                  "updated_time": pl.Datetime("us", "UTC")})  # fmt: skip
    write_deltalake(str(lake / "gold/device_status"), frame.to_arrow())
    at = _run()
    chart = at.get("vega_lite_chart")[-1]
    (cells,) = _chart_data(chart)
    assert len(cells) == 50
    assert len({(c["site"], c["col"], c["row"]) for c in cells}) == 50  # one cell each
    # 17 devices at the largest site: 5 per row; the degraded one comes first in its site.
    degraded = [c for c in cells if c["status"] == "degraded"]
    assert [(c["device_id"], c["site"], c["col"], c["row"]) for c in degraded] == [
        ("dev-00017", "Chicago", 0, 0)
    ]
    assert max(c["col"] for c in cells) == 4 and max(c["row"] for c in cells) == 3
    spec = _spec(chart)
    encoding = spec["spec"]["encoding"]
    assert encoding["href"] == {"field": "link", "type": "nominal"}
    assert encoding["shape"]["scale"]["domain"] == ["online", "degraded", "offline", "stale"]
    assert spec["facet"]["field"] == "site"


# ---------------------------------------------------------------- device


def test_device_page_for_a_device_from_the_url(seeded):
    at = _run("views/device.py", device="dev-00001")
    start = AS_OF.replace(second=0) - timedelta(hours=1)
    gold = [
        r
        for r in _rows(seeded.frames["gold/device_1m"])
        if r["device_id"] == "dev-00001" and start <= r["window_start"] < AS_OF
    ]
    breaches = sum(
        1
        for r in gold
        for metric, low, high in (("temperature_c", 15.0, 28.0), ("humidity_pct", 20.0, 70.0))
        if r[f"{metric}_min"] < low or r[f"{metric}_max"] > high
    )
    alerts = [a for a in _alert_rows(seeded) if a["device_id"] == "dev-00001"]
    sessions = [
        s
        for s in _rows(seeded.frames["gold/device_sessions"])
        if s["device_id"] == "dev-00001" and start <= s["session_end"] < AS_OF
    ]
    open_count = sum(1 for a in alerts if a["ttr"] is None)
    assert _metrics(at) == {
        "Status": "online",
        "Battery": "80 %",
        "Last event (UTC)": "12:00:20",
        "Events": f"{sum(r['events'] for r in gold):,}",
        "Minutes over a threshold": f"{breaches:,}",
        "Alerts (open)": f"{len(alerts):,} ({open_count:,})",
        "Sessions": f"{len(sessions):,}",
    }
    assert breaches == 2 and len(alerts) == 2 and open_count == 1 and len(sessions) == 2
    assert at.selectbox(key="device").value == "dev-00001"
    assert at.query_params == {"device": "dev-00001"}
    # One chart per metric of a thermostat, each with the profile's thresholds as rules,
    # and the sessions' timeline.
    charts = at.get("vega_lite_chart")
    assert len(charts) == 3
    for chart, metric, low, high in (
        (charts[0], "temperature_c", 15.0, 28.0),
        (charts[1], "humidity_pct", 20.0, 70.0),
    ):
        band, rules = _chart_data(chart)
        assert rules == [{"threshold": "low", "value": low}, {"threshold": "high", "value": high}]
        assert [r["avg"] for r in band] == [
            r[f"{metric}_avg"] for r in sorted(gold, key=lambda r: r["window_start"])
        ]
    alert_table, session_table = (d.value for d in at.dataframe)
    assert list(alert_table["state"]) == ["recovered", "open"]  # newest first
    # a1 recovered in 120 s, a7 (a z-score of the same reading) in 150 s: the row's 150.
    assert list(alert_table["time_to_recover_s"].fillna(-1)) == [150.0, -1]
    assert list(alert_table["kinds"]) == ["threshold_high, zscore", "threshold_low"]
    assert list(session_table["duration_s"]) == [
        s["duration_s"] for s in sorted(sessions, key=lambda s: s["session_start"], reverse=True)
    ]
    connected = sum(s["duration_s"] for s in sessions)
    longest = max(s["duration_s"] for s in sessions)
    assert at.caption[0].value.startswith("thermostat · Austin, Austin HQ · Model-0")
    assert f"Connected {_duration(connected)} in 2 sessions; longest {_duration(longest)}." in [
        c.value for c in at.caption
    ]


def test_a_silent_device_reads_stale_on_its_page(seeded):
    at = _run("views/device.py", device="dev-00006")
    status = next(m for m in at.metric if m.label == "Status")
    assert status.value == "stale"
    assert status.proto.help == "Last reported: offline; stale after 5 min without an event"
    assert _metrics(at)["Last event (UTC)"] == "11:40:50"


def test_device_page_defaults_to_the_first_device_in_scope(seeded):
    at = _run("views/device.py", site="Boston")
    assert at.selectbox(key="device").value == "dev-00002"
    assert at.selectbox(key="device").options == ["dev-00002", "dev-00004", "dev-00006"]


def test_device_page_without_dimension_waits_for_thresholds(lake):
    seed_lake(lake, ("gold/device_1m",), report=False)
    at = _run("views/device.py", device="dev-00003")
    infos = [i.value for i in at.info]
    assert infos[0] == (
        "No device profile yet. The profiles and alert thresholds are written when the "
        "processor starts."
    )
    assert _metrics(at)["Events"] == f"{sum(10 + 2 + m % 3 for m in range(30)):,}"
    assert len(at.get("vega_lite_chart")) == 3  # co2, pm25, temperature


# ---------------------------------------------------------------- a fleet larger than a page

FLEET = 120  # over data.SEARCH_LIMIT and the smallest page of the devices grid
_RANK = {"offline": 0, "degraded": 1, "stale": 2, "online": 3}


def _fleet(lake: Path) -> dict[str, tuple[str, str]]:
    """``dim/devices`` and ``gold/device_status`` of FLEET devices beside the seeded gold.

    Odd devices are in Austin, even ones in Boston; every tenth from the third is
    offline, from the seventh degraded; every 25th went silent 20 minutes ago.

    Returns:
        Each device's status as the Overview shows it, and its site.
    """
    seed_lake(lake, ("gold/device_1m",), report=False)
    ids = [f"dev-{i:05d}" for i in range(FLEET)]
    sites = ["Austin" if i % 2 else "Boston" for i in range(FLEET)]
    reported = [
        "offline" if i % 10 == 3 else "degraded" if i % 10 == 7 else "online" for i in range(FLEET)
    ]
    silent = [i % 25 == 0 for i in range(FLEET)]
    dim = pl.concat([devices_frame().head(1)] * FLEET).with_columns(
        device_id=pl.Series(ids), site=pl.Series(sites)
    )
    status = pl.concat([device_status_frame().head(1)] * FLEET).with_columns(
        device_id=pl.Series(ids),
        site=pl.Series(sites),
        status=pl.Series(reported),
        last_event_time=pl.Series(
            [AS_OF - timedelta(minutes=20) if s else AS_OF - timedelta(seconds=10) for s in silent],
            dtype=pl.Datetime("us", "UTC"),
        ),
    )
    write_deltalake(str(lake / "dim/devices"), dim.to_arrow())
    write_deltalake(str(lake / "gold/device_status"), status.to_arrow())
    return {
        d: ("stale" if s else r, site)
        for d, r, s, site in zip(ids, reported, silent, sites, strict=True)
    }


def _device_options(at: AppTest) -> list[str]:
    return list(at.selectbox(key="device").options)


def test_device_page_never_lists_the_fleet(lake):
    fleet = _fleet(lake)
    at = _run("views/device.py")
    # Every select box lists far fewer than the fleet: the device one, the first 50 ids.
    assert all(len(box.options) <= data.SEARCH_LIMIT for box in at.selectbox)
    assert _device_options(at) == sorted(fleet)[:50] == [f"dev-{i:05d}" for i in range(50)]
    assert at.selectbox(key="device").value == "dev-00000"
    assert f"50 of {FLEET} matching devices listed" in " ".join(c.value for c in at.caption)
    assert _metrics(at)["Status"] == "stale"  # dev-00000 went silent


def test_a_search_narrows_the_device_picker_to_the_matching_ids(lake):
    fleet = _fleet(lake)
    at = _run("views/device.py")
    at.text_input(key="find").input("0011").run()
    expected = sorted(d for d in fleet if "0011" in d)
    assert expected == ["dev-00011", *(f"dev-{i:05d}" for i in range(110, 120))]
    assert _device_options(at) == expected
    # The search opens its first match; the URL keeps both.
    assert at.selectbox(key="device").value == "dev-00011"
    assert at.query_params == {"find": "0011", "device": "dev-00011"}
    assert _metrics(at)["Status"] == "online"

    at.selectbox(key="device").set_value("dev-00113").run()
    assert _metrics(at)["Status"] == "offline"
    assert at.query_params["device"] == "dev-00113"

    # Case-insensitive, and narrowed by the sidebar's sites.
    at.text_input(key="find").input("DEV-001").run()
    assert _device_options(at) == sorted(d for d in fleet if d.startswith("dev-001"))
    at.multiselect(key="site").set_value(["Austin"]).run()
    austin = sorted(d for d, (_, site) in fleet.items() if site == "Austin" and "dev-001" in d)
    assert _device_options(at) == austin == [f"dev-{i:05d}" for i in range(101, 120, 2)]

    # No match: the open device stays, and the page says so.
    at.text_input(key="find").input("zz").run()
    assert _device_options(at) == [at.selectbox(key="device").value]
    assert "No device id contains “zz” in the selected sites and device types." in [
        c.value for c in at.caption
    ]


def test_a_device_from_the_url_opens_beyond_the_listed_matches(lake):
    fleet = _fleet(lake)
    at = _run("views/device.py", device="dev-00117")
    assert at.selectbox(key="device").value == "dev-00117"
    assert _device_options(at) == [*(f"dev-{i:05d}" for i in range(50)), "dev-00117"]
    assert _metrics(at)["Status"] == "degraded"
    assert at.query_params == {"device": "dev-00117"}
    # A search in the URL that the device does not match leaves the device open.
    at = _run("views/device.py", device="dev-00117", find="0004")
    assert at.selectbox(key="device").value == "dev-00117"
    matches = [d for d in sorted(fleet) if "0004" in d]
    assert matches == ["dev-00004", *(f"dev-{i:05d}" for i in range(40, 50))]
    assert _device_options(at) == [*matches, "dev-00117"]
    assert at.query_params == {"device": "dev-00117", "find": "0004"}


def _grid_ids(at: AppTest) -> list[str]:
    (cells,) = _chart_data(at.get("vega_lite_chart")[-1])
    return [c["device_id"] for c in cells]


def test_overview_pages_the_devices_problems_first(lake):
    fleet = _fleet(lake)
    order = sorted(fleet, key=lambda d: (_RANK[fleet[d][0]], d))
    # 12 offline, 12 degraded, 5 silent (stale whatever they reported), then online ones.
    expected = ["offline"] * 12 + ["degraded"] * 12 + ["stale"] * 5 + ["online"]
    assert [fleet[d][0] for d in order[:30]] == expected
    at = _run()
    assert sorted(_grid_ids(at)) == sorted(fleet)  # the default page holds all 120
    at = _run(per_page="50", page="2")
    assert at.selectbox(key="per_page").value == 50 and at.number_input(key="page").value == 2
    assert set(_grid_ids(at)) == set(order[50:100])
    assert f"Devices 51–100 of {FLEET}: offline, degraded and stale ones first, then by id." in [
        c.value for c in at.caption
    ]
    at.number_input(key="page").set_value(1).run()
    page = _grid_ids(at)
    assert set(page) == set(order[:50])
    # The grid draws the page by site, problems first within each site.
    by_site = [d for d in page if fleet[d][1] == "Austin"]
    assert by_site == [d for d in order[:50] if fleet[d][1] == "Austin"]
    at.number_input(key="page").set_value(3).run()
    assert set(_grid_ids(at)) == set(order[100:])
    assert at.query_params == {"per_page": "50", "page": "3"}


# ---------------------------------------------------------------- alerts


def _alert_rows(seeded: SeededLake) -> list[dict]:
    """The range's alerts, one per reading and metric: ``kinds`` in order, ``ttr`` the
    latest kind's time to recover (None while any kind is open)."""
    recoveries = {r["alert_id"]: r for r in _rows(seeded.frames["gold/alert_recoveries"])}
    start = AS_OF.replace(second=0) - timedelta(hours=1)
    order = ["threshold_high", "threshold_low", "zscore"]
    out: dict[tuple, dict] = {}
    for a in _rows(seeded.frames["gold/alerts"]):
        if not start <= a["event_time"] < AS_OF:
            continue
        ttr = recoveries.get(a["alert_id"], {}).get("time_to_recover_s")
        key = (a["device_id"], a["event_time"], a["metric"])
        row = out.setdefault(key, a | {"kinds": [], "ttrs": []})
        row["kinds"] = sorted([*row["kinds"], a["kind"]], key=order.index)
        row["ttrs"].append(ttr)
    for row in out.values():
        row["ttr"] = None if None in row["ttrs"] else max(row["ttrs"])
    return list(out.values())


def test_alerts_page_counts_and_time_to_recover(seeded):
    at = _run("views/alerts.py")
    rows = _alert_rows(seeded)
    ttr = sorted(r["ttr"] for r in rows if r["ttr"] is not None)
    assert _metrics(at) == {
        "Alerts": f"{len(rows):,}",
        "Open": f"{sum(r['ttr'] is None for r in rows):,}",
        "Recovered": f"{len(ttr):,}",
        "Median time to recover": _duration(statistics.median(ttr)),
        "p95 time to recover": _duration(float(np.percentile(ttr, 95))),
    }
    table = at.dataframe[0].value
    newest_first = sorted(rows, key=lambda r: r["event_time"], reverse=True)
    assert list(zip(table["device_id"], table["metric"], strict=True)) == [
        (r["device_id"], LABELS[r["metric"]].removeprefix("Avg ")) for r in newest_first
    ]
    assert list(table["kinds"]) == [", ".join(r["kinds"]) for r in newest_first]
    # a1 and a7, one reading's temperature: one row, recovered when both kinds were.
    assert len(rows) == 5 and len(seeded.frames["gold/alerts"]) == 7
    assert "threshold_high, zscore" in list(table["kinds"])
    assert list(table["zscore"].dropna()) == [4.2, 4.87654]  # shown to 2 decimals
    # z-scores go to the browser to 2 decimals; a missing value as a blank cell.
    proto = at.dataframe[0].proto
    config = json.loads(proto.columns)
    assert (config["zscore"]["label"], config["zscore"]["type_config"]["format"]) == (
        "z-score",
        "%.2f",
    )
    assert proto.HasField("placeholder") and proto.placeholder == ""
    assert list(table["state"]) == [
        "open" if r["ttr"] is None else "recovered" for r in newest_first
    ]


def test_alerts_page_filters_from_the_url(seeded):
    at = _run("views/alerts.py", kind="threshold_high", state="recovered", site="Austin")
    rows = [
        r
        for r in _alert_rows(seeded)
        if "threshold_high" in r["kinds"] and r["ttr"] is not None and r["site"] == "Austin"
    ]
    assert _metrics(at)["Alerts"] == f"{len(rows):,}" == "3"
    # a1, a3 and a5: dev-00001's temperature, dev-00003's CO2, dev-00005's vibration.
    assert list(at.dataframe[0].value["metric"]) == [
        "Temperature (°C)",
        "CO₂ (ppm)",
        "Vibration (mm/s)",
    ]
    assert at.query_params == {"kind": "threshold_high", "state": "recovered", "site": "Austin"}


def test_alerts_page_warns_on_a_table_without_the_spec_columns(lake):
    write_deltalake(
        str(lake / "gold/alerts"),
        pl.DataFrame({"alert_id": ["x"], "event_time": [AS_OF]}).to_arrow(),
    )
    at = _run("views/alerts.py")
    assert len(at.warning) == 1
    assert at.warning[0].value.startswith(
        "Cannot read the alerts right now (gold/alerts has no column"
    )


# ---------------------------------------------------------------- live alerts


class _Consumer:
    """A consumer of a topic with one partition and no records."""

    def __init__(self, conf: dict) -> None:
        self.conf = conf

    def list_topics(self, topic=None, timeout=-1):
        return SimpleNamespace(topics={topic: SimpleNamespace(partitions={0: None}, error=None)})

    def get_watermark_offsets(self, partition, timeout=None):
        return (0, 0)

    def incremental_assign(self, partitions) -> None:
        pass

    def consume(self, num_messages=1, timeout=-1):
        return []

    def close(self) -> None:
        pass


def _live_feed(monkeypatch, alerts: list[LiveAlert], *, reachable: bool = True, ledger=None):
    monkeypatch.setenv("IOT_DASHBOARD_LIVE_ALERTS", "true")
    # No notifier unless the test gives its delivery ledger.
    monkeypatch.setenv("IOT_DASHBOARD_DELIVERIES_PATH", str(ledger or "/nonexistent/ledger"))
    kafka = KafkaSettings(bootstrap_servers="broker-1:9092")
    feed = live_alerts.LiveFeed(kafka, 50, consumer_factory=_Consumer)
    if reachable:
        feed.step()
    else:
        feed._unreachable("Connect to ipv4#10.0.0.7:9092 failed: Connection refused")
    for alert in alerts:
        feed.buffer.add(alert)
    monkeypatch.setattr(ui, "live_feed", lambda settings: feed)
    return feed


def _live(alert_id: str, seconds: float, device_id: str, site: str, device_type: str):
    return LiveAlert(
        alert_id=alert_id, device_id=device_id, metric="temperature_c", kind="threshold_high",
        value=31.5, threshold=28.0, event_time=AS_OF, site=site, device_type=device_type,
        alert_time=AS_OF + timedelta(seconds=seconds),
        reading_time=AS_OF + timedelta(seconds=seconds - 0.5),
    )  # fmt: skip


def test_alerts_page_says_the_live_feed_is_off(seeded):
    at = _run("views/alerts.py")
    assert [s.value for s in at.subheader] == ["Live alerts", "History"]
    assert at.caption[1].value == (
        ":material/notifications_off: Live alerts are off (IOT_DASHBOARD_LIVE_ALERTS=false)."
    )
    assert not at.table and not at.warning


def test_alerts_page_shows_the_newest_live_alerts_in_the_scope(seeded, monkeypatch):
    _live_feed(
        monkeypatch,
        [
            _live("e1:temperature_c", 1, "dev-00001", "Austin", "thermostat"),
            _live("e2:temperature_c", 2, "dev-00002", "Boston", "thermostat"),
            _live("e3:temperature_c", 3, "dev-00005", "Austin", "vibration"),
        ],
    )
    at = _run("views/alerts.py", site="Austin")
    assert at.caption[1].value == (
        "2 of 3 live alerts in the selected sites and device types · following 'iot-alerts' "
        "at broker-1:9092 (1 partition) · refreshing every 1 s"
    )
    table = at.table[0].value
    assert list(table.columns) == list(live_alerts.LIVE_COLUMNS)
    assert list(table["alert id"]) == ["e3:temperature_c", "e1:temperature_c"]
    assert list(table["device"]) == ["dev-00005", "dev-00001"]
    assert list(table["latency"]) == ["0.50 s", "0.50 s"]
    # The history below is the same as without the feed.
    assert _metrics(at)["Alerts"] == "4"
    assert len(at.dataframe) == 1


def test_alerts_page_shows_how_many_destinations_have_each_live_alert(
    seeded, monkeypatch, tmp_path
):
    from notifier.ledger import Ledger

    ledger = Ledger(tmp_path / "deliveries.sqlite")
    ledger.set_destinations(["ops", "slack"])
    for destination, alert_id, ok in [
        ("ops", "e3:temperature_c", True), ("slack", "e3:temperature_c", True),
        ("ops", "e1:temperature_c", True), ("slack", "e1:temperature_c", False),
    ]:  # fmt: skip
        ledger.begin(destination, alert_id, b"{}", [{}], [alert_id])
        ledger.finish(destination, alert_id, [alert_id], delivered=ok, attempts=1)
    ledger.close()
    _live_feed(
        monkeypatch,
        [
            _live("e1:temperature_c", 1, "dev-00001", "Austin", "thermostat"),
            _live("e2:temperature_c", 2, "dev-00002", "Austin", "thermostat"),
            _live("e3:temperature_c", 3, "dev-00005", "Austin", "vibration"),
        ],
        ledger=tmp_path / "deliveries.sqlite",
    )
    at = _run("views/alerts.py")
    table = at.table[0].value
    assert list(table.columns) == [*live_alerts.LIVE_COLUMNS[:-1], "delivered", "alert id"]
    assert list(table["alert id"]) == ["e3:temperature_c", "e2:temperature_c", "e1:temperature_c"]
    assert list(table["delivered"]) == ["2 of 2", "0 of 2 · 2 pending", "1 of 2 · 1 failed"]


def test_alerts_page_says_in_one_line_that_the_broker_is_unreachable(seeded, monkeypatch):
    _live_feed(monkeypatch, [], reachable=False)
    at = _run("views/alerts.py", paused="1")
    assert [w.value for w in at.warning] == [
        "Live alerts: cannot reach the Kafka broker at broker-1:9092 (Connect to "
        "ipv4#10.0.0.7:9092 failed: Connection refused); retrying every 2 s."
    ]
    assert at.caption[1].value == "No live alerts yet · paused"
    assert not at.table
    assert _metrics(at)["Alerts"] == f"{len(_alert_rows(seeded)):,}"


# ---------------------------------------------------------------- pipeline health


def test_pipeline_page_per_query_figures(seeded):
    at = _run("views/pipeline.py")
    start = AS_OF.replace(second=0) - timedelta(hours=1)
    rows = [
        r for r in _rows(seeded.frames["ops/pipeline_metrics"]) if start <= r["timestamp"] < AS_OF
    ]
    table = at.dataframe[0].value
    assert list(table["query_name"]) == ["bronze", "gold_device_1m", "silver"]
    for _, shown in table.iterrows():
        mine = sorted(
            (r for r in rows if r["query_name"] == shown["query_name"]),
            key=lambda r: r["timestamp"],
        )
        last = mine[-1]
        assert shown["input_rows_per_s"] == last["input_rows_per_s"]
        assert shown["processed_rows_per_s"] == last["processed_rows_per_s"]
        assert shown["batch_duration_ms"] == last["batch_duration_ms"]
        assert shown["batch_id"] == last["batch_id"]
        assert shown["rows_dropped_by_watermark"] == sum(
            r["rows_dropped_by_watermark"] for r in mine
        )
        assert shown["batches"] == len(mine)
        if last["watermark"] is None:
            assert np.isnan(shown["watermark_delay_s"])
            assert shown["kafka_offsets_behind"] == last["kafka_offsets_behind"]
        else:
            assert (
                shown["watermark_delay_s"]
                == (last["timestamp"] - last["watermark"]).total_seconds()
            )
            assert np.isnan(shown["kafka_offsets_behind"])
    # the old batch with 100 dropped rows is outside the range
    assert list(table["rows_dropped_by_watermark"]) == [0, 6, 6]

    quarantine = at.dataframe[1].value
    recent = [
        r["reason"]
        for r in _rows(seeded.frames["silver/quarantine"])
        if start <= r["ingest_time"] < AS_OF
    ]
    counts = {reason: recent.count(reason) for reason in set(recent)}
    assert dict(zip(quarantine["reason"], quarantine["rows"], strict=True)) == counts
    assert list(quarantine["rows"]) == sorted(counts.values(), reverse=True)
    assert _metrics(at) == {"Quarantined rows": f"{len(recent):,}"}


# ---------------------------------------------------------------- load test


def test_loadtest_page_shows_the_report(seeded):
    at = _run("views/loadtest.py")
    lat = REPORT["ack_latency_ms"]
    assert _metrics(at) == {
        "Target rate": f"{REPORT['target_rate']:,.0f} /s",
        "Achieved rate": f"{REPORT['achieved_rate']:,.1f} /s",
        "Sent": f"{REPORT['sent']:,}",
        "Acknowledged": f"{REPORT['acked']:,}",
        "Ack latency p50": f"{lat['p50']:,.1f} ms",
        "Ack latency p95": f"{lat['p95']:,.1f} ms",
        "Ack latency p99": f"{lat['p99']:,.1f} ms",
        "Throttle events": f"{REPORT['throttle_events']:,}",
    }
    ratio = REPORT["achieved_rate"] / REPORT["target_rate"]
    assert at.metric[1].proto.delta == f"{ratio:.1%} of target"
    started = next(c.value for c in at.caption if c.value.startswith("Started "))
    assert f"pass: {ratio:.1%} of the target rate" in started
    assert started.startswith("Started 2026-03-01 11:58:00 UTC, ran 99.2 s")
    # The report counts the oversized message the producer sent on purpose among its
    # errors and again among the expected ones: it shows apart, as injected.
    assert REPORT["errors"] == {"_MSG_TIMED_OUT": 4, "MSG_SIZE_TOO_LARGE": 1}
    assert REPORT["expected_errors"] == {"MSG_SIZE_TOO_LARGE": 1}
    assert [s.value for s in at.subheader] == ["Delivery errors", "Injected faults"]
    errors, injected = (d.value for d in at.dataframe)
    assert errors.to_dict("records") == [{"kind": "_MSG_TIMED_OUT", "count": 4}]
    assert injected.to_dict("records") == [
        {"kind": "MSG_SIZE_TOO_LARGE", "count": 1, "cause": "injected on purpose"}
    ]


def test_loadtest_page_warns_on_a_broken_report(lake):
    (lake.parent / "lake-report.json").write_text('{"target_rate": 10')
    at = _run("views/loadtest.py")
    assert len(at.warning) == 1
    assert at.warning[0].value.startswith("Cannot read the producer report yet (")


# ---------------------------------------------------------------- refresh controls


def test_refresh_interval_and_pause_come_from_the_url(seeded):
    at = _run("views/alerts.py", refresh="30", paused="1")
    assert at.select_slider(key="refresh").value == 30.0
    assert at.toggle(key="paused").value is True
    assert at.caption[-1].value == "Updated 2026-03-01 12:00:30 UTC · paused"
    at.toggle(key="paused").set_value(False).run()
    assert at.caption[-1].value == "Updated 2026-03-01 12:00:30 UTC · refreshing every 30 s"
    assert at.query_params == {"refresh": "30"}


def test_overview_on_the_wall_clock(lake, monkeypatch):
    monkeypatch.delenv("IOT_DASHBOARD_AS_OF")
    minute = datetime.now(UTC).replace(second=0, microsecond=0)
    rows = [
        (minute - timedelta(minutes=m), dev, kind, site, 10 * m + n)
        for m in range(2, 11)
        for n, (dev, kind, site) in enumerate(
            (("d1", "thermostat", "A"), ("d2", "vibration", "B"), ("d3", "thermostat", "B"))
        )
    ]
    gold = pl.DataFrame(
        rows,
        schema={
            "window_start": pl.Datetime("us", "UTC"),
            "device_id": pl.String,
            "device_type": pl.String,
            "site": pl.String,
            "events": pl.Int64,
        },
        orient="row",
    ).with_columns(
        window_end=pl.col("window_start") + pl.duration(minutes=1),
        last_event_time=pl.col("window_start") + pl.duration(seconds=30),
        **{f"{m}_{s}": pl.lit(None, pl.Float64) for m in LABELS for s in ("min", "avg", "max")},
    )
    for part in (gold.slice(0, 12), gold.slice(12)):  # two commits, two files
        write_deltalake(str(lake / "gold/device_1m"), part.to_arrow(), mode="append")
    at = _run(type="thermostat")
    thermostats = [r for r in rows if r[2] == "thermostat"]
    metrics = _metrics(at)
    assert metrics["Active devices"] == "2"
    # Minutes 3 to 9 before the current one: 2 has no rows after it, 10 none before it.
    complete = [
        r
        for r in thermostats
        if r[0] <= minute - timedelta(minutes=3) and r[0] >= minute - timedelta(minutes=9)
    ]
    assert metrics["Events / min"] == f"{sum(r[4] for r in complete) / 7:,.0f}"


def test_tables_the_processor_created_empty_wait_as_for_no_table(lake):
    """The processor creates its tables at start: without a row they are "not yet" too."""
    from dashboard import lake as dashboard_lake

    text = pl.Utf8
    number = pl.Float64
    time = pl.Datetime("us", "UTC")
    types = {"window_start": time, "window_end": time, "last_event_time": time,
             "events": pl.Int64, "device_id": text, "device_type": text, "site": text,
             "building": text, "status": text}  # fmt: skip
    for name, columns in (
        ("gold/device_1m", dashboard_lake.OVERVIEW_GOLD_COLUMNS),
        ("gold/device_status", dashboard_lake.STATUS_COLUMNS),
    ):
        schema = {c: types.get(c, number) for c in columns}
        write_deltalake(str(lake / name), pl.DataFrame(schema=schema).to_arrow())
    at = _run()
    demo = "(make demo starts the producer and the processor)"
    assert [i.value for i in at.info] == [
        f"No readings yet. The fleet's figures appear about a minute after readings start {demo}.",
        f"No devices yet. A device appears here once its first reading has been processed {demo}.",
    ]
    assert not at.warning
