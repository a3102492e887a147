"""Wrong credentials and unreachable brokers: a clear error and a non-zero exit, fast."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed as soon as we leave: nothing listens there
    rc, err, elapsed = _run_producer({"IOT_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"})
    assert rc == 1
    assert elapsed < 30
    assert f"could not reach the Kafka broker at 127.0.0.1:{port}" in err
