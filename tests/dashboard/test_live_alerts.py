"""The live alert feed without a broker: the buffer, the feed's states, what the page prints.

``LiveFeed.step`` runs against a fake consumer that plays the broker's answers; one
test uses librdkafka itself against a port where nothing listens.
"""

from __future__ import annotations

import socket
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError, KafkaException, TopicPartition

from common.alerts import ALERT_FIELDS, LiveAlert
from common.deliveries import DeliveryState
from common.kafka import LIBRDKAFKA_LOG
from common.kafka_settings import KafkaSettings
from dashboard.live_alerts import (
    LIVE_COLUMNS,
    AlertBuffer,
    FeedState,
    FeedStatus,
    LiveFeed,
    alert_frame,
    alert_table,
    connection_detail,
    feed_config,
    format_alert_time,
    format_latency,
    kafka_reason,
    live_line,
)

T0 = datetime(2026, 3, 1, 17, 0, 30, tzinfo=UTC)
TOPIC = "iot-alerts"
BROKER = "broker-1:9092"


def _alert(alert_id: str, seconds: float, **changes: Any) -> LiveAlert:
    alert = LiveAlert(
        alert_id=alert_id,
        device_id="dev-00001",
        metric="temperature_c",
        kind="threshold_high",
        value=31.5,
        threshold=28.0,
        event_time=T0,
        alert_time=T0 + timedelta(seconds=seconds),
    )
    return replace(alert, **changes)


def _ids(alerts: list[LiveAlert]) -> list[str]:
    return [a.alert_id for a in alerts]


# ---------------------------------------------------------------- the buffer


def test_buffer_keeps_the_newest_first_whatever_the_arrival_order():
    buffer = AlertBuffer(3)
    assert [buffer.add(_alert(i, s)) for i, s in (("b", 2), ("a", 1), ("d", 4), ("c", 3))] == [
        True,
        True,
        True,
        True,
    ]
    assert _ids(buffer.newest()) == ["d", "c", "b"]  # "a", the oldest, left
    assert _ids(buffer.newest(2)) == ["d", "c"]
    assert len(buffer) == 3
    assert (buffer.received, buffer.duplicates) == (4, 0)


def test_buffer_keeps_an_alert_id_once_the_first_record_wins():
    buffer = AlertBuffer(5)
    assert buffer.add(_alert("e1:temperature_c", 1, value=31.5)) is True
    # The real-time path resends after a restart: same id, a later Kafka time.
    assert buffer.add(_alert("e1:temperature_c", 9, value=31.5)) is False
    assert buffer.add(_alert("e2:temperature_c", 2)) is True
    assert [(a.alert_id, a.alert_time) for a in buffer.newest()] == [
        ("e2:temperature_c", T0 + timedelta(seconds=2)),
        ("e1:temperature_c", T0 + timedelta(seconds=1)),
    ]
    assert (buffer.received, buffer.duplicates) == (2, 1)


def test_buffer_drops_an_alert_older_than_all_it_keeps_once_full():
    buffer = AlertBuffer(2)
    buffer.add(_alert("b", 2))
    buffer.add(_alert("c", 3))
    assert buffer.add(_alert("a", 1)) is False
    assert _ids(buffer.newest()) == ["c", "b"]
    assert buffer.received == 3


def test_buffer_orders_alerts_of_the_same_time_by_id():
    buffer = AlertBuffer(4)
    for alert_id in ("x:co2_ppm", "x:pm25_ugm3", "w:co2_ppm"):
        buffer.add(_alert(alert_id, 5))
    buffer.add(_alert("later", 6))
    assert _ids(buffer.newest()) == ["later", "x:pm25_ugm3", "x:co2_ppm", "w:co2_ppm"]


def test_buffer_remembers_ids_beyond_what_it_keeps_but_not_forever():
    buffer = AlertBuffer(2, remember=3)
    for i in range(3):
        buffer.add(_alert(f"a{i}", i))
    assert _ids(buffer.newest()) == ["a2", "a1"]
    assert buffer.add(_alert("a0", 10)) is False  # left the buffer, still remembered
    buffer.add(_alert("a3", 3))  # the fourth id: a0 is forgotten
    assert buffer.add(_alert("a0", 11)) is True
    assert _ids(buffer.newest()) == ["a0", "a3"]
    assert (buffer.received, buffer.duplicates) == (5, 1)


def test_buffer_needs_room_for_one():
    with pytest.raises(ValueError, match="capacity must be at least 1"):
        AlertBuffer(0)


# ---------------------------------------------------------------- what the page prints


def test_times_and_latencies_read_as_utc_and_seconds():
    now = T0 + timedelta(minutes=5)
    assert format_alert_time(T0 + timedelta(microseconds=123_999), now) == "17:00:30.123"
    assert format_alert_time(T0 - timedelta(days=1), now) == "2026-02-28 17:00:30.000"
    # An aware time in another zone prints in UTC.
    other = (T0 + timedelta(milliseconds=5)).astimezone(timezone(timedelta(hours=-5)))
    assert format_alert_time(other, now) == "17:00:30.005"
    assert format_latency(0.4567) == "0.46 s"
    assert format_latency(None) == "—"


def test_alert_table_prints_every_column():
    alerts = [
        _alert(
            "e2:co2_ppm", 2, metric="co2_ppm", value=1534.25, threshold=1200.0,
            site="Austin", device_type="air_quality", device_id="dev-00003",
            reading_time=T0 + timedelta(seconds=1, milliseconds=750),
        ),
        _alert("e1:temperature_c", 1, kind="threshold_low", value=9.5, threshold=10.0),
    ]  # fmt: skip
    frame = alert_frame(alerts)
    assert frame.columns == [
        "alert_time", "device_id", "device_type", "site", "metric", "kind", "value",
        "threshold", "latency_s", "alert_id",
    ]  # fmt: skip
    table = alert_table(frame, T0)
    assert tuple(table.columns) == LIVE_COLUMNS
    assert table.rows() == [
        ("17:00:32.000", "dev-00003", "Austin", "CO₂ (ppm)", "threshold_high", "1,534.25",
         "1,200.00", "0.25 s", "e2:co2_ppm"),
        ("17:00:31.000", "dev-00001", "—", "Temperature (°C)", "threshold_low", "9.50",
         "10.00", "—", "e1:temperature_c"),
    ]  # fmt: skip
    assert alert_table(alert_frame([]), T0).rows() == []
    # With the notifier's ledger: how many destinations have each alert.
    states = {"e2:co2_ppm": DeliveryState(delivered=1, failed=1, pending=0)}
    delivered = alert_table(frame, T0, states)
    assert delivered.columns == [*LIVE_COLUMNS[:-1], "delivered", "alert id"]
    assert delivered["delivered"].to_list() == ["1 of 2 · 1 failed", "—"]
    assert delivered.drop("delivered").rows() == table.rows()


def test_live_line_counts_and_says_the_state_while_healthy():
    connected = FeedStatus(FeedState.CONNECTED, "following 'iot-alerts' at b:9092", T0)
    down = FeedStatus(FeedState.UNREACHABLE, "cannot reach the Kafka broker at b:9092", T0)
    assert live_line(connected, 0, 0, False, 1.0) == (
        "No live alerts yet · following 'iot-alerts' at b:9092 · refreshing every 1 s"
    )
    assert live_line(connected, 1, 1, False, 0.5) == (
        "1 live alert · following 'iot-alerts' at b:9092 · refreshing every 0.5 s"
    )
    assert live_line(connected, 3, 1200, True, None) == (
        "3 of 1,200 live alerts in the selected sites and device types · "
        "following 'iot-alerts' at b:9092 · paused"
    )
    # Unhealthy, the page's warning says why: the line only counts what was received.
    assert live_line(down, 2, 2, False, 1.0) == "2 live alerts · refreshing every 1 s"


def test_connection_errors_read_as_one_line():
    assert (
        connection_detail(
            "127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection "
            "refused (after 0ms in state CONNECT)"
        )
        == "Connect to ipv4#127.0.0.1:9092 failed: Connection refused"
    )
    assert connection_detail("Failed to resolve 'nohost:9092': Name or service\nnot known") == (
        "Failed to resolve 'nohost:9092': Name or service not known"
    )
    exc = KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: down"))
    assert kafka_reason(exc) == "Failed to get metadata: down"
    assert kafka_reason(RuntimeError("two\nlines")) == "two lines"
    assert kafka_reason(RuntimeError()) == "RuntimeError"


# ---------------------------------------------------------------- the consumer's config


def test_feed_config_assigns_and_commits_nothing():
    seen: list[KafkaError] = []
    conf = feed_config(KafkaSettings(bootstrap_servers=BROKER), seen.append)
    group = conf.pop("group.id")
    assert (
        group.startswith("iot-pulse-dashboard-") and len(group) == len("iot-pulse-dashboard-") + 32
    )
    assert conf.pop("error_cb") == seen.append
    assert conf == {
        "bootstrap.servers": BROKER,
        "client.id": "iot-pulse-dashboard",
        "logger": LIBRDKAFKA_LOG,  # librdkafka's lines go to the log file
        "security.protocol": "PLAINTEXT",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "allow.auto.create.topics": False,
        "reconnect.backoff.max.ms": 2000,
        "log_level": 0,
    }
    # Every process (and every restart) gets a group of its own.
    assert feed_config(KafkaSettings(), seen.append)["group.id"] != group


def test_feed_config_logs_in_to_event_hubs_like_the_other_services():
    secret = "Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=r;SharedAccessKey=k="
    kafka = KafkaSettings(auth="connection_string", connection_string=secret, alerts_topic="al")
    conf = feed_config(kafka, lambda _e: None)
    assert (conf["bootstrap.servers"], conf["security.protocol"], conf["sasl.mechanism"]) == (
        "ns1.servicebus.windows.net:9093",
        "SASL_SSL",
        "PLAIN",
    )
    assert (conf["sasl.username"], conf["sasl.password"]) == ("$ConnectionString", secret)
    assert conf["session.timeout.ms"] == 30000


# ---------------------------------------------------------------- the feed, on a fake broker


def _error(code: int, text: str = "") -> KafkaError:
    return KafkaError(code, text)


class FakeMessage:
    def __init__(
        self, value: bytes | None = None, timestamp_ms: int = 0, error: KafkaError | None = None
    ) -> None:
        self._value, self._timestamp_ms, self._error = value, timestamp_ms, error

    def error(self) -> KafkaError | None:
        return self._error

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return TIMESTAMP_CREATE_TIME, self._timestamp_ms


class FakeBroker:
    """What the fake consumers see: the topic's partitions, errors, records to deliver."""

    def __init__(self) -> None:
        self.partitions: dict[int, tuple[int, int]] | None = None  # None: no such topic
        self.down: str | None = None  # the error callback's text while the broker is down
        self.topic_error: KafkaError | None = None
        self.pending: list[FakeMessage] = []
        self.errors_on_consume: list[KafkaError] = []
        self.consumers: list[FakeConsumer] = []
        self.refuse_config: str | None = None

    def consumer(self, conf: dict[str, Any]) -> FakeConsumer:
        if self.refuse_config is not None:
            raise KafkaException(_error(KafkaError._INVALID_ARG, self.refuse_config))
        consumer = FakeConsumer(self, conf)
        self.consumers.append(consumer)
        return consumer


class FakeConsumer:
    def __init__(self, broker: FakeBroker, conf: dict[str, Any]) -> None:
        self.broker, self.conf = broker, conf
        self.assigned: list[tuple[int, int]] = []
        self.unassigned = 0
        self.closed = False
        self.list_calls = 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.list_calls += 1
        if self.broker.down is not None:
            self.conf["error_cb"](_error(KafkaError._TRANSPORT, self.broker.down))
            raise KafkaException(_error(KafkaError._TRANSPORT, "Failed to get metadata: down"))
        if self.broker.partitions is None:
            meta = SimpleNamespace(partitions={}, error=_error(KafkaError.UNKNOWN_TOPIC_OR_PART))
        else:
            meta = SimpleNamespace(
                partitions=dict.fromkeys(self.broker.partitions), error=self.broker.topic_error
            )
        return SimpleNamespace(topics={topic: meta})

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None
    ) -> tuple[int, int] | None:
        assert self.broker.partitions is not None
        return self.broker.partitions[partition.partition]

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        assert all(tp.topic == TOPIC for tp in partitions)
        self.assigned += [(tp.partition, tp.offset) for tp in partitions]

    def unassign(self) -> None:
        self.unassigned += 1
        self.assigned = []

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[FakeMessage]:
        for error in self.broker.errors_on_consume:
            self.conf["error_cb"](error)
        self.broker.errors_on_consume = []
        taken, self.broker.pending = self.broker.pending, []
        return taken

    def close(self) -> None:
        self.closed = True


def _record(alert_id: str, device_id: str, **fields: Any) -> bytes:
    doc = {
        "alert_id": alert_id, "event_id": alert_id.split(":")[0], "device_id": device_id,
        "device_type": "thermostat", "site": "Austin", "metric": "temperature_c",
        "kind": "threshold_high", "value": 31.5, "threshold": 28.0,
        "event_time": "2026-03-01T17:00:29.500Z", "reading_time": "2026-03-01T17:00:30.000Z",
        "schema_version": 2,
    } | fields  # fmt: skip
    assert set(doc) == {f.name for f in ALERT_FIELDS}
    return orjson.dumps(doc)


def _ms(seconds: float) -> int:
    return int((T0 + timedelta(seconds=seconds)).timestamp() * 1000)


@pytest.fixture
def broker() -> FakeBroker:
    return FakeBroker()


def _feed(broker: FakeBroker, keep: int = 5) -> LiveFeed:
    kafka = KafkaSettings(bootstrap_servers=BROKER, alerts_topic=TOPIC)
    return LiveFeed(kafka, keep, consumer_factory=broker.consumer, recheck_s=3600)


def test_a_new_feed_says_it_is_connecting(broker):
    feed = _feed(broker)
    assert (feed.status.state, feed.status.reason) == (
        FeedState.CONNECTING,
        "connecting to broker-1:9092",
    )
    assert feed.alerts() == [] and broker.consumers == []  # nothing connects before a step


def test_an_unreachable_broker_is_one_line_and_retried(broker):
    broker.down = (
        "broker-1:9092/bootstrap: Connect to ipv4#10.0.0.7:9092 failed: Connection refused "
        "(after 0ms in state CONNECT)"
    )
    feed = _feed(broker)
    assert feed.step() == 2.0
    assert feed.status.state == FeedState.UNREACHABLE
    assert feed.status.reason == (
        "cannot reach the Kafka broker at broker-1:9092 (Connect to ipv4#10.0.0.7:9092 "
        "failed: Connection refused); retrying every 2 s"
    )
    assert not feed.status.healthy
    assert feed.step() == 2.0  # the same consumer asks again
    assert len(broker.consumers) == 1 and broker.consumers[0].list_calls == 2


def test_a_broker_that_is_not_tls_reads_as_a_tls_problem(broker):
    broker.down = (
        "ns1.servicebus.windows.net:9093/bootstrap: SSL handshake failed: Disconnected: "
        "connecting to a PLAINTEXT broker listener? (after 3ms in state SSL_HANDSHAKE)"
    )
    feed = _feed(broker)
    feed.step()
    assert feed.status.reason.startswith(
        "the TLS handshake with broker-1:9092 (none) failed: nothing speaks TLS on that port"
    )
    assert feed.status.reason.endswith("; retrying every 2 s")


def test_a_missing_topic_is_one_line_and_retried(broker):
    broker.partitions = None
    feed = _feed(broker)
    assert feed.step() == 2.0
    assert feed.status == FeedStatus(
        FeedState.TOPIC_MISSING,
        "the topic 'iot-alerts' does not exist at broker-1:9092 yet (the processor's "
        "real-time alert path writes to it); checking again every 2 s",
        feed.status.since,
    )
    broker.partitions = {0: (0, 0)}
    assert feed.step() == 0.0
    assert feed.status.state == FeedState.CONNECTED


def test_a_topic_it_may_not_read_is_a_failure(broker):
    broker.partitions = {0: (0, 0)}
    broker.topic_error = _error(
        KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed"
    )
    feed = _feed(broker)
    feed.step()
    assert (feed.status.state, feed.status.reason) == (
        FeedState.FAILED,
        "cannot read the topic 'iot-alerts' at broker-1:9092 (Broker: Topic authorization "
        "failed); checking again every 2 s",
    )


def test_connecting_reads_back_the_newest_records_of_every_partition(broker):
    broker.partitions = {0: (0, 12), 1: (3, 5), 2: (0, 0)}
    feed = _feed(broker, keep=5)
    assert feed.step() == 0.0
    assert broker.consumers[0].assigned == [(0, 7), (1, 3), (2, 0)]
    assert (feed.status.state, feed.status.reason) == (
        FeedState.CONNECTED,
        "following 'iot-alerts' at broker-1:9092 (3 partitions)",
    )
    # A partition added later is read back the same way, the others are left as they are.
    broker.partitions[3] = (0, 9)
    feed._next_check = 0.0
    feed.step()
    assert broker.consumers[0].assigned == [(0, 7), (1, 3), (2, 0), (3, 4)]
    assert feed.status.reason == "following 'iot-alerts' at broker-1:9092 (4 partitions)"


def test_records_become_alerts_once_each_newest_first(broker):
    broker.partitions = {0: (0, 0)}
    feed = _feed(broker)
    feed.step()
    broker.pending = [
        FakeMessage(_record("e1:temperature_c", "dev-00001"), _ms(0.25)),
        FakeMessage(_record("e2:temperature_c", "dev-00002", site=None), _ms(1.5)),
        FakeMessage(_record("e1:temperature_c", "dev-00001"), _ms(9)),  # resent
        FakeMessage(b'{"alert_id": "half"}', _ms(2)),  # not an alert record
        FakeMessage(None, _ms(3)),  # a tombstone
        FakeMessage(error=_error(KafkaError._PARTITION_EOF)),
    ]
    assert feed.step() == 0.0
    alerts = feed.alerts()
    assert [(a.alert_id, a.device_id, a.site, a.latency_s) for a in alerts] == [
        ("e2:temperature_c", "dev-00002", None, 1.5),
        ("e1:temperature_c", "dev-00001", "Austin", 0.25),
    ]
    assert alerts[1].alert_time == T0 + timedelta(seconds=0.25)
    assert (feed.buffer.received, feed.buffer.duplicates, feed.skipped) == (2, 1, 2)
    assert feed.status.state == FeedState.CONNECTED
    assert feed.alerts(1) == alerts[:1]


def test_a_broker_that_goes_down_and_comes_back(broker):
    broker.partitions = {0: (0, 0)}
    feed = _feed(broker)
    feed.step()
    broker.pending = [FakeMessage(_record("e1:temperature_c", "dev-00001"), _ms(1))]
    feed.step()
    # While following, librdkafka says every broker is down: the feed says so at once.
    broker.errors_on_consume = [
        _error(KafkaError._TRANSPORT, "broker-1:9092/1: Disconnected (after 5ms in state UP)"),
        _error(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"),
    ]
    broker.down = "broker-1:9092/1: Connect to ipv4#10.0.0.7:9092 failed: Connection refused"
    assert feed.step() == 0.0
    assert (feed.status.state, feed.status.reason) == (
        FeedState.UNREACHABLE,
        "cannot reach the Kafka broker at broker-1:9092 (Disconnected); retrying every 2 s",
    )
    assert feed.step() == 2.0  # checks the broker rather than waiting on records
    assert feed.status.state == FeedState.UNREACHABLE
    assert feed.alerts()[0].alert_id == "e1:temperature_c"  # what was received stays
    broker.down = None
    assert feed.step() == 0.0
    assert feed.status.state == FeedState.CONNECTED
    assert broker.consumers[0].assigned == [(0, 0)]  # not read back again: it goes on
    assert len(broker.consumers) == 1


def test_every_broker_down_is_said_without_librdkafkas_miscount(broker):
    broker.partitions = {0: (0, 0)}
    feed = _feed(broker)
    feed.step()
    feed.step()
    # librdkafka's own text counts wrongly (two bootstrap brokers, none up): not shown.
    broker.errors_on_consume = [_error(KafkaError._ALL_BROKERS_DOWN, "0/4 brokers are down")]
    assert feed.step() == 0.0
    assert (feed.status.state, feed.status.reason) == (
        FeedState.UNREACHABLE,
        "cannot reach the Kafka broker at broker-1:9092 (no broker is up); retrying every 2 s",
    )


def test_a_deleted_topic_is_unassigned_and_read_back_when_it_returns(broker):
    broker.partitions = {0: (0, 4)}
    feed = _feed(broker)
    feed.step()
    broker.partitions = None
    broker.pending = [FakeMessage(error=_error(KafkaError.UNKNOWN_TOPIC_OR_PART))]
    feed.step()  # the record error asks for a check at the next turn
    assert feed.step() == 2.0
    assert feed.status.state == FeedState.TOPIC_MISSING
    assert broker.consumers[0].unassigned == 1
    broker.partitions = {0: (0, 2)}
    feed.step()
    assert broker.consumers[0].assigned == [(0, 0)]
    assert feed.status.state == FeedState.CONNECTED


def test_a_consumer_that_cannot_be_built_is_a_failure_and_retried(broker):
    broker.refuse_config = 'No such configuration property: "sasl.mechanism"'
    feed = _feed(broker)
    assert feed.step() == 2.0
    assert (feed.status.state, feed.status.reason) == (
        FeedState.FAILED,
        "the live feed stopped (KafkaException: No such configuration property: "
        '"sasl.mechanism"); starting again in 2 s',
    )
    broker.refuse_config = None
    broker.partitions = {0: (0, 0)}
    assert feed.step() == 0.0
    assert feed.status.state == FeedState.CONNECTED


def test_an_unexpected_error_starts_over_with_a_new_consumer(broker, monkeypatch):
    broker.partitions = {0: (0, 3)}
    feed = _feed(broker)
    feed.step()
    monkeypatch.setattr(
        FakeConsumer, "consume", lambda *a, **k: (_ for _ in ()).throw(OSError("gone"))
    )
    assert feed.step() == 2.0
    assert feed.status.reason == "the live feed stopped (OSError: gone); starting again in 2 s"
    assert broker.consumers[0].closed
    monkeypatch.undo()
    feed.step()
    assert len(broker.consumers) == 2 and broker.consumers[1].assigned == [(0, 0)]
    assert feed.status.state == FeedState.CONNECTED


# ---------------------------------------------------------------- librdkafka, no broker


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_real_consumer_with_no_broker_never_blocks_the_reader():
    kafka = KafkaSettings(bootstrap_servers=f"127.0.0.1:{_closed_port()}", alerts_topic=TOPIC)
    feed = LiveFeed(kafka, 5, timeout_s=0.5, retry_s=0.2).start()
    try:
        deadline = time.monotonic() + 10
        while feed.status.state != FeedState.UNREACHABLE and time.monotonic() < deadline:
            started = time.monotonic()
            assert feed.alerts() == []  # a page's reads return at once, whatever the broker
            assert time.monotonic() - started < 0.05
            time.sleep(0.05)
        assert feed.status.state == FeedState.UNREACHABLE, feed.status
        assert feed.status.reason.startswith(
            f"cannot reach the Kafka broker at {kafka.bootstrap_servers} ("
        )
        assert "\n" not in feed.status.reason
    finally:
        started = time.monotonic()
        feed.stop()
        assert time.monotonic() - started < 5
