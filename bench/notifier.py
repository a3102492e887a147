"""The notifier's end-to-end latency: an alert's Kafka timestamp -> the webhook receiving it.

Self-contained: starts a throwaway broker (``infra.broker``) in a temp dir, creates the
alerts topic (2 partitions, as the demo's) and its dead-letter topic, serves a local
webhook (``tests/webhook_server.py``) and runs ``python -m notifier`` against them with
one webhook destination and the default per-device rate limit (60 s). Two phases:

- **steady**: ``--rate`` alerts per second (the demo's few) for ``--seconds``, each from
  a different device, so none is held by the rate limit;
- **burst**: ``--burst`` alerts at once, from as many devices.

An alert's latency is the webhook's receipt time less the record's Kafka timestamp
(its producer's send time), both on this machine's clock. The target is p99 <= 2 s in
each phase. The last line printed is one JSON object::

    {"steady": {"alerts": ..., "p50_s": ..., "p99_s": ..., "max_s": ...},
     "burst": {...}, "target_p99_s": 2.0, "meets_target": ...}

Usage: ``python bench/notifier.py [--rate 3] [--seconds 30] [--burst 200]``.
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
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.kafka_settings import KafkaSettings  # noqa: E402
from common.paths import HOME_ENV  # noqa: E402
from common.stats import percentiles  # noqa: E402
from infra import broker  # noqa: E402
from notifier.settings import DEAD_LETTER_SUFFIX, NotifierSettings  # noqa: E402
from tests.webhook_server import WebhookServer  # noqa: E402

TARGET_P99_S = 2.0


def alert(n: int, phase: str) -> dict:
    return {
        "alert_id": f"{phase}{n}:temperature_c", "event_id": f"{phase}{n}",
        "device_id": f"{phase}-dev-{n:05d}", "device_type": "env_sensor", "site": "Austin",
        "metric": "temperature_c", "kind": "threshold_high", "value": 85.0, "threshold": 80.0,
        "event_time": "2026-03-01T17:00:30.123Z", "schema_version": 2,
    }  # fmt: skip


def summary(latencies: list[float]) -> dict:
    return {
        "alerts": len(latencies),
        **{f"{k}_s": round(v, 4) for k, v in percentiles(latencies, (50, 99)).items()},
        "max_s": round(max(latencies), 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=3.0, help="steady alerts per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the steady phase")
    parser.add_argument("--burst", type=int, default=200, help="alerts sent at once")
    args = parser.parse_args()

    from confluent_kafka import Producer

    work = Path(tempfile.mkdtemp(prefix="bench-notifier-"))
    info = broker.start(work / "broker", quiet=True)
    server = WebhookServer()
    proc = None
    try:
        topic = "iot-alerts"
        broker.ensure_topic(info.plaintext, topic, partitions=2)
        broker.ensure_topic(info.plaintext, topic + DEAD_LETTER_SUFFIX, partitions=1)
        env = (
            {k: v for k, v in os.environ.items() if not k.startswith("IOT_")}
            | {HOME_ENV: str(work / "home")}
            | KafkaSettings.env_vars(bootstrap_servers=info.plaintext, alerts_topic=topic)
            | NotifierSettings.env_vars(
                destinations=json.dumps(
                    [{"name": "bench", "format": "webhook", "url": server.url("/bench")}]
                ),
                start_at="earliest",
            )
        )
        proc = subprocess.Popen([sys.executable, "-m", "notifier"], cwd=ROOT, env=env)
        producer = Producer(
            {"bootstrap.servers": info.plaintext, "acks": "all", "linger.ms": 0, "log_level": 0}
        )
        sent_ms: dict[str, int] = {}

        def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is None:
                sent_ms[orjson.loads(msg.value())["alert_id"]] = msg.timestamp()[1]

        def send(record: dict) -> None:
            producer.produce(topic, key=record["device_id"].encode(),
                             value=orjson.dumps(record), on_delivery=on_delivery)  # fmt: skip
            producer.poll(0)

        def wait_for(ids: set[str], timeout_s: float) -> None:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                got = {json.loads(r.body)["alert_id"] for r in server.to("/bench")}
                if ids <= got:
                    return
                time.sleep(0.1)
            raise SystemExit(f"the webhook did not get {len(ids - got)} alert(s) in time")

        # Warm-up: the notifier is up and has its partitions once this one arrives.
        send(alert(0, "warm"))
        producer.flush(30)
        wait_for({"warm0:temperature_c"}, 120)

        steady = [alert(n, "steady") for n in range(int(args.rate * args.seconds))]
        start = time.monotonic()
        for i, record in enumerate(steady):
            time.sleep(max(0.0, start + i / args.rate - time.monotonic()))
            send(record)
        producer.flush(30)
        wait_for({r["alert_id"] for r in steady}, 60)
        burst = [alert(n, "burst") for n in range(args.burst)]
        for record in burst:
            send(record)
        producer.flush(30)
        wait_for({r["alert_id"] for r in burst}, 120)

        received = {json.loads(r.body)["alert_id"]: r.received for r in server.to("/bench")}

        def latencies(records: list[dict]) -> list[float]:
            return [received[r["alert_id"]] - sent_ms[r["alert_id"]] / 1000 for r in records]

        result = {"steady": summary(latencies(steady)), "burst": summary(latencies(burst)),
                  "target_p99_s": TARGET_P99_S}  # fmt: skip
        result["meets_target"] = all(
            result[p]["p99_s"] <= TARGET_P99_S for p in ("steady", "burst")
        )
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        server.close()
        broker.stop(work / "broker")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
