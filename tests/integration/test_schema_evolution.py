"""A contract that gains a field and a metric, applied to a lake that already holds data.

Run 1 sends events under the shipped contract and processes them (``available_now``,
every query). Then the contract gains ``site_zone`` and ``signal_dbm`` (a test
contract, given by ``IOT_CONTRACT``); run 2 sends later events under it and the
processor restarts on the same lake and checkpoints. Every acknowledged event is in
silver exactly once, with nulls in the new columns for run 1's rows and the new values
for run 2's; gold/device_1m has the new metric for run 2's windows only; the sliding
windows gain the metric, nothing is rebuilt, and they equal a recomputation over
silver done here in plain Python, as they do after ``rebuild device_status`` with
another slide; every dashboard page renders.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable

from common.contract import METRIC_NAMES
from common.lake import Table, table_location
from infra.broker import ensure_topic
from infra.jars import ensure_jar_dir
from loadtest.lake import read_truth
from tests.connect_fixture import engine_env
from tests.integration.proc import (
    contract_with_zone_and_signal,
    process_available_now,
    run_python,
    service_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
FLEET, SEED, COUNT = 8, 13, 320
RUN2_START = datetime(2026, 1, 1, 0, 20, tzinfo=UTC)
ZONE, SIGNAL = "zone-b", -71.25
LENGTH, SLIDE = timedelta(minutes=10), timedelta(minutes=5)


def _produce(env: dict[str, str], start: str, manifest: Path, log: Path) -> None:
    code = run_python(
        ["-m", "producer", "--scenario", "clean", "--count", str(COUNT), "--rate", "0",
         "--fleet-size", str(FLEET), "--seed", str(SEED), "--clock-rate", "1",
         "--start-time", start, "--manifest-path", str(manifest)],
        env, log, 120,
    )  # fmt: skip
    assert code == 0, log.read_text()[-3000:]


def _rows(lake: Path, table: Table) -> list[dict]:
    return DeltaTable(table_location(str(lake), table)).to_pyarrow_table().to_pylist()


def _sliding(silver: list[dict], metrics: list[str], slide: timedelta = SLIDE) -> dict[tuple, dict]:
    """site_type_windows recomputed: every 10-minute window sliding by ``slide`` with a reading."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    for row in silver:
        t = row["event_time"]
        last = epoch + (t - epoch) // slide * slide
        start = last
        while start > t - LENGTH:
            groups[(start, row["site"], row["device_type"])].append(row)
            start -= slide
    out = {}
    for key, rows in groups.items():
        agg: dict = {"events": len(rows), "devices": len({r["device_id"] for r in rows})}
        for m in metrics:
            values = [r[m] for r in rows if r[m] is not None]
            agg[f"{m}_avg"] = sum(values) / len(values) if values else None
        out[key] = agg
    return out


def _assert_windows_equal(lake: Path, expected: dict[tuple, dict]) -> None:
    """gold/site_type_windows holds exactly ``expected``'s windows, with its values."""
    got = {
        (r["window_start"].replace(tzinfo=UTC), r["site"], r["device_type"]): r
        for r in _rows(lake, Table.GOLD_SITE_TYPE_WINDOWS)
    }
    assert set(got) == set(expected)
    for key, agg in expected.items():
        for column, value in agg.items():
            want = value if value is None else pytest.approx(value, rel=1e-12)
            assert got[key][column] == want, (key, column)


@pytest.mark.parametrize("mode", ["classic", "connect"])
def test_a_field_and_a_metric_added_to_a_lake_in_use(
    mode: str, kafka_broker, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    stack = contextlib.ExitStack()
    request.addfinalizer(stack.close)  # the shared server, even if an assertion fails
    topic = f"schema-evolution-{mode}"
    ensure_topic(kafka_broker.plaintext, topic, partitions=2)
    base = service_env()
    v1 = base | {
        "IOT_KAFKA_BOOTSTRAP_SERVERS": kafka_broker.plaintext,
        "IOT_KAFKA_TOPIC": topic,
        "PYTHONUNBUFFERED": "1",
    }
    contract = contract_with_zone_and_signal(tmp_path / "contract.toml", ZONE, SIGNAL)
    v2 = v1 | {"IOT_CONTRACT": str(contract)}
    lake, log = tmp_path / "lake", tmp_path / "processor.log"

    _produce(v1, "2026-01-01T00:00:00Z", tmp_path / "m1.jsonl", tmp_path / "producer.log")
    with engine_env(mode, tmp_path, v1) as env:
        process_available_now(env, lake, log, FLEET, SEED)
    _produce(v2, RUN2_START.isoformat(), tmp_path / "m2.jsonl", tmp_path / "producer.log")
    # The second contract's runs share a server (through Spark Connect): it reads the contract.
    v2_env = stack.enter_context(engine_env(mode, tmp_path, v2))
    process_available_now(v2_env, lake, log, FLEET, SEED)
    said = log.read_text()
    assert "silver/events: added the columns `site_zone` string, `signal_dbm` double" in said
    assert "site_type_windows: added the columns `signal_dbm_avg` double" in said
    # Nothing is rebuilt: the sliding windows are rolled up from device_1m, with no state.
    assert "rebuilding" not in said

    first = set(read_truth(tmp_path / "m1.jsonl").events.collect()["event_id"].to_list())
    second = set(read_truth(tmp_path / "m2.jsonl").events.collect()["event_id"].to_list())
    assert len(first) == len(second) == COUNT
    silver = _rows(lake, Table.SILVER_EVENTS)
    assert Counter(r["event_id"] for r in silver) == Counter(first | second)
    new_columns = {r["event_id"]: (r["site_zone"], r["signal_dbm"]) for r in silver}
    assert {new_columns[i] for i in first} == {(None, None)}
    assert {new_columns[i] for i in second} == {(ZONE, SIGNAL)}

    minutes = _rows(lake, Table.GOLD_DEVICE_1M)
    assert sum(r["events"] for r in minutes) == 2 * COUNT
    for row in minutes:
        new = row["window_start"] >= RUN2_START
        signal = (row["signal_dbm_min"], row["signal_dbm_avg"], row["signal_dbm_max"])
        assert signal == ((SIGNAL,) * 3 if new else (None,) * 3), row
        assert row["signal_dbm_count"] == (row["events"] if new else None), row

    for r in silver:
        r["event_time"] = r["event_time"].replace(tzinfo=UTC)
    _assert_windows_equal(lake, _sliding(silver, [*METRIC_NAMES, "signal_dbm"]))

    # On request: the rebuild command recomputes a query from all of silver and exits;
    # here after a change of slide, which leaves no window of the old one behind.
    before = _rows(lake, Table.GOLD_FLEET_SUMMARY)
    with stack:
        code = run_python(
            ["-m", "processor", "rebuild", "device_status", "--sliding-slide", "2 minutes",
             "--fleet-size", str(FLEET),
             "--seed", str(SEED), "--shuffle-partitions", "2", "--lake-root", str(lake),
             "--jars-dir", str(ensure_jar_dir("spark", quiet=True)), "--driver-memory", "1g"],
            v2_env, log, 900,
        )  # fmt: skip
    assert code == 0, log.read_text()[-5000:]
    assert "rebuilt device_status" in log.read_text()
    by_type: dict[str, list[dict]] = defaultdict(list)
    for r in silver:
        by_type[r["device_type"]].append(r)
    summary = {
        t: (len({r["device_id"] for r in rows}), len(rows), max(r["event_time"] for r in rows))
        for t, rows in by_type.items()
    }
    after = _rows(lake, Table.GOLD_FLEET_SUMMARY)
    assert len(after) == len(summary) == len(before)
    got = {
        r["device_type"]: (r["devices"], r["events"], r["last_event_time"].replace(tzinfo=UTC))
        for r in after
    }
    assert got == summary
    _assert_windows_equal(
        lake, _sliding(silver, [*METRIC_NAMES, "signal_dbm"], timedelta(minutes=2))
    )

    pages = textwrap.dedent("""
        from streamlit.testing.v1 import AppTest
        for page in ("views/overview.py", "views/device.py", "views/alerts.py",
                     "views/pipeline.py", "views/loadtest.py"):
            at = AppTest.from_file("dashboard/app.py", default_timeout=60)
            if page != "views/overview.py":
                at.switch_page(page)
            at.run()
            assert not at.exception, (page, [e.value for e in at.exception])
        print("rendered")
    """)
    shown = subprocess.run(
        [sys.executable, "-c", pages], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=v2 | {"IOT_LAKE_ROOT": str(lake), "IOT_DASHBOARD_AS_OF": "2026-01-01T00:30:00+00:00"},
        check=False,
    )  # fmt: skip
    assert shown.stdout.strip() == "rendered", shown.stderr[-3000:]
