"""The one place that builds Kafka client configs: librdkafka and Spark, per auth mode."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from common.kafka import (
    ENTRA_LOGIN_HANDLER,
    LIBRDKAFKA_LOG,
    KafkaConnectionError,
    check_connection,
    librdkafka_config,
    redact,
    spark_kafka_options,
    tls_failure,
)
from common.kafka_settings import KafkaSettings

CS = (
    "Endpoint=sb://pulse-ns.servicebus.windows.net/;"
    "SharedAccessKeyName=send-listen;SharedAccessKey=abc/def+ghi="
)
EH = "pulse-ns.servicebus.windows.net:9093"
EVENTHUBS_JAVA = {
    "kafka.request.timeout.ms": "60000",
    "kafka.session.timeout.ms": "30000",
    "kafka.metadata.max.age.ms": "180000",
    "kafka.connections.max.idle.ms": "180000",
    "kafka.max.request.size": "1000000",
}


@pytest.fixture(autouse=True)
def _no_ambient_settings(monkeypatch, tmp_path):
    """Only what a test passes counts: no IOT_* variables, no .env in the working dir."""
    import os

    for key in list(os.environ):
        if key.startswith("IOT_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


class FakeCredential:
    def __init__(self) -> None:
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str) -> SimpleNamespace:
        self.scopes.append(scopes)
        return SimpleNamespace(token="tok-123", expires_on=1_900_000_000)


# --------------------------------------------------------------------------- librdkafka


def test_librdkafka_none_producer():
    conf = librdkafka_config(KafkaSettings(bootstrap_servers="broker:9092"), "producer")
    assert conf == {
        "bootstrap.servers": "broker:9092",
        "client.id": "iot-pulse",
        "logger": LIBRDKAFKA_LOG,
        "acks": "all",
        "enable.idempotence": True,
        "security.protocol": "PLAINTEXT",
    }


def test_librdkafka_none_consumer_and_admin_defaults():
    kafka = KafkaSettings()
    assert librdkafka_config(kafka, "consumer", client_id="c1") == {
        "bootstrap.servers": "localhost:9092",
        "client.id": "c1",
        "logger": LIBRDKAFKA_LOG,
        "security.protocol": "PLAINTEXT",
    }
    assert librdkafka_config(kafka, "admin") == {
        "bootstrap.servers": "localhost:9092",
        "client.id": "iot-pulse",
        "logger": LIBRDKAFKA_LOG,
        "security.protocol": "PLAINTEXT",
    }


def test_librdkafka_connection_string_derives_bootstrap():
    kafka = KafkaSettings(auth="connection_string", connection_string=CS)
    assert kafka.bootstrap_servers == EH
    assert librdkafka_config(kafka, "consumer") == {
        "bootstrap.servers": EH,
        "client.id": "iot-pulse",
        "logger": LIBRDKAFKA_LOG,
        "security.protocol": "SASL_SSL",
        "socket.keepalive.enable": True,
        "metadata.max.age.ms": 180000,
        "request.timeout.ms": 60000,
        "session.timeout.ms": 30000,
        "sasl.mechanism": "PLAIN",
        "sasl.username": "$ConnectionString",
        "sasl.password": CS,
    }


def test_librdkafka_connection_string_producer_with_ca(tmp_path):
    ca = tmp_path / "ca.pem"
    kafka = KafkaSettings(
        auth="connection_string",
        connection_string=CS,
        bootstrap_servers="localhost:19093",
        ssl_ca_location=ca,
    )
    assert librdkafka_config(kafka, "producer") == {
        "bootstrap.servers": "localhost:19093",
        "client.id": "iot-pulse",
        "logger": LIBRDKAFKA_LOG,
        "acks": "all",
        "enable.idempotence": True,
        "security.protocol": "SASL_SSL",
        "socket.keepalive.enable": True,
        "metadata.max.age.ms": 180000,
        "request.timeout.ms": 60000,
        "ssl.ca.location": str(ca),
        "sasl.mechanism": "PLAIN",
        "sasl.username": "$ConnectionString",
        "sasl.password": CS,
    }


def test_librdkafka_entra_uses_the_credential_for_the_namespace_scope():
    cred = FakeCredential()
    kafka = KafkaSettings(auth="entra", bootstrap_servers=EH)
    conf = librdkafka_config(kafka, "admin", credential=cred)
    cb = conf.pop("oauth_cb")
    assert conf == {
        "bootstrap.servers": EH,
        "client.id": "iot-pulse",
        "logger": LIBRDKAFKA_LOG,
        "security.protocol": "SASL_SSL",
        "socket.keepalive.enable": True,
        "metadata.max.age.ms": 180000,
        "request.timeout.ms": 60000,
        "sasl.mechanism": "OAUTHBEARER",
    }
    assert cb("ignored") == ("tok-123", 1_900_000_000.0)
    assert cred.scopes == [("https://pulse-ns.servicebus.windows.net/.default",)]


def test_librdkafka_entra_explicit_scope():
    cred = FakeCredential()
    kafka = KafkaSettings(auth="entra", bootstrap_servers=EH, entra_scope="api://custom/.default")
    librdkafka_config(kafka, "producer", credential=cred)["oauth_cb"]("")
    assert cred.scopes == [("api://custom/.default",)]


def test_connection_string_is_required_and_never_echoed():
    with pytest.raises(ValidationError, match="IOT_KAFKA_CONNECTION_STRING"):
        KafkaSettings(auth="connection_string")
    kafka = KafkaSettings(auth="connection_string", connection_string=CS)
    assert CS not in repr(kafka)
    assert redact(librdkafka_config(kafka, "producer"))["sasl.password"] == "***"


# --------------------------------------------------------------------------- Spark


def test_spark_none():
    assert spark_kafka_options(KafkaSettings(bootstrap_servers="kafka:29092")) == {
        "kafka.bootstrap.servers": "kafka:29092"
    }


def test_spark_connection_string():
    kafka = KafkaSettings(auth="connection_string", connection_string=CS)
    assert spark_kafka_options(kafka) == {
        "kafka.bootstrap.servers": EH,
        **EVENTHUBS_JAVA,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="$ConnectionString" password="{CS}";'
        ),
    }


def test_spark_connection_string_escapes_quotes_and_sets_pem_truststore():
    weird = 'Endpoint=sb://localhost:1/;SharedAccessKeyName=a"b;SharedAccessKey=c\\d'
    kafka = KafkaSettings(
        auth="connection_string", connection_string=weird, ssl_ca_location=Path("/ca/root.pem")
    )
    opts = spark_kafka_options(kafka)
    assert opts["kafka.bootstrap.servers"] == "localhost:1"  # the Endpoint's port
    assert opts["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="$ConnectionString" '
        'password="Endpoint=sb://localhost:1/;SharedAccessKeyName=a\\"b;SharedAccessKey=c\\\\d";'
    )
    assert opts["kafka.ssl.truststore.type"] == "PEM"
    assert opts["kafka.ssl.truststore.location"] == "/ca/root.pem"
    assert redact(opts)["kafka.sasl.jaas.config"] == "***"


def test_spark_entra():
    kafka = KafkaSettings(auth="entra", bootstrap_servers=EH)
    assert ENTRA_LOGIN_HANDLER == "io.iotpulse.eventhubs.EntraLoginCallbackHandler"
    assert spark_kafka_options(kafka) == {
        "kafka.bootstrap.servers": EH,
        **EVENTHUBS_JAVA,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'scope="https://pulse-ns.servicebus.windows.net/.default";'
        ),
        "kafka.sasl.login.callback.handler.class": (
            "io.iotpulse.eventhubs.EntraLoginCallbackHandler"
        ),
    }


def test_spark_entra_scope_login_options_and_ca():
    kafka = KafkaSettings(
        auth="entra",
        bootstrap_servers="localhost:19093",
        entra_scope="https://other.servicebus.windows.net/.default",
        ssl_ca_location=Path("/ca/root.pem"),
    )
    opts = spark_kafka_options(kafka, login_options={"tokenSource": "unsecured"})
    assert opts == {
        "kafka.bootstrap.servers": "localhost:19093",
        **EVENTHUBS_JAVA,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'scope="https://other.servicebus.windows.net/.default" tokenSource="unsecured";'
        ),
        "kafka.sasl.login.callback.handler.class": ENTRA_LOGIN_HANDLER,
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/ca/root.pem",
    }


# --------------------------------------------------------------------------- TLS failures

# librdkafka 2.x's texts, as its error callback reported them against the local broker.
UNTRUSTED = (
    "sasl_ssl://localhost:55781/bootstrap: SSL handshake failed: error:0A000086:SSL "
    "routines::certificate verify failed: broker certificate could not be verified, verify "
    "that ssl.ca.location is correctly configured or root CA certificates are installed "
    "(install ca-certificates package) (after 1523ms in state SSL_HANDSHAKE)"
)
NOT_TLS = (
    "sasl_ssl://127.0.0.1:52225/bootstrap: SSL handshake failed: Disconnected: SSL connection "
    "closed by peer: connecting to a PLAINTEXT broker listener? (after 108ms in state "
    "SSL_HANDSHAKE)"
)


def test_an_untrusted_certificate_says_to_set_the_ca_setting():
    assert tls_failure(["1/1 brokers are down", UNTRUSTED], "localhost:55781 (SASL_SSL)") == (
        "the TLS handshake with localhost:55781 (SASL_SSL) failed: the broker's certificate is "
        "not signed by a CA this client trusts (error:0A000086:SSL routines::certificate verify "
        "failed: broker certificate could not be verified); set IOT_KAFKA_SSL_CA_LOCATION to "
        "the PEM file of the CA that signed it (the local broker's is the 'CA file' that "
        "python -m infra.broker status prints)"
    )


def test_a_listener_without_tls_says_to_check_the_port():
    assert tls_failure([NOT_TLS], "127.0.0.1:52225 (SASL_SSL)") == (
        "the TLS handshake with 127.0.0.1:52225 (SASL_SSL) failed: nothing speaks TLS on that "
        "port (Disconnected: SSL connection closed by peer: connecting to a PLAINTEXT broker "
        "listener?); check IOT_KAFKA_BOOTSTRAP_SERVERS (when unset: the host and port of the "
        "connection string's Endpoint): it must be the broker's SASL_SSL listener (Event "
        "Hubs: port 9093)"
    )


def test_errors_that_are_not_about_tls_are_left_to_the_other_messages():
    refused = (
        "sasl_ssl://localhost:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused"  # noqa: E501
    )
    assert tls_failure([refused, "1/1 brokers are down"], "localhost:1 (SASL_SSL)") is None


# ---------------------------------------------------------------- check_connection

HINT = (
    "check IOT_KAFKA_BOOTSTRAP_SERVERS (when unset: the host and port of the connection "
    "string's Endpoint) and that the broker is running"
)


def _closed_port() -> int:
    """A port nobody listens on: connecting to it is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a broker that hangs)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])


def test_a_refused_connection_fails_at_once():
    address = f"127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with pytest.raises(KafkaConnectionError) as exc:
        check_connection({"bootstrap.servers": address}, "iot-events", timeout_s=20)
    assert time.monotonic() - start < 3
    assert str(exc.value) == (
        f"could not reach the Kafka broker at {address} (PLAINTEXT): the connection was "
        f"refused (0 of 1 broker up; Connect to ipv4#{address} failed: Connection refused); " + HINT
    )


def test_two_brokers_that_refuse_are_counted_as_none_up():
    first, second = f"127.0.0.1:{_closed_port()}", f"127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with pytest.raises(KafkaConnectionError) as exc:
        check_connection({"bootstrap.servers": f"{first},{second}"}, timeout_s=20)
    assert time.monotonic() - start < 3
    message = str(exc.value)
    assert message.startswith(
        f"could not reach the Kafka broker at {first},{second} (PLAINTEXT): the connection "
        "was refused (0 of 2 brokers up; Connect to ipv4#"
    )
    assert "brokers are down" not in message


def test_one_refusing_broker_of_two_is_not_a_refusal(silent_port):
    refusing, silent = f"127.0.0.1:{_closed_port()}", f"127.0.0.1:{silent_port}"
    with pytest.raises(KafkaConnectionError) as exc:
        check_connection({"bootstrap.servers": f"{refusing},{silent}"}, timeout_s=2)
    assert str(exc.value).startswith(
        f"could not reach the Kafka broker at {refusing},{silent} (PLAINTEXT) within 2 s "
        "(0 of 2 brokers up; "
    )


def test_a_broker_that_never_answers_fails_at_the_deadline(silent_port):
    address = f"127.0.0.1:{silent_port}"
    start = time.monotonic()
    with pytest.raises(KafkaConnectionError) as exc:
        check_connection({"bootstrap.servers": address}, "iot-events", timeout_s=2)
    assert 2 <= time.monotonic() - start < 5
    assert str(exc.value) == (
        f"could not reach the Kafka broker at {address} (PLAINTEXT) within 2 s "
        f"(0 of 1 broker up; no answer); " + HINT
    )


def test_librdkafka_logs_go_to_python_logging_not_stderr(capfd, caplog):
    from confluent_kafka import Producer

    address = f"127.0.0.1:{_closed_port()}"
    kafka = KafkaSettings(bootstrap_servers=address)
    producer = Producer(librdkafka_config(kafka, "producer") | {"reconnect.backoff.ms": 10})
    with caplog.at_level(logging.INFO, logger=LIBRDKAFKA_LOG.name):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not caplog.records:
            producer.poll(0.1)
    producer.flush(0)
    assert capfd.readouterr().err == ""
    texts = [r.getMessage() for r in caplog.records if r.name == LIBRDKAFKA_LOG.name]
    assert any(f"Connect to ipv4#{address} failed: Connection refused" in t for t in texts), texts


def test_the_reason_never_quotes_librdkafkas_broker_count():
    from confluent_kafka import KafkaError, KafkaException

    from common.kafka import _no_answer

    down = KafkaError(KafkaError._ALL_BROKERS_DOWN, "0/4 brokers are down")
    assert _no_answer([down], None, 2, answered=False) == "0 of 2 brokers up; no answer"
    # A broker that answered is up: the topic's own error is the reason.
    leader = KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE, "Leader not available"))
    assert _no_answer([down], leader, 2, answered=True) == "Leader not available"


@pytest.mark.parametrize("content", [None, "not a certificate\n"])
def test_a_ca_file_librdkafka_cannot_use_is_named_with_its_setting(tmp_path, content):
    ca = tmp_path / "ca.pem"
    if content is not None:
        ca.write_text(content)
    conf = {
        "bootstrap.servers": "127.0.0.1:1",
        "security.protocol": "SSL",
        "ssl.ca.location": str(ca),
    }
    with pytest.raises(KafkaConnectionError) as caught:
        check_connection(conf, timeout_s=5)
    said = str(caught.value)
    assert said.startswith(f"cannot use the CA file {ca} (Failed to create admin client: ")
    assert said.endswith("): set IOT_KAFKA_SSL_CA_LOCATION to the PEM file of the CA that "
                         "signed the broker's certificate")  # fmt: skip
