"""The producer against the real local broker: the manifest is exactly what the topic holds.

Three ways in: PLAINTEXT; SASL_SSL + PLAIN with the settings a user gives for Azure
Event Hubs; SASL_SSL + OAUTHBEARER with a test credential object handing out
unsigned JWTs (the broker's listener runs Kafka's unsecured validator).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer

from infra.broker import BrokerInfo, ensure_topic
from producer.__main__ import main
from tests.manifests import read_manifest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
START = "2026-01-01T00:00:00Z"


def _b64url(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


class UnsignedCredential:
    """Stands in for an azure-identity credential: unsigned JWTs, and a log of scopes."""

    def __init__(self) -> None:
        self.scopes: list[str] = []

    def get_token(self, *scopes: str, **_kwargs: Any) -> SimpleNamespace:
        self.scopes += scopes
        now = int(time.time())
        claims = {"sub": "iot-pulse-producer-test", "iat": now, "exp": now + 3600}
        token = f"{_b64url({'alg': 'none'})}.{_b64url(claims)}."
        return SimpleNamespace(token=token, expires_on=now + 3600)


def _env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    for key in list(os.environ):
        if key.startswith("IOT_"):
            monkeypatch.delenv(key)
    for key, value in values.items():
        monkeypatch.setenv(key, value)


def _consume(config: dict[str, Any], topic: str, expected: int) -> list[tuple[bytes, bytes]]:
    consumer = Consumer(
        config | {"group.id": f"t-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    out: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(5000, 0.5):
                assert msg.error() is None, msg.error()
                out.append((msg.key(), msg.value()))
        extra = consumer.consume(100, 1.0)
        assert not [m for m in extra if m.error() is None], "more messages than acknowledged"
    finally:
        consumer.close()
    return out


def assert_manifest_matches_topic(manifest: Path, held: list[tuple[bytes, bytes]]) -> None:
    """Every acknowledged message is in the topic, and nothing else is."""
    truth = read_manifest(manifest)
    faults = truth["faults"]
    assert (
        len(held)
        == truth["header"]["totals"]["messages_sent"] - truth["header"]["totals"]["messages_failed"]
    )
    malformed = [f for f in faults if "expected_reason" in f]
    malformed_ids = {f["event_id"] for f in malformed}
    per_device: dict[str, list[tuple[int, str]]] = {}
    copies: Counter[str] = Counter()
    bad = 0
    for key, value in held:
        try:
            event = orjson.loads(value)
        except orjson.JSONDecodeError:
            bad += 1
            continue
        if not {"event_id", "device_id", "seq"} <= set(event) or event["event_id"] in malformed_ids:
            bad += 1
            continue
        assert key.decode() == event["device_id"]
        copies[event["event_id"]] += 1
        if copies[event["event_id"]] == 1:
            per_device.setdefault(event["device_id"], []).append((event["seq"], event["event_id"]))
    assert bad == sum(1 for f in malformed if f["delivered"])
    for device_id, dev in truth["devices"].items():
        # One device = one key = one partition: the topic keeps the send order.
        assert per_device.get(device_id, []) == list(
            zip(dev["seqs"], dev["event_ids"], strict=True)
        )
    dups = {f["event_id"]: f["copies_acked"] for f in faults if f["kind"] == "duplicate"}
    for eid, n in copies.items():
        assert n == dups.get(eid, 1)


def test_plaintext_chaos_run_matches_the_manifest(kafka_broker: BrokerInfo, tmp_path, monkeypatch):
    topic = f"producer-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_broker.plaintext, topic, partitions=3)
    _env(monkeypatch, IOT_KAFKA_BOOTSTRAP_SERVERS=kafka_broker.plaintext, IOT_KAFKA_TOPIC=topic)
    manifest, report = tmp_path / "m.jsonl", tmp_path / "r.json"
    rc = main([
        "--count", "5000", "--fleet-size", "25", "--seed", "8", "--rate", "0",
        "--start-time", START, "--clock-rate", "100", "--scenario", "chaos",
        "--oversized-rate", "0.002", "--late-delay", "uniform:1:20",
        "--manifest-path", str(manifest), "--report-path", str(report),
    ])  # fmt: skip
    rep = json.loads(report.read_text())
    assert rc == 0, rep
    oversized = [f for f in read_manifest(manifest)["faults"] if f["kind"] == "oversized"]
    assert oversized and all(
        f["delivered"] is False and f["error"] == "MSG_SIZE_TOO_LARGE" for f in oversized
    )
    assert rep["errors"] == rep["expected_errors"] == {"MSG_SIZE_TOO_LARGE": len(oversized)}
    assert rep["acked"] == rep["sent"] - len(oversized)
    assert set(rep["ack_latency_ms"]) == {"p50", "p95", "p99"}
    held = _consume({"bootstrap.servers": kafka_broker.plaintext}, topic, rep["acked"])
    assert len(held) == rep["acked"]
    assert_manifest_matches_topic(manifest, held)


def test_event_hubs_connection_string_settings(kafka_broker: BrokerInfo, tmp_path, monkeypatch):
    topic = f"eh-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_broker.plaintext, topic, partitions=3)
    secret = kafka_broker.connection_string()
    _env(
        monkeypatch,
        IOT_KAFKA_AUTH="connection_string",
        IOT_KAFKA_CONNECTION_STRING=secret,
        IOT_KAFKA_BOOTSTRAP_SERVERS=kafka_broker.sasl_ssl,
        IOT_KAFKA_SSL_CA_LOCATION=str(kafka_broker.ca_file),
        IOT_KAFKA_TOPIC=topic,
        IOT_PRODUCER_THROUGHPUT_UNITS="1",
    )
    manifest, report = tmp_path / "m.jsonl", tmp_path / "r.json"
    rc = main([
        "--count", "3000", "--fleet-size", "10", "--rate", "0", "--scenario", "realistic",
        "--manifest-path", str(manifest), "--report-path", str(report),
    ])  # fmt: skip
    rep = json.loads(report.read_text())
    assert rc == 0, rep
    assert rep["warnings"][0].startswith("the rate is unlimited (--rate 0) but 1 throughput unit")
    assert secret not in report.read_text() and secret not in manifest.read_text()
    held = _consume(
        {
            "bootstrap.servers": kafka_broker.sasl_ssl,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "$ConnectionString",
            "sasl.password": secret,
            "ssl.ca.location": str(kafka_broker.ca_file),
        },
        topic,
        rep["acked"],
    )
    assert_manifest_matches_topic(manifest, held)


def test_entra_oauthbearer_with_a_test_credential(kafka_broker: BrokerInfo, tmp_path, monkeypatch):
    topic = f"entra-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_broker.plaintext, topic, partitions=3)
    _env(
        monkeypatch,
        IOT_KAFKA_AUTH="entra",
        IOT_KAFKA_BOOTSTRAP_SERVERS=kafka_broker.sasl_ssl,
        IOT_KAFKA_SSL_CA_LOCATION=str(kafka_broker.ca_file),
        IOT_KAFKA_TOPIC=topic,
    )
    credential = UnsignedCredential()
    manifest = tmp_path / "m.jsonl"
    rc = main(
        ["--count", "1000", "--fleet-size", "5", "--rate", "0", "--manifest-path", str(manifest)],
        credential=credential,
    )
    assert rc == 0
    assert set(credential.scopes) == {"https://localhost/.default"}
    held = _consume(
        {
            "bootstrap.servers": kafka_broker.sasl_ssl,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": lambda _cfg: (
                (t := UnsignedCredential().get_token("x")).token,
                t.expires_on,
            ),
            "ssl.ca.location": str(kafka_broker.ca_file),
        },
        topic,
        1000,
    )
    assert len(held) == 1000
    assert_manifest_matches_topic(manifest, held)


def make_credential() -> UnsignedCredential:
    """Factory named by ``IOT_PRODUCER_ENTRA_CREDENTIAL`` in the subprocess test below."""
    return UnsignedCredential()


def test_entra_credential_by_name_with_two_workers(kafka_broker: BrokerInfo, tmp_path):
    topic = f"entra-w-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_broker.plaintext, topic, partitions=3)
    manifest = tmp_path / "m.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")} | {
        "IOT_KAFKA_AUTH": "entra",
        "IOT_KAFKA_BOOTSTRAP_SERVERS": kafka_broker.sasl_ssl,
        "IOT_KAFKA_SSL_CA_LOCATION": str(kafka_broker.ca_file),
        "IOT_KAFKA_TOPIC": topic,
        "IOT_PRODUCER_ENTRA_CREDENTIAL": "tests.integration.test_producer_kafka:make_credential",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "producer", "--count", "2000", "--workers", "2", "--rate", "0",
         "--fleet-size", "8", "--scenario", "realistic", "--manifest-path", str(manifest)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    truth = read_manifest(manifest)
    assert sorted(truth["devices"]) == [f"dev-{i:05d}" for i in range(8)]
    totals = truth["header"]["totals"]
    expected = totals["messages_sent"] - totals["messages_failed"]
    held = _consume({"bootstrap.servers": kafka_broker.plaintext}, topic, expected)
    assert_manifest_matches_topic(manifest, held)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_flushes_two_workers_and_the_manifest_matches_the_topic(
    kafka_broker: BrokerInfo, tmp_path, sig
):
    """SIGTERM to the producer, or Ctrl-C (SIGINT to its whole process group) mid-run."""
    topic = f"producer-stop-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_broker.plaintext, topic, partitions=3)
    manifest, report = tmp_path / "m.jsonl", tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")} | {
        "IOT_KAFKA_BOOTSTRAP_SERVERS": kafka_broker.plaintext, "IOT_KAFKA_TOPIC": topic,
    }  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "producer", "--workers", "2", "--rate", "3000",
         "--scenario", "realistic", "--fleet-size", "30", "--seed", "4", "--start-time", START,
         "--manifest-path", str(manifest), "--report-path", str(report)],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    # The live report says when the workers have sent enough (a busy machine starts them late).
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        if report.exists() and json.loads(report.read_text())["acked"] > 3000:
            break
        time.sleep(0.2)
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    rep = json.loads(report.read_text())
    assert rep["stopped_by"] == sig.name
    assert f"stopped by {sig.name}" in err
    assert rep["acked"] > 3000 and rep["undelivered"] == 0
    lat = rep["ack_latency_ms"]
    assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"] < 5000  # a local broker: milliseconds
    held = _consume({"bootstrap.servers": kafka_broker.plaintext}, topic, rep["acked"])
    assert len(held) == rep["acked"]
    assert_manifest_matches_topic(manifest, held)


def _client_quota(spark: Any, bootstrap: str, client_id: str, byte_rate: float | None) -> None:
    """Set (or, with None, remove) a broker quota on a client id, with Kafka's Java admin
    client (the Spark JVM has it; confluent-kafka has no client-quota API)."""
    jvm = spark._jvm
    props = jvm.java.util.Properties()
    props.put("bootstrap.servers", bootstrap)
    admin = jvm.org.apache.kafka.clients.admin.Admin.create(props)
    try:
        quota = jvm.org.apache.kafka.common.quota
        entity = quota.ClientQuotaEntity(jvm.java.util.Map.of("client-id", client_id))
        ops = jvm.java.util.ArrayList()
        ops.add(getattr(quota, "ClientQuotaAlteration$Op")("producer_byte_rate", byte_rate))
        alterations = jvm.java.util.ArrayList()
        alterations.add(quota.ClientQuotaAlteration(entity, ops))
        admin.alterClientQuotas(alterations).all().get()
    finally:
        admin.close()


def test_broker_throttling_is_counted_in_the_report(
    spark, kafka_broker: BrokerInfo, tmp_path, monkeypatch, capsys
):
    topic = f"producer-throttle-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_broker.plaintext, topic, partitions=1)
    _env(monkeypatch, IOT_KAFKA_BOOTSTRAP_SERVERS=kafka_broker.plaintext, IOT_KAFKA_TOPIC=topic)
    report = tmp_path / "r.json"
    # About 2.5 MB in 3 s against a quota of 100 kB/s on the producer's client id. The broker
    # measures a rate over at least 10 s, so the burst must exceed 1 MB to be throttled;
    # delivering the rest at the quota takes about 20 s more (a longer flush timeout).
    _client_quota(spark, kafka_broker.plaintext, "iot-pulse", 100_000.0)
    try:
        time.sleep(1.0)  # the broker applies the quota from its metadata
        rc = main([
            "--rate", "3000", "--duration-s", "3", "--fleet-size", "10", "--seed", "2",
            "--start-time", START, "--report-path", str(report), "--flush-timeout-s", "120",
        ])  # fmt: skip
    finally:
        _client_quota(spark, kafka_broker.plaintext, "iot-pulse", None)
    rep = json.loads(report.read_text())
    assert rc == 0, rep
    assert rep["throttle_events"] > 0 and rep["throttle_ms_total"] > 0
    assert f"throttled {rep['throttle_events']:,} times" in capsys.readouterr().err
    held = _consume({"bootstrap.servers": kafka_broker.plaintext}, topic, rep["acked"])
    assert len(held) == rep["acked"] == rep["sent"]


def test_replay_to_kafka_sends_each_line_verbatim_keyed_by_device(
    kafka_broker: BrokerInfo, tmp_path, monkeypatch
):
    topic = f"producer-replay-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_broker.plaintext, topic, partitions=1)
    _env(monkeypatch, IOT_KAFKA_BOOTSTRAP_SERVERS=kafka_broker.plaintext, IOT_KAFKA_TOPIC=topic)
    recorded = [
        b'{"event_id":"r1","device_id":"dev-00003","seq":1,"temperature_c":21.50}',
        b"not json at all",
        b'{"event_id":"r2","device_id":"dev-00007","seq":4}',
    ]
    src = tmp_path / "rec.jsonl"
    src.write_bytes(b"\n".join(recorded) + b"\n")
    report = tmp_path / "r.json"
    assert main(["--replay", str(src), "--rate", "0", "--report-path", str(report)]) == 0
    assert json.loads(report.read_text())["acked"] == 3
    held = _consume({"bootstrap.servers": kafka_broker.plaintext}, topic, 3)
    assert held == [(b"dev-00003", recorded[0]), (b"", recorded[1]), (b"dev-00007", recorded[2])]


def test_the_sink_delivers_each_payload_intact_in_order_per_key(kafka_broker: BrokerInfo):
    """40 uneven batches of a chaos stream (resends, held-back and malformed messages)."""
    from producer.launch import make_source
    from producer.settings import ProducerSettings
    from producer.sinks import KafkaSink

    topic = f"sink-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_broker.plaintext, topic, partitions=3)
    settings = ProducerSettings(
        _env_file=None, scenario="chaos", fleet_size=25, seed=3, start_time=START,
        clock_rate=100.0, oversized_rate=0.0,
    )  # fmt: skip
    source = make_source(settings)
    sink = KafkaSink(
        {"bootstrap.servers": kafka_broker.plaintext, "acks": "all", "enable.idempotence": True,
         "linger.ms": 5},
        topic, latency_sample_every=7,
    )  # fmt: skip
    sent = []
    for n in [250, 1, 37] * 13 + [500]:
        batch = source.next_batch(n)
        sent += batch
        sink.send_batch(batch)
        sink.poll()
    assert sink.flush(30) == 0
    sink.close()
    assert sink.acked == len(sent) and not sink.errors and not sink.failures
    assert sink.latency.count == len(sent) // 7
    assert 0 < sink.latency.max_s < 30
    held = _consume({"bootstrap.servers": kafka_broker.plaintext}, topic, len(sent))
    assert Counter(held) == Counter((m[0], m[1]) for m in sent)
    for key in {m[0] for m in sent}:  # one key, one partition: send order kept
        assert [v for k, v in held if k == key] == [m[1] for m in sent if m[0] == key]


def test_the_sink_is_ready_once_the_broker_gives_it_a_producer_id(kafka_broker: BrokerInfo):
    from producer.sinks import KafkaSink

    topic = f"ready-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_broker.plaintext, topic, partitions=1)
    sink = KafkaSink(
        {"bootstrap.servers": kafka_broker.plaintext, "acks": "all", "enable.idempotence": True},
        topic,
    )
    try:
        assert not sink.ready  # librdkafka asks for the id on a timer, after connecting
        assert sink.wait_ready(20.0) < 20.0
        assert sink.ready
        sink.send_batch([(b"k", b"%d" % i, 0, i, "", None) for i in range(5)])
        assert sink.flush(20) == 0
        assert sink.acked == 5 and not sink.errors
    finally:
        sink.close()
    assert _consume({"bootstrap.servers": kafka_broker.plaintext}, topic, 5) == [
        (b"k", b"%d" % i) for i in range(5)
    ]
