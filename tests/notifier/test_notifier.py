"""The notifier without a broker: exact messages, retries, dead letters, grouping, filters,
the ledger and outbox, the offsets it commits, and no URL fragment in anything it says.

Destinations are a local HTTP server (tests/webhook_server.py); the consumer and the
dead-letter producer are fakes; time is a fake clock where grouping depends on it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from pydantic import SecretStr

from common.deliveries import DeliveryState, delivery_states
from common.stop_signals import StopFlag
from notifier import delivery
from notifier.destinations import DestinationsError, url_fragments
from notifier.grouping import RateLimiter
from notifier.ledger import Ledger
from notifier.loop import ConsumerError, Notifier, consumer_config, max_poll_interval_ms
from notifier.offsets import OffsetTracker
from notifier.records import decode
from notifier.settings import NotifierSettings
from tests.webhook_server import WebhookServer

T0_MS = 1_772_384_430_500  # 2026-03-01T17:00:30.500Z
TOKEN = "T0KEN5ecretXyZ/B0Bsecret9/hookPart77"  # a URL path whose every part is secret


def record(n: int, **overrides: object) -> dict:
    base = {
        "alert_id": f"e{n}:temperature_c", "event_id": f"e{n}", "device_id": "dev-00001",
        "device_type": "env_sensor", "site": "Austin", "metric": "temperature_c",
        "kind": "threshold_high", "value": 85.5, "threshold": 80.0,
        "event_time": "2026-03-01T17:00:30.123Z", "reading_time": "2026-03-01T17:00:30.200Z",
        "schema_version": 2,
    }  # fmt: skip
    base.update(overrides)
    if "event_id" in overrides or "metric" in overrides:
        base["alert_id"] = f"{base['event_id']}:{base['metric']}"
    return base


class FakeMessage:
    def __init__(self, value: bytes, partition: int, offset: int, ts_ms: int = T0_MS) -> None:
        self._v, self._p, self._o, self._ts = value, partition, offset, ts_ms

    def error(self) -> None:
        return None

    def value(self) -> bytes:
        return self._v

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def timestamp(self) -> tuple[int, int]:
        return 1, self._ts


class FakeConsumer:
    def __init__(self) -> None:
        self.queue: list[FakeMessage] = []
        self.commits: list[dict[int, int]] = []
        self.subscribed: list[str] = []
        self._next: dict[int, int] = {}
        self.polls = 0
        self.paused: list[str] = []  # "pause" / "resume", in order
        self._paused = False

    def add(self, rec: dict, partition: int = 0) -> None:
        offset = self._next.get(partition, 0)
        self._next[partition] = offset + 1
        self.queue.append(FakeMessage(orjson.dumps(rec), partition, offset))

    def subscribe(self, topics: list[str], **_: object) -> None:
        self.subscribed = topics

    def poll(self, timeout: float = -1) -> FakeMessage | None:
        self.polls += 1
        return self.queue.pop(0) if self.queue and not self._paused else None

    def assignment(self) -> list[int]:
        return [0]

    def pause(self, partitions: list[int]) -> None:
        self.paused.append("pause")
        self._paused = True

    def resume(self, partitions: list[int]) -> None:
        self.paused.append("resume")
        self._paused = False

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[FakeMessage]:
        out, self.queue = self.queue[:num_messages], self.queue[num_messages:]
        return out

    def commit(self, offsets: list, asynchronous: bool = True) -> None:
        assert asynchronous is False
        self.commits.append({tp.partition: tp.offset for tp in offsets})


class FakeProducer:
    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes]] = []

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery: object) -> None:
        self.records.append((topic, key, value))
        on_delivery(None, None)  # type: ignore[operator]

    def flush(self, timeout: float) -> int:
        return 0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server():
    s = WebhookServer()
    yield s
    s.close()


def make(
    tmp_path: Path,
    destinations: list[dict],
    *,
    clock: Clock | None = None,
    stop: StopFlag | None = None,
    post: object = None,
    real_sleep: bool = False,
    **settings: object,
) -> tuple[Notifier, FakeConsumer, FakeProducer, list[float]]:
    s = NotifierSettings(
        _env_file=None, destinations=json.dumps(destinations),
        ledger_path=tmp_path / "deliveries.sqlite", **{"rate_limit_s": 0, **settings},
    )  # fmt: skip
    consumer, producer, sleeps = FakeConsumer(), FakeProducer(), []
    notifier = Notifier(
        s, s.destination_list(), consumer, producer, Ledger(s.ledger_path), stop=stop,
        sleep=None if real_sleep else sleeps.append, clock=clock or Clock(),
        **({"post": post} if post is not None else {}),
    )  # fmt: skip
    notifier.start()
    return notifier, consumer, producer, sleeps


LINE_1 = (
    "dev-00001 (env_sensor, Austin): Temperature 85.50 °C above the threshold 80.00 °C "
    "(threshold_high) at 2026-03-01 17:00:30.123 UTC"
)


# ---------------------------------------------------------------- exact messages


def test_the_webhook_gets_the_alert_record_itself_with_its_idempotency_key(tmp_path, server):
    notifier, consumer, _, _ = make(
        tmp_path, [{"name": "hook", "format": "webhook", "url": server.url("/hook")}]
    )
    consumer.add(record(1))
    notifier.step(0)
    [req] = server.requests
    assert json.loads(req.body) == record(1)
    assert req.key == "e1:temperature_c"
    assert req.content_type == "application/json"
    assert consumer.commits == [{0: 1}]
    assert consumer.subscribed == ["iot-alerts"]


def test_teams_gets_an_adaptive_card_with_the_alert_in_words(tmp_path, server):
    notifier, consumer, _, _ = make(
        tmp_path, [{"name": "teams", "format": "teams", "url": server.url("/teams")}]
    )
    consumer.add(record(1))
    notifier.step(0)
    [req] = server.requests
    assert json.loads(req.body) == {
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": None,
            "content": {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard", "version": "1.4",
                "body": [
                    {"type": "TextBlock", "text": "IoT Pulse alert: dev-00001",
                     "weight": "Bolder", "size": "Medium", "wrap": True},
                    {"type": "TextBlock", "text": LINE_1, "wrap": True},
                ],
            },
        }],
    }  # fmt: skip
    assert req.key == "e1:temperature_c"


def test_slack_gets_mrkdwn_text_in_utc_with_the_contracts_label_and_unit(tmp_path, server):
    notifier, consumer, _, _ = make(
        tmp_path, [{"name": "slack", "format": "slack", "url": server.url("/slack")}]
    )
    consumer.add(
        record(2, metric="co2_ppm", kind="threshold_low", value=350.25, threshold=400.0,
               site="R&D <lab>", device_type=None, event_time="2026-03-01T12:00:00.5+05:00")
    )  # fmt: skip
    notifier.step(0)
    [req] = server.requests
    assert json.loads(req.body) == {
        "text": "*IoT Pulse alert: dev-00001*\ndev-00001 (R&amp;D &lt;lab&gt;): CO₂ 350.25 ppm "
        "below the threshold 400.00 ppm (threshold_low) at 2026-03-01 07:00:00.500 UTC"
    }
    assert req.key == "e2:co2_ppm"


# ---------------------------------------------------------------- retries and dead letters


def test_a_500_is_retried_with_backoff_then_delivered_once(tmp_path, server):
    server.answer("/hook", 500, 503)
    notifier, consumer, producer, sleeps = make(
        tmp_path, [{"name": "hook", "format": "webhook", "url": server.url("/hook")}],
        backoff_s=0.25, backoff_max_s=0.75,
    )  # fmt: skip
    consumer.add(record(1))
    notifier.step(0)
    assert [json.loads(r.body) for r in server.requests] == [record(1)] * 3
    assert {r.key for r in server.requests} == {"e1:temperature_c"}
    assert sleeps == [0.25, 0.5]
    assert producer.records == []
    assert consumer.commits == [{0: 1}]
    assert delivery_states(tmp_path / "deliveries.sqlite", ["e1:temperature_c"]) == {
        "e1:temperature_c": DeliveryState(delivered=1, failed=0, pending=0)
    }


def test_after_max_attempts_the_alert_is_dead_lettered_with_the_destination_and_error(
    tmp_path, server
):
    server.answer("/hook", 500, 502, 500)
    notifier, consumer, producer, sleeps = make(
        tmp_path, [{"name": "ops-hook", "format": "webhook", "url": server.url("/hook")}],
        max_attempts=3, backoff_s=0.5, backoff_max_s=0.75,
    )  # fmt: skip
    before = datetime.now(UTC)
    consumer.add(record(1))
    notifier.step(0)
    assert len(server.requests) == 3
    assert sleeps == [0.5, 0.75]
    [(topic, key, value)] = producer.records
    assert (topic, key) == ("iot-alerts.deadletter", b"dev-00001")
    letter = json.loads(value)
    failed_at = datetime.fromisoformat(letter.pop("failed_at").replace("Z", "+00:00"))
    assert before - timedelta(seconds=1) <= failed_at <= datetime.now(UTC)
    assert letter == {
        "destination": "ops-hook", "error": "HTTP 500 Internal Server Error", "attempts": 3,
        "alert": record(1),
    }  # fmt: skip
    assert consumer.commits == [{0: 1}]
    assert delivery_states(tmp_path / "deliveries.sqlite", ["e1:temperature_c"]) == {
        "e1:temperature_c": DeliveryState(delivered=0, failed=1, pending=0)
    }


def test_a_404_is_final_and_a_dead_letter_topic_may_be_named(tmp_path, server):
    server.answer("/hook", 404)
    notifier, consumer, producer, sleeps = make(
        tmp_path, [{"name": "hook", "format": "webhook", "url": server.url("/hook")}],
        dead_letter_topic="undelivered",
    )  # fmt: skip
    consumer.add(record(1))
    notifier.step(0)
    assert len(server.requests) == 1 and sleeps == []
    assert [(t, json.loads(v)["error"]) for t, _, v in producer.records] == [
        ("undelivered", "HTTP 404 Not Found")
    ]


def test_timeouts_and_refused_connections_are_retried_429_after_its_retry_after():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused = delivery.post(SecretStr(f"http://127.0.0.1:{port}/x"), b"{}", "k", 1.0)
    assert refused == delivery.Answer(None, "connection failed (Connection refused)", True)
    with socket.socket() as silent:  # accepts, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = SecretStr(f"http://127.0.0.1:{silent.getsockname()[1]}/x")
        assert delivery.post(url, b"{}", "k", 0.3) == delivery.Answer(
            None, "no answer within 0.3 s", True
        )
    assert delivery.classify(429, "Too Many Requests", "7") == delivery.Answer(
        429, "HTTP 429 Too Many Requests", True, 7.0
    )
    assert delivery.classify(404, "Not Found") == delivery.Answer(404, "HTTP 404 Not Found")
    answers = iter([delivery.classify(429, "Too Many Requests", "3"), delivery.Answer(200)])
    waits: list[float] = []
    outcome = delivery.deliver(
        lambda: next(answers), max_attempts=5, base_s=0.5, cap_s=8, sleep=waits.append
    )
    assert outcome == delivery.Outcome(True, 2, status=200)
    assert waits == [3.0]
    failing = delivery.Answer(503, "HTTP 503", True)
    waits.clear()
    told: list[tuple[int, float]] = []
    outcome = delivery.deliver(
        lambda: failing, max_attempts=6, base_s=0.5, cap_s=3.0, sleep=waits.append,
        on_retry=lambda n, answer, wait: told.append((n, wait)),
    )  # fmt: skip
    assert outcome == delivery.Outcome(False, 6, "HTTP 503", 503)
    assert waits == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert told == [(1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (5, 3.0)]


# ---------------------------------------------------------------- grouping and filters


def test_a_flapping_device_gets_one_grouped_message_per_window(tmp_path, server):
    clock = Clock()
    notifier, consumer, _, _ = make(
        tmp_path, [{"name": "slack", "format": "slack", "url": server.url("/slack")}],
        clock=clock, rate_limit_s=30,
    )  # fmt: skip
    consumer.add(record(1))
    notifier.step(0)  # the first goes at once
    clock.now += 5
    consumer.add(record(2, value=90.0))
    consumer.add(record(3, device_id="dev-00002"))  # another device: its own window
    notifier.step(0)
    clock.now += 10
    consumer.add(record(4, kind="threshold_low", value=-1.0, threshold=0.0))
    notifier.step(0)
    assert [r.key for r in server.requests] == ["e1:temperature_c", "e3:temperature_c"]
    assert consumer.commits == [{0: 1}]  # e2 is held: nothing after it is committed
    clock.now += 15  # 30 s after e1
    notifier.step(0)
    group = server.requests[2]
    ids = sorted(["e2:temperature_c", "e4:temperature_c"])
    assert group.key == "group-" + hashlib.sha256("\n".join(ids).encode()).hexdigest()[:32]
    assert json.loads(group.body) == {
        "text": "*IoT Pulse: 2 alerts from dev-00001*\n"
        "• dev-00001 (env_sensor, Austin): Temperature 90.00 °C above the threshold 80.00 °C "
        "(threshold_high) at 2026-03-01 17:00:30.123 UTC\n"
        "• dev-00001 (env_sensor, Austin): Temperature -1.00 °C below the threshold 0.00 °C "
        "(threshold_low) at 2026-03-01 17:00:30.123 UTC"
    }
    assert consumer.commits[-1] == {0: 4}
    # The group opened the next window: a new alert within it is held again.
    clock.now += 1
    consumer.add(record(5))
    notifier.step(0)
    assert len(server.requests) == 3
    notifier.finish()  # at shutdown, what is held goes out
    assert server.requests[3].key == "e5:temperature_c"
    assert consumer.commits[-1] == {0: 5}


def test_the_webhook_format_groups_records_under_the_device(tmp_path, server):
    clock = Clock()
    notifier, consumer, _, _ = make(
        tmp_path, [{"name": "hook", "format": "webhook", "url": server.url("/h"),
                    "rate_limit_s": 10}],
        clock=clock, rate_limit_s=0,
    )  # fmt: skip
    for n in (1, 2, 3):
        consumer.add(record(n))
    notifier.step(0)
    clock.now += 10
    notifier.step(0)
    assert [json.loads(r.body) for r in server.requests] == [
        record(1), {"device_id": "dev-00001", "count": 2, "alerts": [record(2), record(3)]},
    ]  # fmt: skip


def test_grouping_windows_exactly():
    limiter = RateLimiter(10)
    items = [decode(orjson.dumps(record(n)), T0_MS, 0, n) for n in range(4)]
    assert limiter.offer(items[0], 0.0) == [items[0]]
    assert limiter.offer(items[1], 9.999) is None
    assert limiter.next_due() == 10.0
    assert limiter.due(9.999) == []
    assert limiter.due(10.0) == [[items[1]]]
    assert limiter.offer(items[2], 19.0) is None  # the group opened a window until 20
    assert limiter.due(20.0) == [[items[2]]]
    assert limiter.due(30.0) == []  # nothing held: the window closes
    assert limiter.offer(items[3], 30.0) == [items[3]]
    assert RateLimiter(0).offer(items[1], 0.0) == [items[1]]
    # A window that ended while the caller was busy: its held alerts go with the next one.
    assert limiter.offer(items[0], 35.0) is None
    assert limiter.offer(items[1], 41.0) == [items[0], items[1]]
    assert limiter.next_due() is None
    assert limiter.offer(items[2], 50.0) is None  # the message opened a window until 51


def test_filters_leave_alerts_out_per_destination(tmp_path, server):
    notifier, consumer, _, _ = make(
        tmp_path,
        [
            {"name": "austin-low", "format": "webhook", "url": server.url("/a"),
             "sites": ["Austin"], "kinds": ["threshold_low"]},
            {"name": "co2", "format": "webhook", "url": server.url("/c"),
             "metrics": ["co2_ppm"], "device_types": ["air_quality"]},
            {"name": "all", "format": "webhook", "url": server.url("/all")},
        ],
    )  # fmt: skip
    consumer.add(record(1, kind="threshold_low"))
    consumer.add(record(2, site="Berlin", kind="threshold_low"))
    consumer.add(record(3, metric="co2_ppm", device_type="air_quality"))
    consumer.add(record(4, metric="co2_ppm"))
    notifier.step(0)
    assert [r.key for r in server.to("/a")] == ["e1:temperature_c"]
    assert [r.key for r in server.to("/c")] == ["e3:co2_ppm"]
    assert len(server.to("/all")) == 4
    assert consumer.commits == [{0: 4}]
    states = delivery_states(tmp_path / "deliveries.sqlite", ["e1:temperature_c", "e4:co2_ppm"])
    assert states == {
        "e1:temperature_c": DeliveryState(2, 0, 0),
        "e4:co2_ppm": DeliveryState(1, 0, 0),
    }


# ---------------------------------------------------------------- once per alert and destination


def test_a_repeated_alert_id_is_not_sent_again(tmp_path, server):
    notifier, consumer, _, _ = make(
        tmp_path, [{"name": "hook", "format": "webhook", "url": server.url("/h")}]
    )
    consumer.add(record(1))
    consumer.add(record(1), partition=1)  # the real-time path resends with the same id
    notifier.step(0)
    consumer.add(record(1))
    notifier.step(0)
    assert [r.key for r in server.requests] == ["e1:temperature_c"]
    assert consumer.commits == [{0: 1, 1: 1}, {0: 2}]


def test_a_message_left_in_the_outbox_is_sent_again_byte_for_byte_at_start(tmp_path, server):
    path = tmp_path / "deliveries.sqlite"
    ledger = Ledger(path)
    ledger.begin("hook", "group-abc", b'{"exact": "body"}', [record(1), record(2)],
                 ["e1:temperature_c", "e2:temperature_c"])  # fmt: skip
    ledger.begin("gone", "e9:temperature_c", b"{}", [record(9)], ["e9:temperature_c"])
    ledger.close()
    notifier, consumer, _, _ = make(
        tmp_path, [{"name": "hook", "format": "webhook", "url": server.url("/h")}]
    )
    assert [(r.key, r.body) for r in server.requests] == [("group-abc", b'{"exact": "body"}')]
    assert notifier.ledger.outbox() == []
    consumer.add(record(2))  # redelivered from Kafka: the ledger has it
    consumer.add(record(3))
    notifier.step(0)
    assert [r.key for r in server.requests] == ["group-abc", "e3:temperature_c"]


def test_offsets_commit_only_past_what_every_destination_finished():
    t = OffsetTracker()
    t.add(0, 5, 2)
    t.add(0, 6, 2)
    t.add(1, 0, 0)
    assert t.committable() == {0: 5, 1: 1}
    t.committed({0: 5, 1: 1})
    t.done(0, 6)
    t.done(0, 6)
    t.done(0, 5)
    assert t.committable() == {}
    t.done(0, 5)
    assert t.committable() == {0: 7}


# ---------------------------------------------------------------- stopping, turns, fatal errors


def test_a_stop_while_a_destination_keeps_timing_out_ends_the_run_at_once(tmp_path):
    stop, posts = StopFlag(), []

    def timing_out(url: SecretStr, body: bytes, key: str, timeout_s: float) -> delivery.Answer:
        posts.append(key)
        return delivery.Answer(None, "no answer within 5 s", True)

    hook = [{"name": "hook", "format": "webhook", "url": "http://h.example/x"}]
    notifier, consumer, producer, _ = make(
        tmp_path, hook, stop=stop, post=timing_out, real_sleep=True, backoff_s=5,
    )  # fmt: skip
    for n in (1, 2, 3):
        consumer.add(record(n))
    threading.Timer(0.3, stop.set, ["SIGTERM"]).start()
    started = time.monotonic()
    notifier.run(poll_s=0.05)
    assert time.monotonic() - started < 1.5  # not the 5 attempts' 29 s of backoff
    assert posts == ["e1:temperature_c"]  # one attempt; e2 and e3 not begun
    assert producer.records == []  # not given up: no dead letter
    assert consumer.commits == [{0: 0}]  # nothing past the undelivered alert
    assert [p.key for p in notifier.ledger.outbox()] == ["e1:temperature_c"]
    notifier.ledger.close()
    # The restart sends the outbox's message, then the records read again from offset 0.
    sent: list[str] = []

    def taking(url: SecretStr, body: bytes, key: str, timeout_s: float) -> delivery.Answer:
        sent.append(key)
        return delivery.Answer(200)

    again, consumer, producer, _ = make(tmp_path, hook, post=taking)
    assert sent == ["e1:temperature_c"]
    for n in (1, 2, 3):
        consumer.add(record(n))
    again.step(0)
    assert sent == ["e1:temperature_c", "e2:temperature_c", "e3:temperature_c"]
    assert consumer.commits == [{0: 3}]
    assert producer.records == []


def test_a_turn_sends_for_its_budget_then_polls_with_the_partitions_paused(tmp_path):
    clock, sent = Clock(), []

    def slow(url: SecretStr, body: bytes, key: str, timeout_s: float) -> delivery.Answer:
        clock.now += 20  # each POST takes 20 s of the turn's 30
        sent.append(key)
        return delivery.Answer(200)

    notifier, consumer, _, _ = make(
        tmp_path, [{"name": "hook", "format": "webhook", "url": "http://h.example/x"}],
        clock=clock, post=slow,
    )  # fmt: skip
    for n in range(1, 6):
        consumer.add(record(n))
    notifier.step(0)
    assert sent == ["e1:temperature_c", "e2:temperature_c"]
    assert (consumer.polls, consumer.paused, consumer.commits) == (1, [], [{0: 2}])
    notifier.step(0)  # polls (fetching nothing) before the fetched records go on
    assert sent[2:] == ["e3:temperature_c", "e4:temperature_c"]
    assert (consumer.polls, consumer.paused) == (2, ["pause", "resume"])
    notifier.step(0)
    assert sent[4:] == ["e5:temperature_c"]
    assert consumer.commits == [{0: 2}, {0: 4}, {0: 5}]
    assert consumer.polls == 3


def test_due_groups_are_taken_one_at_a_time_and_stay_due_past_a_limit():
    limiter = RateLimiter(10)
    a1, a2, b1, b2 = (
        decode(orjson.dumps(record(n, device_id=d)), T0_MS, 0, n)
        for n, d in enumerate(["dev-a", "dev-a", "dev-b", "dev-b"])
    )
    assert limiter.offer(a1, 0.0) == [a1]
    assert limiter.offer(b1, 1.0) == [b1]
    assert limiter.offer(a2, 2.0) is None
    assert limiter.offer(b2, 3.0) is None
    assert limiter.due(20.0, limit=1) == [[a2]]  # the oldest window first
    assert limiter.next_due() == 11.0  # dev-b's group is still held and due
    assert limiter.due(20.0, limit=1) == [[b2]]
    assert limiter.due(20.0) == []


def test_the_poll_interval_covers_the_longest_turn():
    s = NotifierSettings(_env_file=None)
    # A message at its worst: 5 attempts of 5 s and 4 waits of the 8 s cap = 57 s; a turn
    # is the 30 s budget, one held group and one record to each of 3 destinations.
    assert max_poll_interval_ms(s, 3) == 2 * (30 + 4 * 57) * 1000 == 516_000
    assert consumer_config(s, {"bootstrap.servers": "b"}, 3)["max.poll.interval.ms"] == 516_000
    quick = NotifierSettings(_env_file=None, max_attempts=1, request_timeout_s=2)
    assert max_poll_interval_ms(quick, 1) == 300_000  # never below librdkafka's default


class ErrorMessage:
    def __init__(self, error: object) -> None:
        self._e = error

    def error(self) -> object:
        return self._e

    def partition(self) -> int:
        return 0


@pytest.mark.parametrize(
    ("code", "fatal", "said"),
    [
        ("_FENCED", True,
         "the Kafka consumer was fenced (Fatal consumer error: Local: This instance has been "
         "fenced by a newer instance): another notifier joined group 'iot-pulse-notifier' as "
         "instance 'notifier-a'; give each notifier its own IOT_NOTIFIER_INSTANCE_ID"),
        ("TOPIC_AUTHORIZATION_FAILED", False,
         "the Kafka broker refused the notifier (Broker: Topic authorization failed): allow "
         "its principal to read topic 'iot-alerts' and to use group 'iot-pulse-notifier'"),
        ("_INCONSISTENT", True,
         "the Kafka consumer failed for good (Local: Inconsistent state); check the broker "
         "and restart the notifier"),
    ],
)  # fmt: skip
def test_a_fatal_consumer_error_stops_the_loop_with_what_to_do(tmp_path, code, fatal, said):
    from confluent_kafka import KafkaError

    notifier, consumer, _, _ = make(
        tmp_path, [{"name": "hook", "format": "webhook", "url": "http://h.example/x"}],
        instance_id="notifier-a",
    )  # fmt: skip
    reason = (
        "Fatal consumer error: Local: This instance has been fenced by a newer instance"
        if code == "_FENCED"
        else None
    )
    consumer.queue.append(ErrorMessage(KafkaError(getattr(KafkaError, code), reason, fatal)))
    consumer.add(record(1))
    with pytest.raises(ConsumerError) as caught:
        notifier.step(0)
    assert str(caught.value) == said
    assert consumer.commits == []


def test_the_stop_flag_waits_until_stop_is_asked():
    flag = StopFlag()
    started = time.monotonic()
    assert flag.wait(0.1) is False
    assert time.monotonic() - started >= 0.1
    threading.Timer(0.1, flag.set, ["SIGTERM"]).start()
    assert flag.wait(10) is True
    assert time.monotonic() - started < 1
    assert (flag.reason, flag.count, flag.wait(5)) == ("SIGTERM", 1, True)


# ---------------------------------------------------------------- the URLs are secrets


def test_no_fragment_of_a_url_appears_in_logs_errors_dead_letters_or_the_ledger(
    tmp_path, server, caplog, capsys
):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    down = f"http://127.0.0.1:{closed}/{TOKEN}"
    refusing = server.url(f"/{TOKEN}?sig=Sig0Secret&x=1")
    server.answer(f"/{TOKEN}?sig=Sig0Secret&x=1", 500, 500)
    caplog.set_level(logging.DEBUG)
    notifier, consumer, producer, _ = make(
        tmp_path,
        [{"name": "down", "format": "teams", "url": down},
         {"name": "refusing", "format": "slack", "url": refusing}],
        max_attempts=2,
    )  # fmt: skip
    consumer.add(record(1))
    notifier.step(0)
    notifier.finish()
    fragments = [f for f in url_fragments(notifier.destinations) if f != "127.0.0.1"]
    assert {"T0KEN5ecretXyZ", "B0Bsecret9", "hookPart77", "Sig0Secret"} <= set(fragments)
    ledger_bytes = b"".join(p.read_bytes() for p in tmp_path.glob("deliveries.sqlite*"))
    said = "\n".join(
        [caplog.text, *capsys.readouterr(), *(v.decode() for _, _, v in producer.records),
         ledger_bytes.decode("utf-8", "replace"), repr(notifier.settings),
         str(notifier.destinations)]
    )  # fmt: skip
    assert "connection failed (Connection refused)" in said
    assert "HTTP 500 Internal Server Error" in said
    assert [f for f in fragments if f in said] == []


def test_a_bad_destination_is_one_line_without_its_url(tmp_path, clean_env):
    def error(text: str) -> str:
        with pytest.raises(DestinationsError) as caught:
            NotifierSettings(destinations=text).destination_list()
        return str(caught.value)

    secret = f"https://hooks.example.com/{TOKEN}"
    unclosed = '[{"name": "a", "url": "' + secret + '"'
    said = [
        error(json.dumps([{"name": "a", "format": "email", "url": secret}])),
        error(json.dumps([{"name": "a", "format": "slack", "url": "ftp://" + TOKEN}])),
        error(unclosed),
        error(json.dumps([{"name": "a", "format": "slack", "url": secret, "sites": 5}])),
        error("[]"),
        # The URL given as the name too (a name is never a URL): its name is not quoted.
        error(json.dumps([{"name": secret, "format": "webhook", "url": secret}])),
    ]
    assert said == [
        "IOT_NOTIFIER_DESTINATIONS: destination 1 ('a'): format: Input should be 'webhook', "
        "'teams' or 'slack'",
        "IOT_NOTIFIER_DESTINATIONS: destination 1 ('a'): url: must be an http:// or https:// "
        "URL with a host (not shown: secret)",
        "IOT_NOTIFIER_DESTINATIONS: not JSON (Expecting ',' delimiter at line 1 column "
        f"{len(unclosed) + 1})",
        "IOT_NOTIFIER_DESTINATIONS: destination 1 ('a'): sites: Input should be a valid tuple",
        "no destinations: set IOT_NOTIFIER_DESTINATIONS (a JSON list) or "
        "IOT_NOTIFIER_DESTINATIONS_FILE (a TOML file)",
        "IOT_NOTIFIER_DESTINATIONS: destination 1: name: must be 1 to 64 letters, digits, '_', "
        "'.' or '-', starting with a letter or digit",
    ]
    assert not any(part in " ".join(said) for part in TOKEN.split("/"))


def test_destinations_from_a_toml_file_and_the_environment(tmp_path, clean_env, monkeypatch):
    (tmp_path / "d.toml").write_text(
        '[[destination]]\nname = "ops"\nformat = "teams"\nurl = "https://t.example/a"\n'
        'sites = ["Austin"]\nrate_limit_s = 5\n'
    )
    monkeypatch.setenv("IOT_NOTIFIER_DESTINATIONS_FILE", str(tmp_path / "d.toml"))
    monkeypatch.setenv(
        "IOT_NOTIFIER_DESTINATIONS",
        '[{"name": "hook", "format": "webhook", "url": "http://h.example/x"}]',
    )
    s = NotifierSettings()
    found = s.destination_list()
    assert [(d.name, d.format, d.sites, s.rate_limit_of(d)) for d in found] == [
        ("ops", "teams", ("Austin",), 5.0), ("hook", "webhook", (), 60.0),
    ]  # fmt: skip
    assert found[0].url.get_secret_value() == "https://t.example/a"
    assert "h.example" not in repr(s) and "h.example" not in str(found)
    monkeypatch.setenv(
        "IOT_NOTIFIER_DESTINATIONS",
        '[{"name": "ops", "format": "webhook", "url": "http://h.example/x"}]',
    )
    with pytest.raises(DestinationsError, match=r"^destination names must differ \(ops\)$"):
        NotifierSettings().destination_list()


# ---------------------------------------------------------------- what the dashboard reads


def test_delivery_states_count_delivered_failed_and_pending_per_alert(tmp_path):
    path = tmp_path / "d.sqlite"
    assert delivery_states(path, ["a"]) is None  # no notifier has run
    ledger = Ledger(path)
    ledger.set_destinations(["x", "y", "z"])
    ledger.begin("x", "a", b"{}", [{}], ["a"])
    ledger.finish("x", "a", ["a"], delivered=True, attempts=1)
    ledger.begin("y", "a", b"{}", [{}], ["a"])
    ledger.finish("y", "a", ["a"], delivered=False, attempts=5, error="HTTP 500")
    ledger.filtered("z", ["a", "b"])
    ledger.begin("x", "b", b"{}", [{}], ["b"])  # being sent: still pending
    ledger.begin("old", "c", b"{}", [{}], ["c"])
    ledger.finish("old", "c", ["c"], delivered=True, attempts=1)  # not a destination now
    states = delivery_states(path, ["a", "b", "c"])
    assert states == {
        "a": DeliveryState(1, 1, 0), "b": DeliveryState(0, 0, 2), "c": DeliveryState(0, 0, 3),
    }  # fmt: skip
    assert [s.text for s in states.values()] == ["1 of 2 · 1 failed", "0 of 2 · 2 pending",
                                                 "0 of 3 · 3 pending"]  # fmt: skip
    assert DeliveryState(0, 0, 0).text == "—"
    assert ledger.prune(timedelta(hours=1), datetime.now(UTC) + timedelta(hours=2)) == 5


# ---------------------------------------------------------------- the command line


def test_the_cli_says_in_one_line_what_is_wrong_with_its_settings(run_cli, tmp_path):
    secret = f"https://hooks.example.com/{TOKEN}"
    none = run_cli("notifier", home=tmp_path, cwd=tmp_path)
    assert (none.code, none.out) == (2, "")
    assert none.err == (
        "error: invalid settings: no destinations: set IOT_NOTIFIER_DESTINATIONS (a JSON list) "
        "or IOT_NOTIFIER_DESTINATIONS_FILE (a TOML file)\n"
    )
    bad = run_cli(
        "notifier", "--max-attempts", "0", home=tmp_path, cwd=tmp_path,
        env={"IOT_NOTIFIER_DESTINATIONS": json.dumps(
            [{"name": "a", "format": "slack", "url": secret}])},
    )  # fmt: skip
    assert (bad.code, bad.err) == (
        2,
        "error: invalid settings: IOT_NOTIFIER_MAX_ATTEMPTS (--max-attempts): Input should be "
        "greater than or equal to 1 (got '0')\n",
    )
    shown = run_cli("notifier", "--help", home=tmp_path, cwd=tmp_path)
    assert shown.code == 0
    assert "IOT_NOTIFIER_DESTINATIONS in the environment or .env" in " ".join(shown.out.split())
    logs = "".join(p.read_text() for p in tmp_path.rglob("*.log"))
    assert not any(part in bad.err + shown.out + logs for part in TOKEN.split("/"))
