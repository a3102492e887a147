"""``docker compose up`` as a user runs it, checked as a user would check it.

The repository's ``docker-compose.yml`` and Dockerfiles, unchanged, built and started on
this machine's engine (stand-ins for the two public images, ``engine.py``). The tests
run in order on one stack:

1. every service healthy (or, for ``kafka-init``, exited 0) within ``HEALTHY_TIMEOUT_S``;
2. gold holds every device of the fleet, read from the lake volume;
3. the dashboard answers on its published port, and every page renders with data in
   headless Chromium (screenshots under ``artifacts/compose``);
4. the real-time alerts reach the alerts topic, each one a breach of the reading it
   names, as silver holds that reading;
5. a ``docker compose run`` of the producer with a manifest, while the processor is
   restarted (``docker compose restart``), then SIGKILLed (``docker kill``) and started
   again: ``loadtest verify`` finds nothing lost and nothing doubled;
6. the ``shards`` profile: four producer containers send the fleet as four shards from
   one start time, and ``loadtest verify`` over their four manifests and reports finds
   nothing lost or doubled;
7. ``docker compose down`` and ``up`` keep the lake; ``down -v`` removes it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from common.alerts import THRESHOLD_HIGH, THRESHOLD_LOW, decode_alert
from common.delta_table import open_delta_table
from common.fleet import device_id
from common.lake import Table
from common.paths import PROJECT_ROOT
from tests.compose.conftest import ARTIFACTS, new_stack
from tests.compose.stack import Stack, wait_for

pytestmark = pytest.mark.timeout(3600)

FLEET_SIZE = 50  # the compose file's DEMO_FLEET_SIZE default
TOPIC, ALERTS_TOPIC = "iot-events", "iot-alerts"  # its DEMO_TOPIC, DEMO_ALERTS_TOPIC defaults
SERVICES = {
    "kafka": "healthy",
    "kafka-init": "exited 0",
    "processor": "healthy",
    "dashboard": "healthy",
    "producer": "running",
}
# Three minutes of events: the restart and the kill both land while the producer sends.
VERIFY_COUNT, VERIFY_RATE = 36_000, 200
# The shards profile: 20 s at 400 events/s in all, from a start 45 s after `up`.
SHARDS_RATE, SHARDS_DURATION_S, SHARDS_START_S = 400, 20, 45


@pytest.fixture(scope="module")
def stack(docker_engine) -> Iterator[Stack]:
    """The demo stack, built and started with ``docker compose up -d --build``."""
    stack = new_stack("iotpulse-compose-test")
    stack.compose("down", "-v", "--remove-orphans")  # what an interrupted run left
    started = time.monotonic()
    stack.compose("build")
    print(f"\n[compose-test] docker compose build: {time.monotonic() - started:.0f} s")
    stack.compose("up", "-d")
    try:
        yield stack
    finally:
        stack.compose("logs", "--no-color", check=False)  # into the log, for a failure
        stack.compose("down", "-v", "--remove-orphans", check=False)


def table_rows(stack: Stack, table: Table, columns: list[str]) -> list[dict]:
    """The rows of a lake table, read from the lake volume with delta-rs ([] if absent)."""
    path = stack.volume("lake") / str(table)
    if not (path / "_delta_log").is_dir():
        return []
    return open_delta_table(str(path)).to_pyarrow_dataset().to_table(columns=columns).to_pylist()


def test_every_service_becomes_healthy(stack):
    took = stack.wait_healthy(SERVICES)
    print(f"\n[compose-test] every service healthy {took:.0f} s after docker compose up")
    states = stack.states()
    assert {name: states[name]["state"] for name in SERVICES} == {
        "kafka": "running", "kafka-init": "exited", "processor": "running",
        "dashboard": "running", "producer": "running",
    }  # fmt: skip


def test_gold_holds_the_whole_fleet(stack):
    fleet = {device_id(i) for i in range(FLEET_SIZE)}

    def devices(table: Table) -> set[str]:
        return {row["device_id"] for row in table_rows(stack, table, ["device_id"])}

    wait_for(lambda: devices(Table.GOLD_DEVICE_1M) == fleet, 300, "every device in gold")
    wait_for(lambda: devices(Table.GOLD_DEVICE_STATUS) == fleet, 300, "every device's status")
    # The realistic scenario sends malformed records on purpose: each is quarantined.
    reasons = wait_for(
        lambda: {r["reason"] for r in table_rows(stack, Table.SILVER_QUARANTINE, ["reason"])},
        300, "quarantined records",
    )  # fmt: skip
    assert reasons and all(isinstance(r, str) and r for r in reasons)


def test_the_dashboard_renders_every_page_with_data(stack):
    from tests.browser.test_dashboard_browser import (
        CHROMIUM,
        CHROMIUM_ARGS,
        PAGES,
        _assert_no_error,
        _metric,
        _settled,
    )

    url = f"http://localhost:{stack.env['DASHBOARD_PORT']}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
    health = stack.compose("exec", "-T", "dashboard", "python", "-m", "dashboard.health")
    assert health.strip().splitlines()[-1] == "healthy: every page renders"
    assert CHROMIUM.exists()  # engine.ensure_packages installs it
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 2200})
        page.set_default_timeout(60_000)
        page.goto(url)
        for title, marker in PAGES:
            page.locator('[data-testid="stSidebarNavLink"]', has_text=title).first.click()
            _settled(page, marker)
            _assert_no_error(page, title)
            shot = ARTIFACTS / f"dashboard-{title.lower().replace(' ', '-')}.png"
            page.screenshot(path=shot, full_page=True)
            if title == "Overview":
                assert _metric(page, "Active devices") == str(FLEET_SIZE)
        browser.close()


def _alerts_on_topic(bootstrap: str) -> list:
    """Every record of the alerts topic so far, decoded."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"compose-test-{time.time_ns()}",
         "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )  # fmt: skip
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(ALERTS_TOPIC, 0), timeout=30)
        consumer.assign([TopicPartition(ALERTS_TOPIC, 0, 0)])
        records = []
        while len(records) < high:
            msg = consumer.poll(10)
            assert msg is not None, f"read {len(records)} of {high} alert records"
            assert msg.error() is None, msg.error()
            records.append(decode_alert(msg.value(), msg.timestamp()[1]))
        return records
    finally:
        consumer.close()


def test_realtime_alerts_reach_the_alerts_topic(stack):
    bootstrap = f"localhost:{stack.env['KAFKA_HOST_PORT']}"
    alerts = wait_for(lambda: _alerts_on_topic(bootstrap), 300, "an alert on the topic")
    for alert in alerts:
        assert alert.kind in (THRESHOLD_HIGH, THRESHOLD_LOW), alert
        breached = (
            alert.value > alert.threshold
            if alert.kind == THRESHOLD_HIGH
            else (alert.value < alert.threshold)
        )
        assert breached, alert
    # Each alert is the breach of a reading that silver holds, with the same value.
    wanted = {a.alert_id.rsplit(":", 1)[0]: a for a in alerts}
    metrics = sorted({a.metric for a in alerts})

    def silver_values() -> dict[str, dict] | None:
        rows = table_rows(stack, Table.SILVER_EVENTS, ["event_id", *metrics])
        found = {r["event_id"]: r for r in rows if r["event_id"] in wanted}
        return found if len(found) == len(wanted) else None

    found = wait_for(silver_values, 300, "the alerts' readings in silver")
    assert {eid: found[eid][a.metric] for eid, a in wanted.items()} == {
        eid: a.value for eid, a in wanted.items()
    }


def test_a_restarted_and_a_killed_processor_lose_and_double_nothing(stack, tmp_path):
    stack.compose("stop", "producer")
    manifest = "/data/producer/verify-manifest.jsonl"
    stack.compose(
        "run", "-d", "--name", f"{stack.project}-verify-producer", "producer",
        "--count", str(VERIFY_COUNT), "--rate", str(VERIFY_RATE), "--manifest-path", manifest,
        "--report-path", "/data/producer/verify-report.json",
    )  # fmt: skip
    runner = f"{stack.project}-verify-producer"
    time.sleep(20)
    stack.compose("restart", "processor")
    stack.wait_healthy({"processor": "healthy"})
    time.sleep(10)
    processor = stack.container("processor")
    subprocess.run(["docker", "kill", "--signal", "KILL", processor], check=True)
    wait_for(
        lambda: _inspect(processor, "{{.State.Status}} {{.State.ExitCode}}") == "exited 137",
        30, "the killed processor to be down", 1,
    )  # fmt: skip
    stack.compose("start", "processor")  # a killed container stays down until started
    stack.wait_healthy({"processor": "healthy"})
    wait_for(lambda: _inspect(runner, "{{.State.Status}}") == "exited", 600, "the producer's end")
    assert _inspect(runner, "{{.State.ExitCode}}") == "0"
    subprocess.run(["docker", "rm", runner], check=True, capture_output=True)
    # The stream goes on: the demo's producer again, so that silver reads past the run's
    # last readings (late ones, held back on purpose, may end a partition).
    stack.compose("start", "producer")
    manifest_file = stack.volume("producer-run") / Path(manifest).name
    totals = json.loads(manifest_file.read_text().splitlines()[0])["totals"]
    assert totals["messages_failed"] == 0
    out = tmp_path / "verify"

    def verified() -> dict | None:
        code = subprocess.run(
            [sys.executable, "-m", "loadtest", "verify", "--manifest", str(manifest_file),
             "--lake-root", str(stack.volume("lake")), "--watermark", "30 seconds",
             "--out", str(out)],
            cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600, check=False,
        ).returncode  # fmt: skip
        result = json.loads((out / "verify.json").read_text())
        return result if code == 0 and not result["loss"]["pending"] else None

    result = wait_for(verified, 600, "verify to pass (every reading through silver)", 15)
    assert result["loss"]["total"] == 0, result["failures"]
    assert result["duplicates"]["silver_duplicated_ids"] == 0
    assert result["duplicates"]["bronze_unexpected_copies"] == 0  # the idempotent producer
    assert result["warnings"] == []
    assert result["counts"]["acked"] == totals["events_acked"]
    print(f"\n[compose-test] verify after a restart and a SIGKILL: {result['counts']}")


SHARD_NAMES = [f"producer-shard-{k}" for k in range(4)]


@pytest.fixture
def shard_start(stack):
    """The shards' start time (whole seconds, as the setting gives it); removes them after."""
    start_at = (datetime.now(UTC) + timedelta(seconds=SHARDS_START_S)).replace(microsecond=0)
    yield start_at
    stack.compose("--profile", "shards", "rm", "-sf", *SHARD_NAMES)
    subprocess.run(["docker", "volume", "rm", f"{stack.project}_shards"], check=False)


def test_four_shard_containers_send_one_fleet_that_verifies_as_one(stack, shard_start, tmp_path):
    stack.compose("stop", "producer")
    start_at, names = shard_start, SHARD_NAMES
    shards = replace(
        stack,
        env=stack.env
        | {
            "IOT_PRODUCER_START_AT": start_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "SHARDS_RATE": str(SHARDS_RATE),
            "SHARDS_DURATION_S": str(SHARDS_DURATION_S),
        },
    )
    shards.compose("--profile", "shards", "up", "-d", "--no-deps", *names)

    def ended() -> dict | None:
        states = {n: shards.states("shards").get(n, {}) for n in names}
        return states if all(s.get("state") == "exited" for s in states.values()) else None

    states = wait_for(ended, SHARDS_START_S + SHARDS_DURATION_S + 120, "the four shards' end")
    assert {n: s.get("exit_code") for n, s in states.items()} == dict.fromkeys(names, 0)
    stack.compose("start", "producer")  # the stream goes on past the shards' last readings
    volume = stack.volume("shards")
    out = tmp_path / "verify"

    def verified() -> dict | None:
        code = subprocess.run(
            [sys.executable, "-m", "loadtest", "verify", "--manifest", str(volume),
             "--reports", str(volume), "--lake-root", str(stack.volume("lake")),
             "--watermark", "30 seconds", "--out", str(out)],
            cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600, check=False,
        ).returncode  # fmt: skip
        result = json.loads((out / "verify.json").read_text())
        return result if code == 0 and not result["loss"]["pending"] else None

    result = wait_for(verified, 600, "verify of the four shards to pass", 15)
    reports = [json.loads((volume / f"report-{k}.json").read_text()) for k in range(4)]
    assert [r["shard"] for r in reports] == ["0/4", "1/4", "2/4", "3/4"]
    assert result["loss"]["total"] == 0 and result["duplicates"]["silver_duplicated_ids"] == 0
    manifests = [volume / f"manifest-{k}.jsonl" for k in range(4)]
    headers = [json.loads(m.read_text().splitlines()[0]) for m in manifests]
    assert result["counts"]["acked"] == sum(h["totals"]["events_acked"] for h in headers)
    assert result["counts"]["devices"] == FLEET_SIZE
    senders = result["senders"]
    assert senders["total"]["acked"] == sum(r["acked"] for r in reports)
    assert senders["start_spread_s"] < 1.0, senders
    starts = [datetime.fromisoformat(r["started_at"]) for r in reports]
    assert all(start_at <= t < start_at + timedelta(seconds=1) for t in starts), starts
    print(f"\n[compose-test] four shards verified as one run: {result['counts']}")


def _inspect(container: str, template: str) -> str:
    return subprocess.run(
        ["docker", "inspect", container, "--format", template],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def test_down_and_up_keep_the_lake_and_down_v_removes_it(stack):
    before = len(table_rows(stack, Table.SILVER_EVENTS, ["event_id"]))
    first_commit = stack.volume("lake") / str(Table.SILVER_EVENTS) / "_delta_log"
    first_commit = first_commit / "00000000000000000000.json"
    assert before > 0 and first_commit.is_file()
    stack.compose("down")
    assert {"lake", "producer-run", "kafka-data"} <= stack.volumes()
    stack.compose("up", "-d")
    stack.wait_healthy(SERVICES)
    assert first_commit.is_file()
    wait_for(
        lambda: len(table_rows(stack, Table.SILVER_EVENTS, ["event_id"])) > before,
        300, "silver to grow after up",
    )  # fmt: skip
    stack.compose("down", "-v")
    assert stack.volumes() == set()
