"""python -m notifier against the real broker: once per alert and destination across a
SIGKILL, dead letters on the dead-letter topic, and a broker it cannot reach in one line.

The destinations are a local HTTP server (tests/webhook_server.py) whose URLs carry
secret-looking path parts; no output of the notifier may hold any of them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

import orjson
import pytest

from infra import broker
from notifier.destinations import url_fragments
from notifier.settings import DEAD_LETTER_SUFFIX, NotifierSettings
from tests.webhook_server import WebhookServer

pytestmark = [pytest.mark.integration, pytest.mark.subprocess, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
DEVICES = 8


def alert(n: int) -> dict:
    device = f"dev-{n % DEVICES:05d}"
    return {
        "alert_id": f"ev{n}:temperature_c", "event_id": f"ev{n}", "device_id": device,
        "device_type": "env_sensor", "site": "Austin", "metric": "temperature_c",
        "kind": "threshold_high", "value": 80.0 + n, "threshold": 80.0,
        "event_time": "2026-03-01T17:00:30.123Z", "schema_version": 2,
    }  # fmt: skip


def publish(bootstrap: str, topic: str, records: list[dict]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for r in records:
        producer.produce(topic, key=r["device_id"].encode(), value=orjson.dumps(r))
    assert producer.flush(30) == 0


def env_for(tmp_path: Path, bootstrap: str, topic: str, destinations: list[dict], **extra: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")}
    return (
        env
        | {
            "IOT_PULSE_HOME": str(tmp_path / "home"),
            "IOT_LOG_DIR": str(tmp_path / "logs"),
            "IOT_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "IOT_KAFKA_ALERTS_TOPIC": topic,
            "IOT_NOTIFIER_DESTINATIONS": json.dumps(destinations),
            "IOT_NOTIFIER_START_AT": "earliest",
            "IOT_NOTIFIER_GROUP_ID": f"notifier-{uuid.uuid4().hex[:8]}",
            "PYTHONUNBUFFERED": "1",
        }
        | extra
    )


def start(env: dict[str, str], out: Path) -> subprocess.Popen[bytes]:
    with out.open("ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "notifier"], cwd=ROOT, env=env, stdout=fh,
            stderr=subprocess.STDOUT,
        )  # fmt: skip


def wait_until(check, timeout_s: float, what: str, detail=lambda: "") -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} {detail()}")
        time.sleep(0.05)


def everything_said(tmp_path: Path) -> str:
    files = [*tmp_path.glob("out-*.txt"), *(tmp_path / "logs").glob("*.log*")]
    return "\n".join(p.read_text(errors="replace") for p in files)


def secret_parts(destinations: list[dict]) -> list[str]:
    found = NotifierSettings(_env_file=None, destinations=json.dumps(destinations))
    return [f for f in url_fragments(found.destination_list()) if f != "127.0.0.1"]


def test_each_alert_reaches_each_destination_once_across_a_sigkill(kafka_broker, tmp_path):
    bootstrap = kafka_broker.plaintext
    topic = f"alerts-{uuid.uuid4().hex[:8]}"
    broker.ensure_topic(bootstrap, topic, partitions=2)
    broker.ensure_topic(bootstrap, topic + DEAD_LETTER_SUFFIX, partitions=1)
    records = [alert(n) for n in range(80)]
    publish(bootstrap, topic, records)
    server = WebhookServer(delay_s=0.02)
    paths = {"hook": "/h/Hk9secretTokenA", "slack": "/services/T0SLACK1/B0SLACK2/xSlackSecret3",
             "teams": "/webhookb2/TeamsSecret4"}  # fmt: skip
    destinations = [
        {"name": "hook", "format": "webhook", "url": server.url(paths["hook"])},
        {"name": "slack", "format": "slack", "url": server.url(paths["slack"])},
        {"name": "teams", "format": "teams", "url": server.url(paths["teams"]),
         "rate_limit_s": 1},
    ]  # fmt: skip
    env = env_for(tmp_path, bootstrap, topic, destinations, IOT_NOTIFIER_RATE_LIMIT_S="0")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        first = start(env, tmp_path / "out-1.txt")
        procs.append(first)
        wait_until(lambda: len(server.requests) >= 60, 90, "60 requests before the kill")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        at_kill = len(server.requests)
        second = start(env, tmp_path / "out-2.txt")
        procs.append(second)
        restarted = time.monotonic()
        ids = {r["alert_id"] for r in records}

        def complete() -> bool:
            return all(
                {i for req in server.to(path) for i in _ids_in(name, req.body, records)} == ids
                for name, path in paths.items()
            )

        def missing() -> str:
            said = {
                name: sorted(
                    ids - {i for r in server.to(path) for i in _ids_in(name, r.body, records)}
                )
                for name, path in paths.items()
            }
            return f"(missing: {said}; said: {everything_said(tmp_path)[-3000:]})"

        wait_until(complete, 120, "every alert at every destination", missing)
        caught_up_s = time.monotonic() - restarted
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        server.close()
    # Static membership: the restart takes the partitions back at once, not after the
    # killed member's session timeout (45 s).
    assert caught_up_s < 30
    assert 60 <= at_kill < 3 * len(records)  # killed mid-run
    repeats = 0
    for name, path in paths.items():
        by_key: dict[str, list[bytes]] = defaultdict(list)
        for req in server.to(path):
            by_key[req.key].append(req.body)
        # A repeat is the very same message: same Idempotency-Key, same body.
        assert all(len(set(bodies)) == 1 for bodies in by_key.values()), name
        repeats += sum(len(bodies) - 1 for bodies in by_key.values())
        owners: dict[str, str] = {}
        for key, bodies in by_key.items():
            for alert_id in _ids_in(name, bodies[0], records):
                assert alert_id not in owners, f"{name}: {alert_id} in {owners[alert_id]} and {key}"
                owners[alert_id] = key
        assert set(owners) == {r["alert_id"] for r in records}, name
    # Only a message in flight at the kill may go out twice (one at a time is in flight).
    assert repeats <= 1
    assert _committed(bootstrap, env["IOT_NOTIFIER_GROUP_ID"], topic) == _ends(bootstrap, topic)
    said = everything_said(tmp_path)
    assert "notifier: stopped" in said
    assert [f for f in secret_parts(destinations) if f in said] == []


def _ids_in(name: str, body: bytes, records: list[dict]) -> list[str]:
    doc = json.loads(body)
    if name == "hook":
        return [a["alert_id"] for a in doc.get("alerts", [doc])]
    text = body.decode()
    return [r["alert_id"] for r in records if f"Temperature {r['value']:,.2f} °C" in text
            and r["device_id"] in text]  # fmt: skip


def _committed(
    bootstrap: str, group: str, topic: str, partitions: tuple[int, ...] = (0, 1)
) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4().hex}"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)}
    finally:
        c.close()


def test_a_destination_that_keeps_failing_gets_dead_letters_on_the_topic(kafka_broker, tmp_path):
    from confluent_kafka import Consumer

    bootstrap = kafka_broker.plaintext
    topic = f"alerts-{uuid.uuid4().hex[:8]}"
    broker.ensure_topic(bootstrap, topic, partitions=1)
    broker.ensure_topic(bootstrap, topic + DEAD_LETTER_SUFFIX, partitions=1)
    records = [alert(n) for n in range(3)]
    publish(bootstrap, topic, records)
    server = WebhookServer()
    path = "/dlq/DeadSecret5/zz9"
    server.answer(path, *[503] * 6)
    destinations = [{"name": "down", "format": "webhook", "url": server.url(path)}]
    env = env_for(tmp_path, bootstrap, topic, destinations, IOT_NOTIFIER_MAX_ATTEMPTS="2",
                  IOT_NOTIFIER_BACKOFF_S="0.05", IOT_NOTIFIER_RATE_LIMIT_S="0")  # fmt: skip
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([topic + DEAD_LETTER_SUFFIX])
    letters: list[dict] = []
    proc = None
    try:
        proc = start(env, tmp_path / "out-1.txt")
        deadline = time.monotonic() + 60
        while len(letters) < 3 and time.monotonic() < deadline:
            for m in consumer.consume(10, 0.5):
                if m.error() is None:
                    letters.append(json.loads(m.value()))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        consumer.close()
        server.close()
    for letter in letters:
        letter.pop("failed_at")
    assert letters == [
        {"destination": "down", "error": "HTTP 503 Service Unavailable", "attempts": 2,
         "alert": r}
        for r in records
    ]  # fmt: skip
    assert len(server.requests) == 6
    said = everything_said(tmp_path)
    assert [f for f in secret_parts(destinations) if f in said] == []


def test_sigterm_while_a_destination_times_out_stops_in_seconds_and_loses_nothing(
    kafka_broker, tmp_path
):
    bootstrap = kafka_broker.plaintext
    topic = f"alerts-{uuid.uuid4().hex[:8]}"
    broker.ensure_topic(bootstrap, topic, partitions=1)
    broker.ensure_topic(bootstrap, topic + DEAD_LETTER_SUFFIX, partitions=1)
    records = [alert(n) for n in range(3)]
    publish(bootstrap, topic, records)
    silent = socket.socket()  # accepts, never answers: every POST times out
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    path = "/slow/SlowSecret7"
    down = [{"name": "hook", "format": "webhook",
             "url": f"http://127.0.0.1:{silent.getsockname()[1]}{path}"}]  # fmt: skip
    env = env_for(tmp_path, bootstrap, topic, down, IOT_NOTIFIER_RATE_LIMIT_S="0",
                  IOT_NOTIFIER_REQUEST_TIMEOUT_S="1", IOT_NOTIFIER_BACKOFF_S="30",
                  IOT_NOTIFIER_BACKOFF_MAX_S="30")  # fmt: skip
    server = WebhookServer()
    proc = None
    try:
        proc = start(env, tmp_path / "out-1.txt")
        silent.settimeout(90)
        conn, _ = silent.accept()  # the first attempt is under way
        time.sleep(1.5)  # it timed out: the notifier waits 30 s to retry
        conn.close()
        stopped_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        took_s = time.monotonic() - stopped_at
        assert _committed(bootstrap, env["IOT_NOTIFIER_GROUP_ID"], topic, (0,)) == {0: 0}
        # Restarted with a destination that answers: nothing was lost.
        up = [{"name": "hook", "format": "webhook", "url": server.url(path)}]
        proc = start(env | {"IOT_NOTIFIER_DESTINATIONS": json.dumps(up)}, tmp_path / "out-2.txt")
        wait_until(lambda: len(server.requests) >= 3, 90, "3 requests after the restart")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        silent.close()
        server.close()
    assert took_s < 3  # not the 30 s wait, nor the 4 more attempts
    assert [r.key for r in server.requests] == [r["alert_id"] for r in records]
    assert _committed(bootstrap, env["IOT_NOTIFIER_GROUP_ID"], topic, (0,)) == {0: 3}
    said = everything_said(tmp_path)
    assert "notifier: stopped (0 delivered, 0 failed)" in said
    assert "notifier: stopped (3 delivered, 0 failed)" in said
    assert "SlowSecret7" not in said


@pytest.mark.parametrize("broker_kind", ["refusing", "silent"])
def test_a_broker_it_cannot_reach_is_one_line_within_30_s(tmp_path, broker_kind):
    destinations = [{"name": "hook", "format": "webhook", "url": "https://h.example/Unreach6"}]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        if broker_kind == "silent":
            s.listen()  # accepts and never answers
        port = s.getsockname()[1]
        if broker_kind == "refusing":
            s.close()
        env = env_for(tmp_path, f"127.0.0.1:{port}", "iot-alerts", destinations)
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "notifier"], cwd=ROOT, env=env, capture_output=True,
            text=True, timeout=60,
        )  # fmt: skip
        elapsed = time.monotonic() - started
    assert proc.returncode == 1
    assert elapsed < 30
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: could not reach the Kafka broker at 127.0.0.1:{port}")
    assert "check IOT_KAFKA_BOOTSTRAP_SERVERS" in lines[0]
    assert "Unreach6" not in proc.stdout + proc.stderr
