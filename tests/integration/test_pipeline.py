"""End to end through the real broker: producer -> Kafka -> bronze -> silver -> gold.

Both producer and processor connect with exactly the client settings a user gives
for Azure Event Hubs (SASL_SSL, PLAIN, username ``$ConnectionString``, the
connection string as the password), to the broker's local SASL_SSL listener.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable

from common.contract import METRIC_NAMES, parse_time
from common.fleet import build_fleet
from common.kafka import librdkafka_config
from common.kafka_settings import KafkaSettings
from common.lake import Table
from common.lake_settings import LakeSettings
from infra.broker import ensure_topic
from processor.pipeline import run_available_now
from processor.settings import ProcessorSettings
from producer.__main__ import main as producer_main
from producer.simulation import generate, simulated_clock
from tests.delta_log import commits
from tests.integration.proc import run_python, service_env

pytestmark = pytest.mark.integration

TOPIC = "e2e-events"
FLEET, SEED, COUNT, RATE = 12, 7, 1500, 10.0
START = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)
MALFORMED = [
    b'{"event_id": "x1", "device_id": ',
    json.dumps({"event_id": "x2", "device_id": "dev-00001", "seq": "one",
                "event_time": "2026-01-01T00:00:05.000Z", "schema_version": 1, "status": "online"}).encode(),
    json.dumps({"event_id": "x3", "device_id": "dev-99999", "seq": 1,
                "event_time": "2026-01-01T00:00:05.000Z", "schema_version": 1, "status": "online"}).encode(),
]  # fmt: skip
RESENT = 5  # the first events, sent again with the same event_id


@pytest.fixture(scope="module")
def eh_env(kafka_broker, monkeypatch_module):
    """Event Hubs-shaped settings in the environment, as a user's .env would give them."""
    monkeypatch_module.setenv("IOT_KAFKA_BOOTSTRAP_SERVERS", kafka_broker.sasl_ssl)
    monkeypatch_module.setenv("IOT_KAFKA_AUTH", "connection_string")
    monkeypatch_module.setenv("IOT_KAFKA_CONNECTION_STRING", kafka_broker.connection_string())
    monkeypatch_module.setenv("IOT_KAFKA_SSL_CA_LOCATION", str(kafka_broker.ca_file))
    monkeypatch_module.setenv("IOT_KAFKA_TOPIC", TOPIC)
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=3)
    settings = KafkaSettings()
    # Every query runs, alerts_rt too: it lands the (empty) alerts topic.
    ensure_topic(kafka_broker.plaintext, settings.alerts_topic, partitions=1)
    return settings


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def expected_gold() -> dict[tuple[str, datetime], dict[str, float]]:
    """Per (device, minute) aggregates, computed in plain Python from the same stream."""
    fleet = build_fleet(FLEET, SEED)
    events = generate(fleet, SEED, simulated_clock(START, RATE))
    acc: dict[tuple[str, datetime], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for _ in range(COUNT):
        e = next(events)
        t = parse_time(str(e["event_time"]))
        key = (str(e["device_id"]), t.replace(second=0, microsecond=0, tzinfo=None))
        acc[key]["seq"].append(float(e["seq"]))
        for m in METRIC_NAMES:
            if m in e:
                acc[key][m].append(float(e[m]))  # type: ignore[arg-type]
    out = {}
    for key, cols in acc.items():
        row: dict[str, float] = {"events": len(cols["seq"]), "last_seq": max(cols["seq"])}
        for m in METRIC_NAMES:
            vals = cols.get(m)
            row[f"{m}_min"] = min(vals) if vals else None
            row[f"{m}_avg"] = sum(vals) / len(vals) if vals else None
            row[f"{m}_max"] = max(vals) if vals else None
        out[key] = row
    return out


@pytest.mark.parametrize("mode", ["classic", "connect"])
def test_events_flow_to_gold_with_exact_aggregates(
    mode, request, kafka_broker, eh_env, lake_root, tmp_path, capsys, monkeypatch
):
    topic = f"{TOPIC}-{mode}"
    ensure_topic(kafka_broker.plaintext, topic, partitions=3)
    monkeypatch.setenv("IOT_KAFKA_TOPIC", topic)
    kafka = KafkaSettings()
    # Seeded ids: the resent copies below must carry the ids the producer sent.
    rc = producer_main([
        "--count", str(COUNT), "--fleet-size", str(FLEET), "--seed", str(SEED),
        "--rate", "0", "--clock-rate", str(RATE), "--start-time", START.isoformat(),
        "--deterministic-ids",
    ])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    # Faults on purpose: malformed records and resent duplicates, Event Hubs-style client.
    raw = Producer(librdkafka_config(eh_env, "producer"))
    first = generate(build_fleet(FLEET, SEED), SEED, simulated_clock(START, RATE))
    for _ in range(RESENT):
        e = next(first)
        raw.produce(topic, json.dumps(e).encode(), str(e["device_id"]).encode())
    for payload in MALFORMED:
        raw.produce(topic, payload)
    assert raw.flush(30) == 0

    settings = ProcessorSettings(
        trigger="available_now", fleet_size=FLEET, seed=SEED,
        kafka=kafka, lake={"root": str(lake_root / f"e2e-{mode}")},
    )  # fmt: skip
    if mode == "classic":
        run_available_now(request.getfixturevalue("spark"), settings)
    else:  # the processor as its own process, a client of a Spark Connect server
        server = request.getfixturevalue("connect_server")
        env = service_env(
            **{k: v for k, v in os.environ.items() if k.startswith("IOT_KAFKA_")},
            **ProcessorSettings.env_vars(
                remote=server.url, trigger="available_now", fleet_size=FLEET, seed=SEED
            ),
            **LakeSettings.env_vars(root=settings.lake.root),
        )
        log = tmp_path / "processor.log"
        code = run_python(["-m", "processor", "run"], env, log, timeout_s=600)
        assert code == 0, log.read_text()[-3000:]
    at = settings.lake.table

    bronze = DeltaTable(at(Table.BRONZE_EVENTS)).to_pyarrow_table(columns=["partition", "offset"])
    assert bronze.num_rows == COUNT + RESENT + len(MALFORMED)
    assert (
        len(set(zip(*(bronze.column(c).to_pylist() for c in ("partition", "offset")), strict=True)))
        == bronze.num_rows
    )

    silver = DeltaTable(at(Table.SILVER_EVENTS)).to_pyarrow_table(
        columns=["event_id", "device_type", "processed_time"]
    )
    assert silver.num_rows == COUNT
    assert len(set(silver.column("event_id").to_pylist())) == COUNT
    assert None not in silver.column("device_type").to_pylist()

    quarantine = DeltaTable(at(Table.SILVER_QUARANTINE)).to_pyarrow_table(columns=["reason", "raw"])
    assert sorted(zip(quarantine.column("reason").to_pylist(), quarantine.column("raw").to_pylist(), strict=True)) == sorted([
        ("unparsable", MALFORMED[0].decode()),
        ("wrong_type:seq", MALFORMED[1].decode()),
        ("unknown_device", MALFORMED[2].decode()),
    ])  # fmt: skip

    expected = expected_gold()
    gold = DeltaTable(at(Table.GOLD_DEVICE_1M)).to_pyarrow_table().to_pylist()
    assert len(gold) == len(expected)
    for row in gold:
        want = expected[(row["device_id"], row["window_start"].replace(tzinfo=None))]
        for col, value in want.items():
            got = row[col]
            if value is None:
                assert got is None, (row["device_id"], col)
            else:
                assert math.isclose(got, value, rel_tol=1e-12, abs_tol=1e-9), (
                    row["device_id"],
                    col,
                    got,
                    value,
                )
    assert sum(r["events"] for r in gold) == COUNT

    # Each batch's minutes are committed to device_1m before its readings to silver:
    # device_status rolls the sliding windows up from device_1m for silver's rows.
    silver_at = _batch_commit_times(at(Table.SILVER_EVENTS), ":silver")
    minutes_at = _batch_commit_times(at(Table.GOLD_DEVICE_1M), ":device_1m")
    assert silver_at and silver_at.keys() == minutes_at.keys()
    assert {b: minutes_at[b] < silver_at[b] for b in silver_at} == dict.fromkeys(silver_at, True)


def _batch_commit_times(path: str, writer: str) -> dict[int, int]:
    """Batch id -> commit time (ms) of the commits whose Delta txn names ``writer``."""
    return {
        version: c.info["timestamp"]
        for c in commits(path)
        for app, version in c.txns
        if app.endswith(writer)
    }
