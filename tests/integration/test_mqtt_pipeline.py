"""MQTT all the way into the lake: producer -> Mosquitto -> bridge -> Kafka -> processor.

The producer publishes a chaos run over MQTT with a manifest; the bridge, SIGKILLed once
mid-run and started again, forwards it to Kafka; the processor reads the topic into the
lake; ``loadtest verify`` then finds every acknowledged event in silver once. The
bridge's kill may put copies in the topic (at least once): bronze holds them, counted as
verify's extra copies, and silver holds each event once.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest

from infra.broker import BrokerInfo
from infra.jars import ensure_jar_dir
from infra.mqtt_broker import MqttBrokerInfo
from tests import mqtt_fixture
from tests.integration.proc import process_available_now, processor_env, run_python
from tests.integration.test_bridge import (
    _acked_ids,
    _bridge_env,
    _consume,
    _env,
    _producer,
    _start_bridge,
    _stop_bridge,
    _topic,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.subprocess,
    pytest.mark.slow,
    mqtt_fixture.needs_mosquitto,
    pytest.mark.timeout(1200),
]
mqtt_broker = mqtt_fixture.mqtt_broker

COUNT, RATE, FLEET, SEED = 6000, 1500, 50, 42  # the producer helper's fleet, the default seed


def _event_id(record: tuple[bytes, bytes]) -> str | None:
    """The record's ``event_id``, or None for a payload that is no JSON object with one."""
    try:
        return orjson.loads(record[1])["event_id"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None


def test_a_chaos_run_over_mqtt_lands_in_silver_once_across_a_bridge_kill(
    mqtt_broker: MqttBrokerInfo, kafka_broker: BrokerInfo, tmp_path: Path
) -> None:
    topic = _topic(kafka_broker)
    env = _bridge_env(tmp_path, mqtt_broker, kafka_broker, topic)
    bridge, log = _start_bridge(tmp_path, env, "bridge-1")
    producer, manifest, err = _producer(tmp_path, _env(tmp_path, mqtt_broker), COUNT, RATE, "chaos")
    try:
        time.sleep(1.5)
        bridge.send_signal(signal.SIGKILL)  # messages taken from MQTT, not yet acknowledged
        bridge.wait(10)
        bridge, log = _start_bridge(tmp_path, env, "bridge-2")
        assert producer.wait(60) == 0, err.read_text()
        acked = _acked_ids(manifest)
        held = _consume(kafka_broker.plaintext, topic, acked)
        _stop_bridge(bridge, log)
    finally:
        for proc in (bridge, producer):
            if proc.poll() is None:
                proc.kill()
    # Copies of each acknowledged event: the chaos run's planted resends, and what the kill
    # redelivered. A malformed record the kill redelivered is no acknowledged event: verify's
    # copy counts leave it out, and bronze_rows below counts it with the rest.
    on_topic = Counter(eid for eid in map(_event_id, held) if eid in acked)
    redelivered = sum(n - 1 for n in on_topic.values())

    lake = tmp_path / "lake"
    penv = processor_env(kafka_broker.plaintext, topic, lake, ensure_jar_dir("spark", quiet=True))
    process_available_now(penv, lake, tmp_path / "processor.log", FLEET, SEED)

    out = tmp_path / "verify"
    code = run_python(
        ["-m", "loadtest", "verify", "--manifest", str(manifest), "--lake-root", str(lake),
         "--out", str(out)],
        _env(tmp_path, None), tmp_path / "verify.log", 300,
    )  # fmt: skip
    result = json.loads((out / "verify.json").read_text())
    assert code == 0, (tmp_path / "verify.log").read_text()[-3000:]
    assert result["loss"]["total"] == 0
    assert result["duplicates"]["silver_duplicated_ids"] == 0
    dups = result["duplicates"]
    assert dups["bronze_injected_duplicates"] + dups["bronze_unexpected_copies"] == redelivered
    assert result["counts"]["bronze_rows"] == len(held)
    assert result["ok"] and result["failures"] == [], result["failures"]
    copies_warning = [w for w in result["warnings"] if w.startswith("bronze holds")]
    assert result["warnings"] == copies_warning
    assert len(copies_warning) == (dups["bronze_unexpected_copies"] > 0)
