"""The Kafka sink's librdkafka transport, without a broker: config, failures, batch slots."""

from __future__ import annotations

import socket
from collections import Counter

import pytest

from producer import native
from producer.messages import MessageBatch
from producer.native import conf_value
from producer.settings import ProducerSettings
from producer.sinks import KafkaSink, SinkStalledError
from producer.sources import SimulationSource


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def _source(scenario: str = "chaos", **rates: float) -> SimulationSource:
    from producer.__main__ import make_source

    settings = ProducerSettings(
        _env_file=None, scenario=scenario, fleet_size=30, seed=11,
        start_time="2026-01-01T00:00:00Z", clock_rate=50.0, **rates,
    )  # fmt: skip
    source = make_source(settings)
    assert isinstance(source, SimulationSource)
    return source


def test_config_values_are_librdkafka_text():
    assert [conf_value(v) for v in (True, False, 20, "all", 1.5)] == [
        "true", "false", "20", "all", "1.5",
    ]  # fmt: skip


def test_a_refused_property_is_named_without_its_value():
    with pytest.raises(ValueError) as info:
        KafkaSink({"bootstrap.servers": "127.0.0.1:1", "no.such.property": "s3cret-value"}, "t")
    assert "'no.such.property'" in str(info.value)
    assert "s3cret-value" not in str(info.value)
    with pytest.raises(ValueError, match="'acks' cannot be a callable"):
        KafkaSink({"acks": lambda: "all"}, "t")


def test_undelivered_messages_come_back_with_their_own_payload_and_tag():
    """Rows and single messages of a chaos batch, purged unsent: each failure is its message."""
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


def test_lines_are_rows_keyed_by_their_own_key():
    batch = MessageBatch.of_lines([b'{"a":1}', b"", b"x y"], [b"k1", b"k2", b"k1"])
    assert list(batch) == [
        (b"k1", b'{"a":1}', -1, 0, "", "raw"),
        (b"k2", b"", -1, 0, "", "raw"),
        (b"k1", b"x y", -1, 0, "", "raw"),
    ]
    assert batch.values() == [b'{"a":1}', b"", b"x y"]


def test_a_batch_slot_is_reused_only_once_its_messages_are_reported():
    """Two slots, nothing delivered: the third batch waits for a slot, then gives up."""
    sink = KafkaSink(
        {"bootstrap.servers": f"127.0.0.1:{_closed_port()}", "log_level": 0},
        "t", slots=2, stall_timeout_s=0.5,
    )  # fmt: skip
    source = _source("clean")
    sink.send_batch(source.next_batch(10))
    sink.send_batch(source.next_batch(10))
    third = list(source.next_batch(10))
    with pytest.raises(SinkStalledError, match="2 batches waited"):
        sink.send_batch(third)
    assert sink.errors == {"_QUEUE_FULL": 10}  # never queued: reported as failed at once
    assert [(f[0], f[2]) for f in sink.failures] == [(m[1], "_QUEUE_FULL") for m in third]
    assert sink.abandon() == 20
    assert sink.errors == {"_QUEUE_FULL": 10, "_PURGE_QUEUE": 20}
    sink.send_batch(source.next_batch(10))  # both slots are free again
    assert sink.abandon() == 10
    sink.close()
    with pytest.raises(RuntimeError, match="the Kafka sink is closed"):
        sink.send_batch(source.next_batch(1))


def test_failures_beyond_the_record_are_counted_not_lost():
    shared = native.Shared(slots=2, fail_cap=2, sample_cap=4, sample_every=1)
    shared.failures[:] = [[0, 7, -192], [1, 3, -192]]
    shared.array[native.N_FAILED] = 5  # the callback saw 5 failures, kept 2
    rows, unrecorded = shared.take_failures()
    assert rows.tolist() == [[0, 7, -192], [1, 3, -192]] and unrecorded == 3
    assert shared.take_failures()[0].tolist() == [] and shared.array[native.N_FAILED] == 0


def test_delivery_reports_for_errors_only_are_refused():
    with pytest.raises(ValueError, match="counts every report"):
        KafkaSink({"bootstrap.servers": "127.0.0.1:1", "delivery.report.only.error": True}, "t")


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
    assert sink.wait_ready(30.0) == 0.0  # closed: nothing to wait for


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
            assert sink.wait_ready(30.0) == 0.0
        assert not waiting.ready  # "1" means true to librdkafka too
    finally:
        for sink in [*sinks, waiting]:
            sink.close()


def test_addresses_of_many_payloads_are_where_their_bytes_are():
    import ctypes

    from producer.sinks import _address, _addresses

    with pytest.raises(TypeError, match="must be bytes, not str"):
        _addresses([b"ok", "text"])
    items = [b"", b"x", b"{}" * 300, bytes(range(256)), None, "-".join(["dev", "1"]).encode()]
    got = _addresses(items).tolist()
    assert got == [0 if x is None else _address(x) for x in items]
    assert [ctypes.string_at(a, len(x)) for a, x in zip(got, items, strict=True) if x] == [
        x for x in items if x
    ]


def test_booleans_are_read_as_librdkafka_reads_them():
    from producer.native import conf_true

    assert [conf_true(v) for v in (True, "true", "TRUE", "t", "1", 1)] == [True] * 6
    assert [conf_true(v) for v in (False, "false", "f", "0", 0, "yes")] == [False] * 6
    with pytest.raises(ValueError, match="delivery.report.only.error=true"):
        KafkaSink({"bootstrap.servers": "127.0.0.1:1", "delivery.report.only.error": "1"}, "t")
