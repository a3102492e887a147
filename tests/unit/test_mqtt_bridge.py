"""The pure parts of the MQTT ingress: topics, device ids, settings and the forwarding rules."""

from __future__ import annotations

import queue
from collections.abc import Callable

import pytest

from bridge.forward import Forwarder, kafka_key
from bridge.kafka_side import is_permanent
from bridge.mqtt_side import Inbound
from bridge.settings import BridgeSettings
from common.mqtt import (
    device_id_from_topic,
    device_level,
    telemetry_filter,
    telemetry_topic,
    unreachable_message,
)
from common.mqtt_settings import MqttSettings
from common.settings import SettingsError, load_settings
from infra.mqtt_broker import config_text


def test_topics_and_the_device_id_in_them():
    assert telemetry_topic("devices", "dev-00007") == "devices/dev-00007/telemetry"
    assert telemetry_filter("site-1/devices") == "site-1/devices/+/telemetry"
    assert device_level("devices/+/telemetry") == 1
    assert device_level("+/up") == 0
    assert device_id_from_topic("devices/dev-00007/telemetry", 1) == "dev-00007"
    assert device_id_from_topic("devices//telemetry", 1) is None
    assert device_id_from_topic("devices", 1) is None
    assert kafka_key("a/b/dev-1/telemetry", 2) == b"dev-1"
    assert kafka_key("devices", 1) is None


@pytest.mark.parametrize(
    "bad", ["devices/#", "devices/+/+/telemetry", "devices/telemetry", "a/x+/b"]
)
def test_a_filter_needs_exactly_one_plus_level(bad):
    with pytest.raises(ValueError, match="exactly one '\\+' level|holds '#'"):
        device_level(bad)


def test_settings_errors_say_which_variable_in_one_line(clean_env, monkeypatch):
    monkeypatch.setenv("IOT_MQTT_PASSWORD", "s3cret-pw")
    with pytest.raises(SettingsError) as err:
        load_settings(MqttSettings)
    assert str(err.value) == (
        "[mqtt] IOT_MQTT_PASSWORD is set but IOT_MQTT_USERNAME is not: set IOT_MQTT_USERNAME "
        "too, or unset IOT_MQTT_PASSWORD"
    )
    monkeypatch.delenv("IOT_MQTT_PASSWORD")
    monkeypatch.setenv("IOT_MQTT_TOPIC_PREFIX", "devices/#")
    with pytest.raises(SettingsError) as err:
        load_settings(MqttSettings)
    assert str(err.value) == (
        "IOT_MQTT_TOPIC_PREFIX (--mqtt-topic-prefix): must not hold the wildcards '+' or '#': "
        "it names the topics devices publish to"
    )
    monkeypatch.delenv("IOT_MQTT_TOPIC_PREFIX")
    monkeypatch.setenv("IOT_BRIDGE_TOPIC_FILTER", "devices/#")
    with pytest.raises(SettingsError) as err:
        load_settings(BridgeSettings)
    assert str(err.value) == (
        "[bridge] IOT_BRIDGE_TOPIC_FILTER: topic filter 'devices/#' holds '#': use one '+' "
        "level for the device id, e.g. devices/+/telemetry"
    )


def test_the_bridge_filter_follows_the_topic_prefix(clean_env, monkeypatch):
    monkeypatch.setenv("IOT_MQTT_TOPIC_PREFIX", "plant-7/devices")
    settings = load_settings(BridgeSettings)
    assert settings.topic_filter == "plant-7/devices/+/telemetry"
    assert settings.device_level == 2
    assert "s3cret" not in repr(MqttSettings(username="u", password="s3cret"))


def test_unreachable_message_names_the_variables():
    settings = MqttSettings(host="mqtt.example", port=8883, tls=True)
    assert unreachable_message(ConnectionRefusedError(111, "Connection refused"), settings) == (
        "could not reach the MQTT broker at mqtt.example:8883 (TLS) (Connection refused); "
        "check IOT_MQTT_HOST and IOT_MQTT_PORT and that the broker is running"
    )
    assert "timed out" in unreachable_message(TimeoutError(), settings)


def test_mosquitto_config_keeps_sessions_and_queues(tmp_path):
    text = config_text(port=18830, folder=tmp_path, user="me")
    lines = set(text.splitlines())
    assert {
        "listener 18830 127.0.0.1",
        "allow_anonymous true",
        "persistence true",
        f"persistence_location {tmp_path}/",
        "max_queued_messages 1000000",
        "user me",
    } <= lines
    auth = config_text(port=1, folder=tmp_path, user="me", password_file=tmp_path / "pw")
    assert "allow_anonymous false" in auth and f"password_file {tmp_path / 'pw'}" in auth


class FakeInbox:
    def __init__(self) -> None:
        self.messages: queue.Queue[Inbound] = queue.Queue()
        self.acked: list[int] = []

    def ack(self, msg: Inbound) -> bool:
        self.acked.append(msg.mid)
        return True


class FakeOutbox:
    """Holds each send's callback until the test delivers it."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.sent: list[tuple[bytes, bytes | None, Callable[[str | None], None]]] = []

    def send(self, value, key, done):
        self.in_flight += 1
        self.sent.append((value, key, done))

    def poll(self, timeout_s=0.0):
        pass

    def flush(self, timeout_s):
        return self.in_flight

    def report(self, n: int, error: str | None) -> None:
        self.in_flight -= 1
        self.sent[n][2](error)


def _msg(mid: int, topic: str = "devices/dev-1/telemetry") -> Inbound:
    return Inbound(topic, b'{"x":1}', mid, 1, False, 1, 0.0)


def test_a_message_is_acknowledged_only_once_kafka_has_it():
    inbox, outbox, said = FakeInbox(), FakeOutbox(), []
    fwd = Forwarder(inbox, outbox, 1, say=said.append, clock=lambda: 0.25)
    for mid in (7, 8, 9):
        inbox.messages.put(_msg(mid))
    assert fwd.step(0) == 3
    assert [s[1] for s in outbox.sent] == [b"dev-1"] * 3
    assert inbox.acked == []  # produced, not yet delivered
    outbox.report(1, None)
    assert inbox.acked == [8]
    outbox.report(0, "_MSG_TIMED_OUT")  # may pass: produced again, not acknowledged
    assert inbox.acked == [8] and len(outbox.sent) == 4 and fwd.metrics.retried == 1
    outbox.report(2, "MSG_SIZE_TOO_LARGE")  # never passes: dropped, acknowledged, said
    assert inbox.acked == [8, 9] and fwd.metrics.failed == {"MSG_SIZE_TOO_LARGE": 1}
    assert said == [
        "[bridge] dropped a message Kafka cannot take (MSG_SIZE_TOO_LARGE): "
        "topic devices/dev-1/telemetry, 7 bytes"
    ]
    outbox.report(3, None)
    assert inbox.acked == [8, 9, 7]
    assert fwd.metrics.forwarded == 2 and fwd.metrics.latencies_s == [0.25, 0.25]


def test_after_stop_a_purged_message_is_left_for_the_broker():
    inbox, outbox = FakeInbox(), FakeOutbox()
    fwd = Forwarder(inbox, outbox, 1, say=lambda _l: None)
    inbox.messages.put(_msg(1))
    fwd.step(0)
    assert fwd.run(lambda: True, metrics_every_s=1, flush_timeout_s=0) == 1
    outbox.report(0, "_PURGE_QUEUE")
    assert inbox.acked == [] and fwd.left_unacked == 1 and len(outbox.sent) == 1


def test_permanent_errors():
    assert is_permanent("MSG_SIZE_TOO_LARGE") and not is_permanent("_MSG_TIMED_OUT")
