"""SIGKILL the processor three times mid-stream: nothing lost, nothing twice.

60,000 events (plus resent duplicates) go through the real broker. The processor
runs as its own process and is killed with SIGKILL (JVM included; through Spark
Connect, the server too) at random points, then restarted on the same checkpoints
(batches of at most 6,000 offsets, so that each kill lands mid-stream); a last restart
drains the topic in batches of at most 60,000.
"""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict

import pytest
from confluent_kafka import Producer
from pyspark.testing import assertDataFrameEqual

from common.fleet import build_fleet
from infra.broker import ensure_topic
from infra.jars import bundle_dir
from processor import gold
from processor.detector import DetectorConfig, detect
from processor.settings import ProcessorSettings
from producer.simulation import generate, simulated_clock
from tests.connect_fixture import start_connect_server
from tests.integration.gold_expected import background_gold
from tests.integration.proc import kill_group, processor_env, start_processor, table_rows, wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(1800),
]

TOPIC = "crash"
EVENTS, FLEET, SEED = 60_000, 100, 11
DUP_EVERY, DUP_BACK = 500, 100  # resend the event from 100 positions back, every 500 events
WATERMARK = "2 minutes"


def _produce(bootstrap: str, topic: str) -> tuple[set[tuple[int, int]], list[str]]:
    """Send the events and their resends; return the acknowledged (partition, offset)s and ids."""
    from datetime import UTC, datetime

    acked: set[tuple[int, int]] = set()
    ids: list[str] = []

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        assert err is None, err
        acked.add((msg.partition(), msg.offset()))
        ids.append(json.loads(msg.value())["event_id"])

    p = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
        "linger.ms": 20, "queue.buffering.max.messages": 500_000,
    })  # fmt: skip
    stream = generate(
        build_fleet(FLEET, SEED), SEED, simulated_clock(datetime(2026, 2, 1, tzinfo=UTC), 200.0)
    )
    sent: list[tuple[bytes, bytes]] = []
    for i in range(EVENTS):
        e = next(stream)
        item = (json.dumps(e).encode(), str(e["device_id"]).encode())
        sent.append(item)
        p.produce(topic, item[0], item[1], on_delivery=on_delivery)
        if i % DUP_EVERY == DUP_EVERY - 1:
            value, key = sent[i - DUP_BACK]
            p.produce(topic, value, key, on_delivery=on_delivery)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    return acked, ids


@pytest.mark.parametrize("mode", ["classic", "connect"])
def test_sigkill_three_times_then_exactly_once(mode, spark, kafka_broker, tmp_path):
    """Classic: the processor's JVM dies with it. Spark Connect: the server is killed too."""
    topic = f"{TOPIC}-{mode}"
    ensure_topic(kafka_broker.plaintext, topic, partitions=3)
    acked, ids = _produce(kafka_broker.plaintext, topic)
    assert len(acked) == EVENTS + EVENTS // DUP_EVERY
    lake = tmp_path / "lake"
    log = tmp_path / "processor.log"
    server = start_connect_server(tmp_path) if mode == "connect" else None
    env = processor_env(
        kafka_broker.plaintext, topic, lake, bundle_dir("spark"),
        IOT_PROCESSOR_FLEET_SIZE=str(FLEET), IOT_PROCESSOR_SEED=str(SEED),
        IOT_PROCESSOR_WATERMARK=WATERMARK, IOT_PROCESSOR_TRIGGER_INTERVAL="2 seconds",
        IOT_PROCESSOR_MAX_OFFSETS_PER_TRIGGER="6000",
        **({"IOT_PROCESSOR_REMOTE": server.url} if server else {}),
    )  # fmt: skip
    bronze, silver = lake / "bronze" / "events", lake / "silver" / "events"
    rng = random.Random(2026)
    seen = 0
    for kill in range(3):
        proc = start_processor(env, log)
        try:
            wait_for(
                lambda s=seen: len(table_rows(bronze, ["offset"])) > s,
                300,
                f"progress before kill {kill + 1}",
                proc,
                log,
            )
            time.sleep(rng.uniform(0.0, 8.0))
        finally:
            kill_group(proc)  # SIGKILL, the JVM included
            if server is not None:  # the server, its queries and Python workers
                server.kill()
                server = start_connect_server(tmp_path, server.port)
        seen = len(table_rows(bronze, ["offset"]))
        assert seen < len(acked), "the processor finished before it could be killed; kill sooner"
    # The last run drains the rest in larger batches: the rate limit of a restarted query
    # may change, and the batch a kill left planned runs again as it was planned.
    drain = {
        "IOT_PROCESSOR_TRIGGER": "available_now",
        "IOT_PROCESSOR_MAX_OFFSETS_PER_TRIGGER": "60000",
    }
    proc = start_processor(env | drain, log)
    try:
        assert proc.wait(1800) == 0, log.read_text()[-3000:]
    finally:
        kill_group(proc)
        if server is not None:
            server.stop()

    bronze_rows = table_rows(bronze, ["partition", "offset"])
    assert len(bronze_rows) == len(acked)
    assert {(r["partition"], r["offset"]) for r in bronze_rows} == acked

    silver_ids = [r["event_id"] for r in table_rows(silver, ["event_id"])]
    assert len(silver_ids) == EVENTS
    assert set(silver_ids) == set(ids)

    silver_df = spark.read.format("delta").load(str(silver))
    minutes = spark.read.format("delta").load(str(lake / "gold" / "device_1m"))
    recomputed = gold.device_minute_aggregates(silver_df, WATERMARK)
    assertDataFrameEqual(minutes, recomputed.select(*minutes.columns), rtol=1e-9)
    # The background queries' gold, each against its recomputation over all of silver.
    for table, batch in background_gold(silver_df, ProcessorSettings()).items():
        stored = spark.read.format("delta").load(str(lake / table))
        assertDataFrameEqual(stored.select(*batch.columns), batch, rtol=1e-9)

    # Alerts: the detector over each device's silver rows in order, independently of Spark.
    by_device: dict[str, list[dict]] = defaultdict(list)
    for row in silver_df.orderBy("device_id", "event_time", "seq").toLocalIterator():
        by_device[row["device_id"]].append(row.asDict())
    expected_alerts = {
        t["alert_id"]
        for rows in by_device.values()
        for t in detect(rows, {}, DetectorConfig())
        if t["transition"] == "raised"
    }
    alert_ids = [r["alert_id"] for r in table_rows(lake / "gold" / "alerts", ["alert_id"])]
    assert len(alert_ids) == len(set(alert_ids))
    assert set(alert_ids) == expected_alerts
