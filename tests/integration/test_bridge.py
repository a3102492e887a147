"""The MQTT ingress on real brokers: producer --transport mqtt -> Mosquitto -> bridge -> Kafka.

Every event the producer's manifest says the MQTT broker acknowledged is in the Kafka
topic, keyed by its device id, whatever is killed or restarted on the way; copies
(at least once) are allowed after a crash or restart, and counted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer

from bridge.service import READY_LINE
from infra import daemons
from infra import mqtt_broker as mqtt_infra
from infra.broker import BrokerInfo, ensure_topic
from infra.mqtt_broker import MqttBrokerInfo
from tests import mqtt_fixture
from tests.integration.test_producer_kafka import assert_manifest_matches_topic
from tests.manifests import read_manifest

pytestmark = [pytest.mark.integration, pytest.mark.subprocess, mqtt_fixture.needs_mosquitto]
mqtt_broker = mqtt_fixture.mqtt_broker

ROOT = Path(__file__).resolve().parents[2]
START = "2026-01-01T00:00:00Z"


def _env(tmp_path: Path, mqtt: MqttBrokerInfo | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")}
    env |= {"PYTHONPATH": str(ROOT), "IOT_LOG_DIR": str(tmp_path / "logs")}
    if mqtt is not None:
        env |= mqtt.env
    return env | extra


def _start_bridge(tmp_path: Path, env: dict[str, str], name: str) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / f"{name}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"),
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while READY_LINE.encode() not in log.read_bytes():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    return proc, log


def _stop_bridge(proc: subprocess.Popen, log: Path) -> dict:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(40) == 0, log.read_text()
    last = log.read_text().strip().splitlines()[-1]
    assert last.startswith("[bridge] stopped: "), last
    return orjson.loads(last.removeprefix("[bridge] stopped: "))


def _producer(tmp_path: Path, env: dict[str, str], count: int, rate: int, scenario: str):
    manifest = tmp_path / "manifest.jsonl"
    cmd = [
        sys.executable, "-m", "producer", "--transport", "mqtt", "--count", str(count),
        "--rate", str(rate), "--scenario", scenario, "--start-time", START,
        "--manifest-path", str(manifest), "--fleet-size", "50",
    ]  # fmt: skip
    err = tmp_path / "producer.log"
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err.open("wb")
    )
    return proc, manifest, err


def _acked_ids(manifest: Path) -> set[str]:
    truth = read_manifest(manifest)
    return {eid for dev in truth["devices"].values() for eid in dev["event_ids"]}


def _consume(bootstrap: str, topic: str, wanted: set[str]) -> list[tuple[bytes, bytes]]:
    """Every record of the topic: read until each wanted id is there, then 2 s of quiet."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex[:8]}",
         "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )  # fmt: skip
    consumer.subscribe([topic])
    held: list[tuple[bytes, bytes]] = []
    seen: set[str] = set()
    deadline = time.monotonic() + 45
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(5000, 0.5)
            for msg in batch:
                assert msg.error() is None, msg.error()
                held.append((msg.key(), msg.value()))
                with contextlib.suppress(orjson.JSONDecodeError, KeyError, TypeError):
                    seen.add(orjson.loads(msg.value())["event_id"])
            if wanted <= seen:
                quiet_until = quiet_until or time.monotonic() + 2.0
                if time.monotonic() >= quiet_until:
                    break
    finally:
        consumer.close()
    return held


def _ids_and_copies(held: list[tuple[bytes, bytes]]) -> Counter[str]:
    copies: Counter[str] = Counter()
    for key, value in held:
        event = orjson.loads(value)
        assert key.decode() == event["device_id"]
        copies[event["event_id"]] += 1
    return copies


def _topic(kafka_broker: BrokerInfo) -> str:
    topic = f"bridge-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_broker.plaintext, topic, partitions=3)
    return topic


def _bridge_env(tmp_path, mqtt_broker, kafka_broker, topic, **extra):
    return _env(
        tmp_path, mqtt_broker,
        IOT_KAFKA_BOOTSTRAP_SERVERS=kafka_broker.plaintext, IOT_KAFKA_TOPIC=topic,
        IOT_BRIDGE_CLIENT_ID=f"bridge-{uuid.uuid4().hex[:8]}", IOT_BRIDGE_METRICS_EVERY_S="1",
        **extra,
    )  # fmt: skip


def test_chaos_run_through_the_bridge_matches_the_manifest(
    mqtt_broker: MqttBrokerInfo, kafka_broker: BrokerInfo, tmp_path: Path
):
    topic = _topic(kafka_broker)
    bridge, log = _start_bridge(
        tmp_path, _bridge_env(tmp_path, mqtt_broker, kafka_broker, topic), "bridge"
    )
    producer, manifest, err = _producer(tmp_path, _env(tmp_path, mqtt_broker), 4000, 2000, "chaos")
    assert producer.wait(60) == 0, err.read_text()
    wanted = _acked_ids(manifest)
    held = _consume(kafka_broker.plaintext, topic, wanted)
    final = _stop_bridge(bridge, log)
    truth = read_manifest(manifest)
    totals = truth["header"]["totals"]
    # Nothing crashed: exactly what the broker acknowledged, once (the injected resends aside).
    assert_manifest_matches_topic(manifest, held)
    assert final["forwarded"] == len(held) == totals["messages_sent"] - totals["messages_failed"]
    assert final["failed"] == {} and final["in_flight"] == 0 and final["redelivered"] == 0
    assert "secret" not in log.read_text()


def test_bridge_killed_mid_run_and_restarted_loses_nothing(
    mqtt_broker: MqttBrokerInfo, kafka_broker: BrokerInfo, tmp_path: Path
):
    topic = _topic(kafka_broker)
    env = _bridge_env(tmp_path, mqtt_broker, kafka_broker, topic)
    bridge, log = _start_bridge(tmp_path, env, "bridge-1")
    producer, manifest, err = _producer(tmp_path, _env(tmp_path, mqtt_broker), 6000, 1500, "clean")
    time.sleep(1.5)
    bridge.send_signal(signal.SIGKILL)  # mid-run: messages taken, at Kafka, not acknowledged
    bridge.wait(10)
    time.sleep(1.0)  # the producer goes on publishing; the broker queues for the session
    bridge, log = _start_bridge(tmp_path, env, "bridge-2")
    assert "session resumed" in log.read_text()
    assert producer.wait(60) == 0, err.read_text()
    wanted = _acked_ids(manifest)
    held = _consume(kafka_broker.plaintext, topic, wanted)
    _stop_bridge(bridge, log)
    copies = _ids_and_copies(held)
    assert len(wanted) == 6000
    assert set(copies) == wanted  # none lost, nothing else
    duplicates = sum(n - 1 for n in copies.values())
    print(f"duplicates after SIGKILL: {duplicates}")
    assert len(held) == len(wanted) + duplicates


def test_mosquitto_restarted_mid_run_loses_nothing_acknowledged(
    mqtt_broker: MqttBrokerInfo, kafka_broker: BrokerInfo, tmp_path: Path
):
    topic = _topic(kafka_broker)
    env = _bridge_env(tmp_path, mqtt_broker, kafka_broker, topic)
    bridge, log = _start_bridge(tmp_path, env, "bridge")
    producer, manifest, err = _producer(tmp_path, _env(tmp_path, mqtt_broker), 6000, 1500, "clean")
    time.sleep(1.5)
    # A graceful restart: Mosquitto saves its sessions and queued messages, then comes back
    # on the same port; both clients reconnect by themselves.
    assert mqtt_infra.stop(mqtt_broker.state_dir)
    time.sleep(0.5)
    again = mqtt_infra.start(mqtt_broker.state_dir)
    assert again.port == mqtt_broker.port
    # Outside the range clients' connections take their local ports from (none took it).
    outside = daemons.daemon_port_range()
    assert outside is None or again.port in outside
    assert producer.wait(60) == 0, err.read_text()
    truth = read_manifest(manifest)
    # paho sends what was not acknowledged again after reconnecting: every event acknowledged.
    assert truth["header"]["totals"]["messages_failed"] == 0
    wanted = _acked_ids(manifest)
    assert len(wanted) == 6000
    held = _consume(kafka_broker.plaintext, topic, wanted)
    final = _stop_bridge(bridge, log)
    copies = _ids_and_copies(held)
    assert set(copies) == wanted
    duplicates = sum(n - 1 for n in copies.values())
    print(f"duplicates after the broker restart: {duplicates}; bridge: {final}")
    assert len(held) == len(wanted) + duplicates


def _one_error_line(tmp_path: Path, env: dict[str, str]) -> tuple[str, float]:
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "bridge"], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0], elapsed


def test_unreachable_mqtt_broker_is_one_line(kafka_broker: BrokerInfo, tmp_path: Path):
    port = "1"  # nothing listens on port 1
    env = _bridge_env(tmp_path, None, kafka_broker, _topic(kafka_broker), IOT_MQTT_PORT=port)
    line, elapsed = _one_error_line(tmp_path, env)
    assert line == (
        "error: could not reach the MQTT broker at localhost:1 (Connection refused); "
        "check IOT_MQTT_HOST and IOT_MQTT_PORT and that the broker is running"
    )
    assert elapsed < 30


def test_wrong_mqtt_credentials_are_one_line_without_the_password(
    kafka_broker: BrokerInfo, tmp_path: Path
):
    folder = tmp_path / "mosquitto-auth"
    info = mqtt_infra.start(folder, users={"bridge": "right-pass"})
    try:
        env = _bridge_env(
            tmp_path, info, kafka_broker, _topic(kafka_broker),
            IOT_MQTT_USERNAME="bridge", IOT_MQTT_PASSWORD="wrong-pass-xyz",
        )  # fmt: skip
        line, elapsed = _one_error_line(tmp_path, env)
    finally:
        mqtt_infra.stop(folder)
    assert line == (
        f"error: the MQTT broker at 127.0.0.1:{info.port} refused the credentials "
        "(Not authorized): check IOT_MQTT_USERNAME and IOT_MQTT_PASSWORD"
    )
    assert "wrong-pass-xyz" not in line
    assert elapsed < 30


def test_a_subscription_not_granted_at_qos_1_is_one_line_and_never_ready(
    kafka_broker: BrokerInfo, tmp_path: Path
):
    folder = tmp_path / "mosquitto-qos0"
    info = mqtt_infra.start(folder, max_qos=0)  # grants the subscription at QoS 0 only
    try:
        env = _bridge_env(tmp_path, info, kafka_broker, _topic(kafka_broker))
        line, elapsed = _one_error_line(tmp_path, env)
    finally:
        mqtt_infra.stop(folder)
    assert line == (
        f"error: the MQTT broker at 127.0.0.1:{info.port} granted the subscription to "
        "devices/+/telemetry at QoS 0 only: the bridge needs QoS 1 to lose nothing; raise "
        "the broker's maximum QoS"
    )
    assert elapsed < 30
