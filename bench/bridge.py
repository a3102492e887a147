"""The bridge's forwarding rate and latency: MQTT publish -> Kafka append, at a target rate.

Self-contained: starts a throwaway Kafka broker (``infra.broker``) and Mosquitto
(``infra.mqtt_broker``) in a temp dir, creates a topic whose records carry the broker's
append time (``message.timestamp.type=LogAppendTime``), runs ``python -m bridge`` as
its own process, and publishes ``--rate`` messages/s at QoS 1 for ``--seconds`` from
one paho client spread over ``--devices`` device topics. Each payload carries its
publish time (UTC epoch seconds); a consumer reads every record back, and a record's
latency is its append time minus its publish time (same machine, same clock; the
append time has millisecond resolution).

The last line printed is one JSON object::

    {"target_rate": 2000, "published": ..., "forwarded": ..., "lost": 0, "duplicates": 0,
     "forward_rate": ..., "latency_ms": {"p50": ..., "p95": ..., "p99": ...,
     "max": ...}, ...}

Usage: ``python bench/bridge.py [--rate 2000] [--seconds 15] [--devices 100]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.mqtt import connect, make_client, telemetry_topic  # noqa: E402
from common.mqtt_settings import MqttSettings  # noqa: E402
from common.stats import percentiles  # noqa: E402
from infra import broker, mqtt_broker  # noqa: E402


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, 3, 1, config={"message.timestamp.type": "LogAppendTime"})
    admin.create_topics([topic])[name].result(30)


def publish(port: int, rate: float, seconds: float, devices: int) -> tuple[int, float]:
    """Publish at ``rate``/s for ``seconds``; return (messages, seconds it took with the acks)."""
    settings = MqttSettings(host="127.0.0.1", port=port)
    client = make_client(settings, f"bench-{uuid.uuid4().hex[:8]}")
    client.max_inflight_messages_set(1000)
    client.max_queued_messages_set(0)
    acked = [0]
    client.on_publish = lambda *_a: acked.__setitem__(0, acked[0] + 1)
    connect(client, settings, clean_start=True)
    total = int(rate * seconds)
    t0 = time.monotonic()
    for i in range(total):
        due = t0 + i / rate
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        device = f"dev-{i % devices:05d}"
        payload = json.dumps({"i": i, "device_id": device, "t": time.time()})
        client.publish(telemetry_topic("devices", device), payload, qos=1)
    while acked[0] < total and time.monotonic() - t0 < seconds + 30:
        time.sleep(0.01)
    elapsed = time.monotonic() - t0
    client.disconnect()
    client.loop_stop()
    return total, elapsed


def consume(bootstrap: str, topic: str, total: int) -> tuple[list[float], dict[int, int], float]:
    """(latencies, copies per message, seconds from the first append to the last)."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    latencies: list[float] = []
    copies: dict[int, int] = {}
    appended: list[float] = []
    deadline = time.monotonic() + 60
    while len(copies) < total and time.monotonic() < deadline:
        for msg in consumer.consume(10000, 0.5):
            if msg.error() is not None:
                continue
            event = json.loads(msg.value())
            at = msg.timestamp()[1] / 1000
            appended.append(at)
            copies[event["i"]] = copies.get(event["i"], 0) + 1
            if copies[event["i"]] == 1:
                latencies.append(at - event["t"])
    consumer.close()
    span = max(appended) - min(appended) if appended else 0.0
    return latencies, copies, span


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=2000.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--devices", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-bridge-") as tmp:
        work = Path(tmp)
        kafka = broker.start(work / "kafka", quiet=True)
        mqtt = mqtt_broker.start(work / "mqtt")
        bridge = None
        try:
            topic = f"bench-bridge-{uuid.uuid4().hex[:6]}"
            create_topic(kafka.plaintext, topic)
            env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")}
            env |= mqtt.env | {
                "PYTHONPATH": str(ROOT),
                "IOT_LOG_DIR": str(work / "logs"),
                "IOT_KAFKA_BOOTSTRAP_SERVERS": kafka.plaintext,
                "IOT_KAFKA_TOPIC": topic,
                "IOT_BRIDGE_CLIENT_ID": "bench-bridge",
            }
            log = work / "bridge.log"
            bridge = subprocess.Popen(
                [sys.executable, "-m", "bridge"], cwd=work, env=env,
                stdout=subprocess.DEVNULL, stderr=log.open("wb"),
            )  # fmt: skip
            while b"[bridge] forwarding" not in log.read_bytes():
                if bridge.poll() is not None:
                    raise SystemExit(log.read_text())
                time.sleep(0.05)
            published, publish_s = publish(mqtt.port, args.rate, args.seconds, args.devices)
            latencies, copies, span = consume(kafka.plaintext, topic, published)
            bridge.send_signal(signal.SIGTERM)
            bridge.wait(60)
            final = json.loads(log.read_text().strip().splitlines()[-1].split("stopped: ", 1)[1])
        finally:
            if bridge is not None and bridge.poll() is None:
                bridge.kill()
            mqtt_broker.stop(work / "mqtt")
            broker.stop(work / "kafka")
    pct = percentiles(latencies, (50, 95, 99))
    figures = {
        "target_rate": args.rate,
        "seconds": args.seconds,
        "published": published,
        "publish_rate": round(published / publish_s, 1),
        "forwarded": sum(copies.values()),
        "lost": published - len(copies),
        "duplicates": sum(n - 1 for n in copies.values()),
        "forward_rate": round(sum(copies.values()) / span, 1) if span else 0.0,
        "latency_ms": {k: round(v * 1000, 1) for k, v in pct.items()}
        | {"max": round(max(latencies) * 1000, 1) if latencies else 0.0},
        "bridge": final,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
