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

from common.contract import format_time, parse_time
from common.fleet import build_fleet
from common.lake import Query, Table
from infra.broker import ensure_topic
from processor.detector import DetectorConfig, alert_id, detect
from processor.metrics import MetricsListener
from processor.pipeline import run_available_now
from processor.settings import ProcessorSettings
from tests.delta_log import commits

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


# Every query but the alert-topic ones: this test's broker has no alerts topic.
MEDALLION = ",".join(q for q in Query if q not in (Query.ALERTS_RT, Query.REALTIME_ALERTS))


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
        queries=MEDALLION,  # the alerts topic is not this test's
        kafka={"bootstrap_servers": kafka_broker.plaintext, "topic": TOPIC},
        lake={"root": str(lake_root / "semantics")},
    )  # fmt: skip
    listener = MetricsListener(spark, settings.lake.table(Table.OPS_PIPELINE_METRICS), flush_s=3600)
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
    at = settings.lake.table

    silver_ids = (
        DeltaTable(at(Table.SILVER_EVENTS))
        .to_pyarrow_table(columns=["event_id"])
        .column("event_id")
        .to_pylist()
    )
    assert sorted(silver_ids) == sorted(kept)
    assert DeltaTable(at(Table.BRONZE_EVENTS)).to_pyarrow_table(columns=["offset"]).num_rows == len(
        round1
    ) + 3 + len(round2)

    expected: dict[tuple[str, datetime], list[float]] = defaultdict(list)
    for e in kept.values():
        when = datetime.fromisoformat(e["event_time"].replace("Z", "+00:00"))
        expected[(e["device_id"], when.replace(second=0, microsecond=0))].append(e["temperature_c"])
    gold = (
        DeltaTable(at(Table.GOLD_DEVICE_1M))
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

    assert listener.drain(30)  # every batch's progress is queued
    spark.streams.removeListener(listener)
    listener.close()
    dropped = sum(
        r["rows_dropped_by_watermark"]
        for r in DeltaTable(at(Table.OPS_PIPELINE_METRICS)).to_pyarrow_table().to_pylist()
        if r["query_name"] == "silver"
    )
    assert dropped == 2  # "too-late" and the resent event from minute 1
    alerts = (
        DeltaTable(at(Table.GOLD_ALERTS))
        .to_pyarrow_table(columns=["alert_id", "device_id", "kind", "value"])
        .to_pylist()
    )
    aid = alert_id(spike["event_id"], "temperature_c", "threshold_high")
    assert alerts == [
        {"alert_id": aid, "device_id": thermo, "kind": "threshold_high", "value": 35.0}
    ]
    recoveries = (
        DeltaTable(at(Table.GOLD_ALERT_RECOVERIES))
        .to_pyarrow_table(columns=["alert_id", "time_to_recover_s"])
        .to_pylist()
    )
    assert recoveries == [{"alert_id": aid, "time_to_recover_s": 30.0}]

    status = {
        r["device_id"]: r["last_seq"]
        for r in DeltaTable(at(Table.GOLD_DEVICE_STATUS))
        .to_pyarrow_table(columns=["device_id", "last_seq"])
        .to_pylist()
    }
    assert status[thermo] == 33
    assert status[d0] == 32  # "late-ok" (seq 101) is older than d0's reading at 5:20

    # Round 3: the thermostat breaches again at 6:00 and stays high until 30:00 (past the
    # 10-minute recovery window), then breaches and recovers at 31:00-31:30. That moves
    # both join inputs' watermarks past 6:00 + 10 min: the 6:00 alert comes out of the
    # stream-stream left outer join unrecovered. It also closes every device's first
    # connectivity session.
    round3 = [
        event(thermo, 34, timedelta(minutes=6), temp=35.0),
        event(thermo, 35, timedelta(minutes=30), temp=21.0),
        event(thermo, 36, timedelta(minutes=31), temp=35.0),
        event(thermo, 37, timedelta(minutes=31, seconds=30), temp=21.0),
    ]
    send(kafka_broker.plaintext, round3)
    run_available_now(spark, settings)
    kept |= {e["event_id"]: e for e in round3}
    _check_gold_beyond_device_1m(settings, fleet, thermo, kept)
    # Every gold append is Spark's, and records its writer's micro-batch in Delta.
    gold = (
        at(Table.GOLD_ALERTS),
        at(Table.GOLD_ALERT_CLEARS),
        at(Table.GOLD_ALERT_RECOVERIES),
        at(Table.GOLD_DEVICE_SESSIONS),
    )
    for path in gold:
        # Version 0 is the empty table ensure_table created.
        appends = [c for c in commits(path) if c.version > 0]
        assert appends and all(len(c.txns) == 1 for c in appends), path
        assert {c.engine for c in appends} == {"Apache-Spark/4.2.0"}, path


def _at(e: dict) -> datetime:
    return parse_time(e["event_time"])


def _check_gold_beyond_device_1m(
    settings: ProcessorSettings, fleet: list, thermo: str, kept: dict[str, dict]
) -> None:
    """Alerts and recoveries, sliding windows, sessions and the summary, from the kept events."""
    at = settings.lake.table
    profile = {d.device_id: d for d in fleet}
    watermark = max(_at(e) for e in kept.values()) - timedelta(minutes=1)

    def read(path: str, columns: list[str]) -> list[dict]:
        return DeltaTable(path).to_pyarrow_table(columns=columns).to_pylist()

    # Alerts: the detector over the thermostat's silver rows in event-time order (plain Python).
    silver_rows = [r for r in read(at(Table.SILVER_EVENTS), None) if r["device_id"] == thermo]
    silver_rows.sort(key=lambda r: (r["event_time"], r["seq"]))
    transitions = detect(silver_rows, {}, DetectorConfig())
    raised = [t for t in transitions if t["transition"] == "raised"]
    cleared = {t["alert_id"]: t["event_time"] for t in transitions if t["transition"] == "cleared"}
    assert sorted(r["alert_id"] for r in read(at(Table.GOLD_ALERTS), ["alert_id"])) == sorted(
        t["alert_id"] for t in raised
    )
    within = timedelta(minutes=10)
    # The join's watermark is the lower of its inputs' (alert times, clearing times).
    join_watermark = min(max(t["event_time"] for t in raised), max(cleared.values())) - timedelta(
        minutes=1
    )
    want_recoveries = {}
    for t in raised:
        raised_at, back = t["event_time"], cleared.get(t["alert_id"])
        if back is not None and raised_at <= back <= raised_at + within:
            want_recoveries[t["alert_id"]] = (back - raised_at).total_seconds()
        elif raised_at + within < join_watermark:  # emitted unrecovered once it passes
            want_recoveries[t["alert_id"]] = None
    got_recoveries = {
        r["alert_id"]: r["time_to_recover_s"]
        for r in read(at(Table.GOLD_ALERT_RECOVERIES), ["alert_id", "time_to_recover_s"])
    }
    assert got_recoveries == want_recoveries
    assert None in want_recoveries.values()  # the 6:00 alert, never recovered in time
    assert 30.0 in want_recoveries.values()

    # Sliding windows (10 minutes every 5, rolled up from device_1m): each event in two.
    five = timedelta(minutes=5)
    sliding: dict[tuple, list[dict]] = defaultdict(list)
    for e in kept.values():
        d = profile[e["device_id"]]
        first = T0 + five * ((_at(e) - T0) // five)
        for start in (first - five, first):
            sliding[(d.site, d.device_type, start)].append(e)
    got_sliding = {
        (r["site"], r["device_type"], r["window_start"]): (
            r["events"], r["devices"], r["temperature_c_avg"]
        )
        for r in read(
            at(Table.GOLD_SITE_TYPE_WINDOWS),
            ["site", "device_type", "window_start", "events", "devices", "temperature_c_avg"],
        )
    }  # fmt: skip
    assert got_sliding.keys() == sliding.keys()
    for key, events in sliding.items():
        n, devs, avg = got_sliding[key]
        temps = [e["temperature_c"] for e in events]
        assert (n, devs) == (len(events), len({e["device_id"] for e in events})), key
        assert abs(avg - sum(temps) / len(temps)) < 1e-9, key

    # Sessions (gap 2 minutes, appended once the watermark passes their end).
    gap = timedelta(minutes=2)
    want_sessions = set()
    by_device: dict[str, list[datetime]] = defaultdict(list)
    for e in kept.values():
        by_device[e["device_id"]].append(_at(e))
    for device, times in by_device.items():
        times.sort()
        start = prev = times[0]
        count = 0
        for t in [*times, None]:
            if t is None or t - prev >= gap:
                if prev + gap <= watermark:
                    want_sessions.add((device, start, prev, count))
                if t is None:
                    break
                start, count = t, 0
            prev, count = t, count + 1
    got_sessions = {
        (r["device_id"], r["session_start"], r["session_end"], r["events"])
        for r in read(
            at(Table.GOLD_DEVICE_SESSIONS), ["device_id", "session_start", "session_end", "events"]
        )
    }
    assert got_sessions == want_sessions
    assert (thermo, T0, T0 + timedelta(minutes=6), 34) in want_sessions

    # The fleet summary (complete mode): per type, distinct devices, events, newest time.
    summary: dict[str, list[dict]] = defaultdict(list)
    for e in kept.values():
        summary[profile[e["device_id"]].device_type].append(e)
    assert {
        r["device_type"]: (r["devices"], r["events"], r["last_event_time"])
        for r in read(
            at(Table.GOLD_FLEET_SUMMARY), ["device_type", "devices", "events", "last_event_time"]
        )
    } == {
        kind: (len({e["device_id"] for e in events}), len(events), max(_at(e) for e in events))
        for kind, events in summary.items()
    }
