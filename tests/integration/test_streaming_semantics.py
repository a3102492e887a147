"""Late, duplicate and out-of-order events through the real broker, in two rounds.

Round 1 sets the watermark; round 2 brings events later than it (dropped), late
but within it (kept), resent duplicates (dropped) and a threshold breach and its
recovery. Gold must equal what plain Python computes from the kept events.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable

from common.contract import format_time
from common.fleet import build_fleet
from infra.broker import ensure_topic
from processor.detector import alert_id
from processor.metrics import MetricsListener
from processor.pipeline import Tables, run_available_now
from processor.settings import ProcessorSettings

pytestmark = pytest.mark.integration

TOPIC = "semantics"
FLEET, SEED = 6, 3  # power_meter, vibration x3, air_quality, thermostat
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def event(device: str, seq: int, at: timedelta, temp: float = 20.0, eid: str | None = None) -> dict:
    return {
        "event_id": eid or f"{device}-{seq}", "device_id": device, "seq": seq,
        "event_time": format_time(T0 + at), "schema_version": 1, "status": "online",
        "temperature_c": temp,
    }  # fmt: skip


def send(bootstrap: str, events: list[dict]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for e in events:
        p.produce(TOPIC, json.dumps(e).encode(), e["device_id"].encode())
    assert p.flush(30) == 0


def test_watermark_dedup_and_ordering_semantics(spark, kafka_broker, lake_root):
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=2)
    fleet = build_fleet(FLEET, SEED)
    thermo = next(d.device_id for d in fleet if d.device_type == "thermostat")
    devices = [d.device_id for d in fleet if d.device_type != "power_meter"]
    rng = random.Random(1)

    # Round 1: every 10 s for 5 minutes, sent shuffled (out of order), 3 resent.
    round1 = [event(d, i + 1, timedelta(seconds=10 * i)) for d in devices for i in range(31)]
    rng.shuffle(round1)
    resent1 = [dict(e) for e in round1[:3]]
    send(kafka_broker.plaintext, round1 + resent1)
    settings = ProcessorSettings(
        trigger="available_now", fleet_size=FLEET, seed=SEED, watermark="1 minute",
        kafka={"bootstrap_servers": kafka_broker.plaintext, "topic": TOPIC},
        lake={"root": str(lake_root / "semantics")},
    )  # fmt: skip
    listener = MetricsListener(spark, Tables.under(settings.lake).pipeline_metrics, flush_s=3600)
    spark.streams.addListener(listener)
    run_available_now(spark, settings)
    # Max event time is 5:00, so the watermark is now 4:00.

    d0 = devices[0]
    too_late = event(d0, 100, timedelta(minutes=2), eid="too-late")
    late_ok = event(d0, 101, timedelta(minutes=4, seconds=30), eid="late-ok")
    old_dup = next(
        e
        for e in round1
        if e["device_id"] == d0 and e["event_time"] == format_time(T0 + timedelta(minutes=1))
    )
    recent_dup = next(
        e
        for e in round1
        if e["device_id"] == d0
        and e["event_time"] == format_time(T0 + timedelta(minutes=4, seconds=50))
    )
    spike = event(thermo, 32, timedelta(minutes=5, seconds=10), temp=35.0)
    recovered = event(thermo, 33, timedelta(minutes=5, seconds=40), temp=21.0)
    round2 = [too_late, late_ok, dict(old_dup), dict(recent_dup), spike, recovered]
    round2 += [event(d, 32, timedelta(minutes=5, seconds=20)) for d in devices if d != thermo]
    send(kafka_broker.plaintext, round2)
    run_available_now(spark, settings)

    kept = {e["event_id"]: e for e in round1}
    kept |= {e["event_id"]: e for e in round2 if e["event_id"] not in ("too-late",)}
    tables = Tables.under(settings.lake)

    silver_ids = (
        DeltaTable(tables.silver)
        .to_pyarrow_table(columns=["event_id"])
        .column("event_id")
        .to_pylist()
    )
    assert sorted(silver_ids) == sorted(kept)
    assert DeltaTable(tables.bronze).to_pyarrow_table(columns=["offset"]).num_rows == len(
        round1
    ) + 3 + len(round2)

    expected: dict[tuple[str, datetime], list[float]] = defaultdict(list)
    for e in kept.values():
        at = datetime.fromisoformat(e["event_time"].replace("Z", "+00:00"))
        expected[(e["device_id"], at.replace(second=0, microsecond=0))].append(e["temperature_c"])
    gold = (
        DeltaTable(tables.gold_device_1m)
        .to_pyarrow_table(
            columns=[
                "device_id",
                "window_start",
                "events",
                "temperature_c_max",
                "temperature_c_avg",
            ]
        )
        .to_pylist()
    )
    got = {
        (r["device_id"], r["window_start"]): (
            r["events"],
            r["temperature_c_max"],
            r["temperature_c_avg"],
        )
        for r in gold
    }
    want = {k: (len(v), max(v), sum(v) / len(v)) for k, v in expected.items()}
    assert got.keys() == want.keys()
    for k, (n, mx, avg) in want.items():
        assert got[k][0] == n and got[k][1] == mx and abs(got[k][2] - avg) < 1e-9, k

    listener.close()
    spark.streams.removeListener(listener)
    dropped = sum(
        r["rows_dropped_by_watermark"]
        for r in DeltaTable(tables.pipeline_metrics).to_pyarrow_table().to_pylist()
        if r["query_name"] == "silver"
    )
    assert dropped == 2  # "too-late" and the resent event from minute 1
    alerts = (
        DeltaTable(tables.alerts)
        .to_pyarrow_table(columns=["alert_id", "device_id", "kind", "value"])
        .to_pylist()
    )
    aid = alert_id(spike["event_id"], "temperature_c", "threshold_high")
    assert alerts == [
        {"alert_id": aid, "device_id": thermo, "kind": "threshold_high", "value": 35.0}
    ]
    recoveries = (
        DeltaTable(tables.alert_recoveries)
        .to_pyarrow_table(columns=["alert_id", "time_to_recover_s"])
        .to_pylist()
    )
    assert recoveries == [{"alert_id": aid, "time_to_recover_s": 30.0}]

    status = {
        r["device_id"]: r["last_seq"]
        for r in DeltaTable(tables.device_status)
        .to_pyarrow_table(columns=["device_id", "last_seq"])
        .to_pylist()
    }
    assert status[thermo] == 33
    assert status[d0] == 32  # "late-ok" (seq 101) is older than d0's reading at 5:20
