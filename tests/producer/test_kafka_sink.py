"""The Kafka sink on confluent-kafka, without a broker: config, failures, stalls, readiness."""

from __future__ import annotations

import socket
from collections import Counter

import pytest

from producer.settings import ProducerSettings
from producer.sinks import KafkaSink, SinkStalledError, conf_true
from producer.sources import SimulationSource


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def _source(scenario: str = "chaos", **rates: float) -> SimulationSource:
    from producer.launch import make_source

    settings = ProducerSettings(
        _env_file=None, scenario=scenario, fleet_size=30, seed=11,
        start_time="2026-01-01T00:00:00Z", clock_rate=50.0, **rates,
    )  # fmt: skip
    source = make_source(settings)
    assert isinstance(source, SimulationSource)
    return source


def test_a_refused_property_is_named_without_its_value():
    with pytest.raises(ValueError) as info:
        KafkaSink({"bootstrap.servers": "127.0.0.1:1", "no.such.property": "s3cret-value"}, "t")
    assert "'no.such.property'" in str(info.value)
    assert "s3cret-value" not in str(info.value)
    with pytest.raises(ValueError) as info:
        KafkaSink({"bootstrap.servers": "127.0.0.1:1", "acks": "s3cret-value"}, "t")
    assert "'request.required.acks'" in str(info.value)  # librdkafka's name for acks
    assert "s3cret-value" not in str(info.value)


def test_undelivered_messages_come_back_with_their_own_payload_and_tag():
    """A chaos batch (tagged and untagged messages), purged unsent: each failure is its message."""
    source = _source(oversized_rate=0.005)
    batches = [source.next_batch(n) for n in (700, 1, 300)]
    sent = [m for b in batches for m in b]
    assert any(m[5] is not None for m in sent) and any(m[5] is None for m in sent)
    sink = KafkaSink(
        {"bootstrap.servers": f"127.0.0.1:{_closed_port()}", "log_level": 0,
         "message.max.bytes": 1_000_000},
        "t",
    )  # fmt: skip
    for batch in batches:
        sink.send_batch(batch)
    too_large = [m for m in sent if len(m[1]) > 1_000_000]
    assert len(too_large) >= 1
    assert sink.errors == {"MSG_SIZE_TOO_LARGE": len(too_large)}  # refused when queued
    assert sink.abandon() == len(sent) - len(too_large)
    assert sink.acked == 0
    assert sink.errors == {
        "MSG_SIZE_TOO_LARGE": len(too_large),
        "_PURGE_QUEUE": len(sent) - len(too_large),
    }
    got = Counter((value, repr(tag)) for value, tag, _error in sink.failures)
    assert got == Counter((m[1], repr(m[5])) for m in sent)
    sink.close()
    with pytest.raises(RuntimeError, match="the Kafka sink is closed"):
        sink.send_batch(sent[:1])


def test_a_full_queue_with_no_acknowledgement_stops_the_sink():
    sink = KafkaSink(
        {"bootstrap.servers": f"127.0.0.1:{_closed_port()}", "log_level": 0,
         "queue.buffering.max.messages": 10},
        "t", stall_timeout_s=0.5,
    )  # fmt: skip
    msgs = [(b"k", b"v%d" % i, 0, i, f"e{i}", None) for i in range(25)]
    with pytest.raises(SinkStalledError, match="acknowledged nothing for 0 s while 10 messages"):
        sink.send_batch(msgs)
    assert sink.errors == {"_QUEUE_FULL": 15}  # never queued: reported as failed at once
    assert [(f[0], f[2]) for f in sink.failures] == [(m[1], "_QUEUE_FULL") for m in msgs[10:]]
    assert sink.abandon() == 10
    assert sink.errors == {"_QUEUE_FULL": 15, "_PURGE_QUEUE": 10}
    sink.close()


def test_waiting_for_readiness_is_bounded_and_can_be_stopped():
    conf = {"bootstrap.servers": f"127.0.0.1:{_closed_port()}", "enable.idempotence": True}
    sink = KafkaSink(conf, "t")
    try:
        assert not sink.ready  # no broker, so no producer id
        assert sink.wait_ready(0.3) >= 0.3
        assert not sink.ready
        assert sink.wait_ready(30.0, stop=lambda: True) < 0.3
    finally:
        sink.close()
    assert sink.wait_ready(30.0) < 0.1  # closed: nothing to wait for


def test_readiness_is_not_awaited_when_it_cannot_be_seen():
    port = _closed_port()
    plain = KafkaSink({"bootstrap.servers": f"127.0.0.1:{port}"}, "t")
    sinks = [plain] + [
        KafkaSink({"bootstrap.servers": f"127.0.0.1:{port}", "enable.idempotence": idem,
                   "statistics.interval.ms": interval}, "t")
        for idem, interval in ((True, 0), ("TRUE", 60_000))
    ]  # fmt: skip
    waiting = KafkaSink({"bootstrap.servers": f"127.0.0.1:{port}", "enable.idempotence": "1"}, "t")
    try:
        for sink in sinks:
            assert sink.ready
            assert sink.wait_ready(30.0) < 0.1
        assert not waiting.ready  # "1" means true to librdkafka too
    finally:
        for sink in [*sinks, waiting]:
            sink.close()


def test_booleans_are_read_as_librdkafka_reads_them():
    assert [conf_true(v) for v in (True, "true", "TRUE", "t", "1", 1)] == [True] * 6
    assert [conf_true(v) for v in (False, "false", "f", "0", 0, "yes")] == [False] * 6
    for value in (True, "1"):
        with pytest.raises(ValueError, match="delivery.report.only.error=true"):
            KafkaSink({"bootstrap.servers": "127.0.0.1:1", "delivery.report.only.error": value},
                      "t")  # fmt: skip
