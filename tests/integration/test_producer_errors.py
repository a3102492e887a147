"""Wrong credentials and unreachable brokers: a clear error and a non-zero exit, fast."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.daemons import free_ports

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _run_producer(env_overrides: dict[str, str]) -> tuple[int, str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")} | env_overrides
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "producer", "--count", "5"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return proc.returncode, proc.stderr, time.monotonic() - t0


def test_wrong_password_gets_a_clear_error_within_30s(kafka_broker):
    good = kafka_broker.connection_string()
    wrong = (
        good.rsplit("SharedAccessKey=", 1)[0]
        + "SharedAccessKey=d3JvbmctcGFzc3dvcmQtZm9yLXRlc3RpbmctMTIzNDU2Nzg="
    )
    rc, err, elapsed = _run_producer({
        "IOT_KAFKA_BOOTSTRAP_SERVERS": kafka_broker.sasl_ssl,
        "IOT_KAFKA_AUTH": "connection_string",
        "IOT_KAFKA_CONNECTION_STRING": wrong,
        "IOT_KAFKA_SSL_CA_LOCATION": str(kafka_broker.ca_file),
    })  # fmt: skip
    assert rc == 1
    assert elapsed < 30
    assert "authentication failed" in err
    assert "d3JvbmctcGFzc3dvcmQ" not in err and good.split("SharedAccessKey=")[1] not in err


def test_right_password_reaches_a_missing_topic_and_says_so(kafka_broker):
    rc, err, elapsed = _run_producer({
        "IOT_KAFKA_BOOTSTRAP_SERVERS": kafka_broker.sasl_ssl,
        "IOT_KAFKA_AUTH": "connection_string",
        "IOT_KAFKA_CONNECTION_STRING": kafka_broker.connection_string(),
        "IOT_KAFKA_SSL_CA_LOCATION": str(kafka_broker.ca_file),
        "IOT_KAFKA_TOPIC": "no-such-topic",
    })  # fmt: skip
    assert rc == 1
    assert elapsed < 30
    assert "topic 'no-such-topic' does not exist" in err


def test_unreachable_broker_fails_within_30s():
    port = free_ports("127.0.0.1")[0]  # nothing listens there
    rc, err, elapsed = _run_producer({"IOT_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"})
    assert rc == 1
    assert elapsed < 10  # refused at once: no waiting for the check's deadline
    assert err == (
        f"error: could not reach the Kafka broker at 127.0.0.1:{port} (PLAINTEXT): the "
        f"connection was refused (0 of 1 broker up; Connect to ipv4#127.0.0.1:{port} failed: "
        "Connection refused); check IOT_KAFKA_BOOTSTRAP_SERVERS (when unset: the host and "
        "port of the connection string's Endpoint) and that the broker is running\n"
    )


def test_entra_without_a_usable_credential_fails_fast(kafka_broker):
    env = {
        "IOT_KAFKA_BOOTSTRAP_SERVERS": kafka_broker.sasl_ssl,
        "IOT_KAFKA_AUTH": "entra",
        "IOT_KAFKA_SSL_CA_LOCATION": str(kafka_broker.ca_file),
        "IOT_PRODUCER_ENTRA_CREDENTIAL": "environment",
    }
    rc, err, elapsed = _run_producer(env)
    assert rc == 1
    assert elapsed < 30
    assert "no Entra ID token for https://localhost/.default from EnvironmentCredential" in err
    rc, err, _ = _run_producer(env | {"IOT_PRODUCER_ENTRA_CREDENTIAL": "magic"})
    assert rc == 1
    assert "unknown Entra ID credential 'magic'" in err


def test_a_broker_that_stops_answering_mid_run_stops_the_sink(tmp_path):
    from producer.sinks import KafkaSink, SinkStalledError

    port = free_ports("127.0.0.1")[0]
    sink = KafkaSink(
        {"bootstrap.servers": f"127.0.0.1:{port}", "queue.buffering.max.messages": 10,
         "log_level": 0},
        "t", stall_timeout_s=1.0,
    )  # fmt: skip
    msgs = [(b"k", b"v", 0, i, f"e{i}", None) for i in range(50)]
    t0 = time.monotonic()
    with pytest.raises(SinkStalledError, match="acknowledged nothing for 1 s"):
        sink.send_batch(msgs)
    assert time.monotonic() - t0 < 5
    # 10 were queued (and are purged), 40 never were: all 50 are reported as failed.
    assert sink.errors == {"_QUEUE_FULL": 40}
    assert sink.abandon() == 10
    assert sink.errors == {"_QUEUE_FULL": 40, "_PURGE_QUEUE": 10}
    assert sorted(f[0] for f in sink.failures) == [b"v"] * 50
