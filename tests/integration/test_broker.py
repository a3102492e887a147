"""The local Kafka broker: every listener and auth path round-trips real messages."""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from infra import broker
from infra.broker import BrokerInfo

pytestmark = pytest.mark.integration

MESSAGES = {f"device-{i:02d}": f'{{"seq": {i}, "temp_c": {20 + i / 10:.1f}}}' for i in range(10)}


def _new_topic(info: BrokerInfo, client_config: dict[str, Any] | None = None) -> str:
    name = f"test-{uuid.uuid4().hex[:12]}"
    if client_config is None:
        broker.ensure_topic(info.plaintext, name)
    else:
        bootstrap = client_config["bootstrap.servers"]
        broker.ensure_topic(bootstrap, name, client_config=client_config)
    return name


def _round_trip(config: dict[str, Any], topic: str) -> dict[str, str]:
    """Produce MESSAGES with ``config``, consume them back with ``config``, return key->value."""
    producer = Producer(config)
    for key, value in MESSAGES.items():
        producer.produce(topic, key=key.encode(), value=value.encode())
    assert producer.flush(30) == 0, "producer did not deliver every message within 30 s"

    consumer = Consumer(
        config | {"group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    received: list[tuple[str, str]] = []
    deadline = time.monotonic() + 30
    try:
        while len(received) < len(MESSAGES) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            received.append((msg.key().decode(), msg.value().decode()))
        # Anything beyond the ten we produced would be a duplicate.
        extra = consumer.poll(1.0)
        assert extra is None or extra.error() is not None, "consumed more messages than produced"
    finally:
        consumer.close()
    assert len(received) == len(MESSAGES), f"got {len(received)} of {len(MESSAGES)} messages"
    return dict(received)


def _eventhubs_config(info: BrokerInfo) -> dict[str, Any]:
    """Exactly what a user configures for Azure Event Hubs, plus the local CA."""
    connection_string = info.connection_string()
    endpoint = re.match(r"Endpoint=sb://([^/]+)/;", connection_string)
    assert endpoint is not None
    return {
        "bootstrap.servers": endpoint.group(1),
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "$ConnectionString",
        "sasl.password": connection_string,
        "ssl.ca.location": str(info.ca_file),
    }


def _b64url(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _unsecured_token(_config: str) -> tuple[str, float]:
    now = time.time()
    header = _b64url({"alg": "none"})
    payload = _b64url({"sub": "pytest-device-simulator", "iat": int(now), "exp": int(now) + 3600})
    return f"{header}.{payload}.", now + 3600


def _java_pids_for(data_dir: Path) -> list[int]:
    """PIDs of live java processes whose command line mentions ``data_dir``."""
    pids = []
    for cmdline_file in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline_file.read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"java") and str(data_dir).encode() in b" ".join(argv):
            pids.append(int(cmdline_file.parent.name))
    return pids


def test_plaintext_round_trip(kafka_broker: BrokerInfo) -> None:
    topic = _new_topic(kafka_broker)
    config = {"bootstrap.servers": kafka_broker.plaintext}
    assert _round_trip(config, topic) == MESSAGES


def test_sasl_plain_with_event_hubs_settings(kafka_broker: BrokerInfo) -> None:
    config = _eventhubs_config(kafka_broker)
    assert config["bootstrap.servers"] == kafka_broker.sasl_ssl
    topic = _new_topic(kafka_broker, config)
    assert _round_trip(config, topic) == MESSAGES


def test_sasl_plain_rejects_a_wrong_key(kafka_broker: BrokerInfo) -> None:
    errors: list[KafkaError] = []
    config = _eventhubs_config(kafka_broker)
    config["sasl.password"] = config["sasl.password"].replace("Key=", "Key=x")
    admin = AdminClient(config | {"error_cb": errors.append, "log_level": 0})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    admin.poll(1.0)  # error_cb runs from poll()
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_sasl_oauthbearer_unsecured_jwt(kafka_broker: BrokerInfo) -> None:
    config = {
        "bootstrap.servers": kafka_broker.sasl_ssl,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": _unsecured_token,
        "ssl.ca.location": str(kafka_broker.ca_file),
    }
    topic = _new_topic(kafka_broker)
    assert _round_trip(config, topic) == MESSAGES


def test_ensure_topic_is_idempotent(kafka_broker: BrokerInfo) -> None:
    topic = _new_topic(kafka_broker)
    broker.ensure_topic(kafka_broker.plaintext, topic, partitions=5)
    metadata = AdminClient({"bootstrap.servers": kafka_broker.plaintext}).list_topics(timeout=10)
    assert len(metadata.topics[topic].partitions) == 3


def _shared_access_key(connection_string: str) -> str:
    return connection_string.rsplit("SharedAccessKey=", 1)[1]


def test_lifecycle_restart_and_secret_hygiene(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "broker"
    info = broker.start(data_dir)
    try:
        secret = info.connection_string()
        assert re.fullmatch(
            rf"Endpoint=sb://{re.escape(info.sasl_ssl)}/;SharedAccessKeyName="
            r"RootManageSharedAccessKey;SharedAccessKey=[A-Za-z0-9+/]{43}=",
            secret,
        )
        assert info.connection_string_file.stat().st_mode & 0o777 == 0o600
        assert broker.status(data_dir) == info
        assert broker.start(data_dir, quiet=True) == info  # already running: same broker
        assert _java_pids_for(info.data_dir) == [info.pid]
        broker.ensure_topic(info.plaintext, "survives-restart")
    finally:
        assert broker.stop(data_dir) is True

    assert _java_pids_for(info.data_dir) == []
    assert broker.status(data_dir) is None
    assert broker.stop(data_dir) is False

    again = broker.start(data_dir, quiet=True)
    try:
        assert _shared_access_key(again.connection_string()) == _shared_access_key(secret)
        topics = AdminClient({"bootstrap.servers": again.plaintext}).list_topics(timeout=10)
        assert "survives-restart" in topics.topics
    finally:
        # What make clean stops: every broker under a folder, a stopped one's state skipped.
        stale = tmp_path / "old" / "broker"
        stale.mkdir(parents=True)
        (stale / "broker.json").write_text('{"pid": null}')
        assert broker.stop_all(tmp_path) == ([data_dir], [])
    assert _java_pids_for(info.data_dir) == []

    key = _shared_access_key(secret)
    assert key not in capsys.readouterr().out
    for path in (info.data_dir / "broker.json", info.log_file, info.data_dir / "logs/broker.out"):
        assert key not in path.read_text()
