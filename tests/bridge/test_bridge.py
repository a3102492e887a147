"""The pure parts of the MQTT ingress: topics, device ids, settings and the forwarding rules."""

from __future__ import annotations

import queue
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException

from bridge import kafka_side
from bridge.forward import RETRY_MAX_S, Forwarder, kafka_key
from bridge.kafka_side import KafkaOutbox, is_permanent, stop_reason
from bridge.mqtt_side import Inbound, subscription_refused_message
from bridge.settings import BridgeSettings
from common.kafka import KafkaConnectionError
from common.mqtt import (
    MqttConnectionError,
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

    topic = "iot-events"

    def __init__(self) -> None:
        self.in_flight = 0
        self.sent: list[tuple[bytes, bytes | None, Callable[[KafkaError | None], None]]] = []

    def send(self, value, key, done):
        self.in_flight += 1
        self.sent.append((value, key, done))

    def poll(self, timeout_s=0.0):
        pass

    def flush(self, timeout_s):
        return self.in_flight

    def report(self, n: int, error: int | KafkaError | None) -> None:
        self.in_flight -= 1
        self.sent[n][2](KafkaError(error) if isinstance(error, int) else error)


class Clock:
    def __init__(self) -> None:
        self.now = 0.25

    def __call__(self) -> float:
        return self.now


def _msg(mid: int, topic: str = "devices/dev-1/telemetry", connection: int = 1) -> Inbound:
    return Inbound(topic, b'{"x":1}', mid, 1, False, connection, 0.0)


def test_a_message_is_acknowledged_only_once_kafka_has_it():
    inbox, outbox, said = FakeInbox(), FakeOutbox(), []
    fwd = Forwarder(inbox, outbox, 1, say=said.append, clock=lambda: 0.25)
    for mid in (7, 8, 9):
        inbox.messages.put(_msg(mid))
    assert fwd.step(0) == 3
    assert [s[1] for s in outbox.sent] == [b"dev-1"] * 3
    assert inbox.acked == []  # produced, not yet delivered
    outbox.report(0, None)
    assert inbox.acked == [7]
    outbox.report(2, KafkaError.MSG_SIZE_TOO_LARGE)  # never passes: dropped, said
    assert fwd.metrics.failed == {"MSG_SIZE_TOO_LARGE": 1}
    assert said == [
        "[bridge] dropped a message Kafka cannot take (MSG_SIZE_TOO_LARGE): "
        "topic devices/dev-1/telemetry, 7 bytes"
    ]
    assert inbox.acked == [7]  # 9 waits for 8 (arrival order)
    outbox.report(1, None)
    assert inbox.acked == [7, 8, 9]
    assert fwd.metrics.forwarded == 2 and fwd.metrics.latency.count == 2
    # 250 ms, kept to HdrHistogram's 3 significant digits (the low end of its bucket)
    assert fwd.metrics.latency.percentiles_ms((50, 99)) == {"p50": 249.984, "p99": 249.984}


def test_acknowledgements_go_in_arrival_order_per_connection():
    inbox, outbox = FakeInbox(), FakeOutbox()
    fwd = Forwarder(inbox, outbox, 1, say=lambda _l: None)
    for mid, connection in ((1, 1), (2, 1), (3, 1), (11, 2), (12, 2)):
        inbox.messages.put(_msg(mid, connection=connection))
    assert fwd.step(0) == 5
    outbox.report(2, None)  # 3 delivered first: held for 1 and 2
    outbox.report(4, None)  # 12 held for 11 (its own connection's order)
    assert inbox.acked == []
    outbox.report(3, None)
    assert inbox.acked == [11, 12]  # connection 2 does not wait for connection 1
    outbox.report(1, None)
    assert inbox.acked == [11, 12]
    outbox.report(0, None)
    assert inbox.acked == [11, 12, 1, 2, 3]
    assert fwd.metrics.forwarded == 5


def test_a_retriable_error_is_produced_again_by_the_loop_after_a_doubling_wait():
    inbox, outbox, said, clock = FakeInbox(), FakeOutbox(), [], Clock()
    fwd = Forwarder(inbox, outbox, 1, say=said.append, clock=clock)
    inbox.messages.put(_msg(7))
    fwd.step(0)
    waits = [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0, 10.0, 10.0]
    for n, wait in enumerate(waits):
        outbox.report(n, KafkaError._MSG_TIMED_OUT)
        assert len(outbox.sent) == n + 1  # never produced again from the report itself
        start = clock.now
        clock.now = start + wait - 1e-6
        fwd.step(0)
        assert len(outbox.sent) == n + 1  # not yet due
        clock.now = start + wait + 1e-6
        fwd.step(0)
        assert len(outbox.sent) == n + 2
    assert RETRY_MAX_S == 10.0
    assert fwd.metrics.retried == 10 and inbox.acked == []
    # One line per 5 s at most; the metrics count every retry.
    assert said == [
        "[bridge] Kafka did not take a message (_MSG_TIMED_OUT: Local: Message timed out): "
        "producing it again in 0.1 s (attempt 2; 1 retries so far)",
        "[bridge] Kafka did not take a message (_MSG_TIMED_OUT: Local: Message timed out): "
        "producing it again in 6.4 s (attempt 8; 7 retries so far)",
        "[bridge] Kafka did not take a message (_MSG_TIMED_OUT: Local: Message timed out): "
        "producing it again in 10.0 s (attempt 9; 8 retries so far)",
        "[bridge] Kafka did not take a message (_MSG_TIMED_OUT: Local: Message timed out): "
        "producing it again in 10.0 s (attempt 10; 9 retries so far)",
        "[bridge] Kafka did not take a message (_MSG_TIMED_OUT: Local: Message timed out): "
        "producing it again in 10.0 s (attempt 11; 10 retries so far)",
    ]
    outbox.report(10, None)
    assert inbox.acked == [7] and fwd.metrics.forwarded == 1


def test_a_retry_waiting_at_stop_is_left_unacknowledged():
    inbox, outbox, clock = FakeInbox(), FakeOutbox(), Clock()
    fwd = Forwarder(inbox, outbox, 1, say=lambda _l: None, clock=clock)
    inbox.messages.put(_msg(7))
    fwd.step(0)
    outbox.report(0, KafkaError._TRANSPORT)
    assert fwd.run(lambda: True, metrics_every_s=1, flush_timeout_s=0) == 1
    assert fwd.left_unacked == 1 and inbox.acked == [] and len(outbox.sent) == 1


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed"),
            "Kafka refused to let the bridge write to topic iot-events "
            "(TOPIC_AUTHORIZATION_FAILED: Broker: Topic authorization failed): grant the "
            "bridge's principal write access to the topic, or check IOT_KAFKA_AUTH and its "
            "credentials",
        ),
        (
            KafkaError(KafkaError._UNKNOWN_TOPIC),
            "Kafka has no topic iot-events (_UNKNOWN_TOPIC: Local: Unknown topic): create it, "
            "or set IOT_KAFKA_TOPIC to an existing one",
        ),
        (
            KafkaError(KafkaError._FATAL, "Producer fenced", fatal=True),
            "the Kafka producer hit a fatal error (_FATAL: Producer fenced) and cannot go on: "
            "check the broker's log, then start the bridge again",
        ),
    ],
)
def test_an_error_no_message_gets_past_stops_the_bridge_leaving_messages_unacknowledged(
    error, line
):
    inbox, outbox, said = FakeInbox(), FakeOutbox(), []
    fwd = Forwarder(inbox, outbox, 1, say=said.append)
    for mid in (1, 2):
        inbox.messages.put(_msg(mid))
    fwd.step(0)
    outbox.report(1, None)
    outbox.report(0, error)
    assert stop_reason(error, "iot-events") == line
    inbox.messages.put(_msg(3))
    with pytest.raises(KafkaConnectionError) as err:
        fwd.run(lambda: False, metrics_every_s=60, flush_timeout_s=30)
    assert str(err.value) == line
    assert inbox.acked == [] and len(outbox.sent) == 2 and inbox.messages.qsize() == 1
    assert fwd.metrics.retried == 0 and said == []


class RefusingProducer:
    """A confluent-kafka Producer whose ``produce`` raises ``error``."""

    error = KafkaError(KafkaError._FATAL, "Producer fenced", fatal=True)

    def __init__(self, _conf) -> None:
        self.produced = 0

    def produce(self, *_a, **_kw):
        self.produced += 1
        raise KafkaException(self.error)

    def poll(self, _timeout=0.0):
        return 0

    def flush(self, _timeout=0.0):
        return 0


def test_a_produce_that_raises_is_reported_from_poll_and_stops_the_bridge(monkeypatch):
    monkeypatch.setattr(kafka_side, "Producer", RefusingProducer)
    outbox = KafkaOutbox({}, "iot-events")
    reports = []
    outbox.send(b"x", None, reports.append)
    assert reports == []  # not from inside send: a retry from the callback cannot recurse
    outbox.poll(0)
    assert [e.name() for e in reports] == ["_FATAL"] and outbox.in_flight == 0
    inbox = FakeInbox()
    fwd = Forwarder(inbox, outbox, 1, say=lambda _l: None)
    inbox.messages.put(_msg(1))
    with pytest.raises(KafkaConnectionError, match=r"^the Kafka producer hit a fatal error"):
        fwd.run(lambda: False, metrics_every_s=60, flush_timeout_s=1)
    assert outbox._producer.produced == 2 and inbox.acked == []


def test_a_produce_refused_for_a_reason_that_may_pass_waits_for_the_loop(monkeypatch):
    monkeypatch.setattr(kafka_side, "Producer", RefusingProducer)
    monkeypatch.setattr(RefusingProducer, "error", KafkaError(KafkaError._QUEUE_FULL))
    outbox, inbox, clock = KafkaOutbox({}, "iot-events"), FakeInbox(), Clock()
    fwd = Forwarder(inbox, outbox, 1, say=lambda _l: None, clock=clock)
    inbox.messages.put(_msg(1))
    fwd.step(0)
    assert outbox._producer.produced == 1 and fwd.metrics.retried == 1
    fwd.step(0)  # reported, not yet due
    assert outbox._producer.produced == 1
    clock.now += 0.1
    fwd.step(0)
    assert outbox._producer.produced == 2 and fwd.metrics.retried == 2


def test_permanent_errors():
    assert is_permanent(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    assert not is_permanent(KafkaError(KafkaError._MSG_TIMED_OUT))


def test_after_stop_a_purged_message_is_left_for_the_broker():
    inbox, outbox = FakeInbox(), FakeOutbox()
    fwd = Forwarder(inbox, outbox, 1, say=lambda _l: None)
    inbox.messages.put(_msg(1))
    fwd.step(0)
    assert fwd.run(lambda: True, metrics_every_s=1, flush_timeout_s=0) == 1
    outbox.report(0, KafkaError._PURGE_QUEUE)
    assert inbox.acked == [] and fwd.left_unacked == 1 and len(outbox.sent) == 1


class Reason:
    def __init__(self, value: int, name: str) -> None:
        self.value, self.name = value, name

    def __str__(self) -> str:
        return self.name


def test_a_refused_subscription_is_one_line_naming_the_filter_and_the_code():
    settings = MqttSettings(host="mqtt.example", port=1883)
    assert subscription_refused_message(
        "devices/+/telemetry", Reason(135, "Not authorized"), settings
    ) == (
        "the MQTT broker at mqtt.example:1883 refused the subscription to devices/+/telemetry "
        "(Not authorized, code 135): check the broker's ACL for IOT_MQTT_USERNAME and "
        "IOT_BRIDGE_TOPIC_FILTER"
    )
    assert subscription_refused_message("d/+/t", Reason(0, "Granted QoS 0"), settings) == (
        "the MQTT broker at mqtt.example:1883 granted the subscription to d/+/t at QoS 0 "
        "only: the bridge needs QoS 1 to lose nothing; raise the broker's maximum QoS"
    )


@pytest.mark.parametrize(
    ("code", "line"),
    [
        (
            135,
            "the MQTT broker at mqtt.example:1883 refused the subscription to "
            "devices/+/telemetry (Not authorized, code 135): check the broker's ACL for "
            "IOT_MQTT_USERNAME and IOT_BRIDGE_TOPIC_FILTER",
        ),
        (None, "the MQTT broker at mqtt.example:1883 did not answer the subscription to "
         "devices/+/telemetry within 1 s"),
    ],
)  # fmt: skip
def test_start_returns_only_once_the_subscription_is_granted(monkeypatch, code, line):
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.reasoncodes import ReasonCode

    from bridge import mqtt_side

    settings = MqttSettings(host="mqtt.example", port=1883, connect_timeout_s=1)
    inbox = mqtt_side.MqttInbox(
        settings, client_id="b", topic_filter="devices/+/telemetry", session_expiry_s=60,
        receive_maximum=10,
    )  # fmt: skip
    stopped = []
    monkeypatch.setattr(inbox, "stop", lambda: stopped.append(True))

    def connect(client, _settings, **_kw):
        if code is not None:
            client.on_subscribe(
                client, None, 1, [ReasonCode(PacketTypes.SUBACK, identifier=code)], None
            )
        return True

    monkeypatch.setattr(mqtt_side, "connect", connect)
    with pytest.raises(MqttConnectionError) as err:
        inbox.start()
    assert str(err.value) == line and stopped == [True]
    inbox._suback.clear()
    monkeypatch.setattr(
        mqtt_side,
        "connect",
        lambda client, _s, **_kw: (
            client.on_subscribe(
                client, None, 1, [ReasonCode(PacketTypes.SUBACK, identifier=1)], None
            )
            or True
        ),
    )
    assert inbox.start() is True
