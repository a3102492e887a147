"""A running silver stream sees a rewritten device dimension at its next micro-batch.

The stream-static join reads ``dim/devices`` as a Delta table, whose latest version
Spark resolves for every micro-batch: ``python -m processor devices`` (or any
overwrite of the table) needs no restart of the processor.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from pyspark.sql import functions as F

from common.fleet import build_fleet
from infra.broker import ensure_topic
from processor.pipeline import Tables, devices_frame, start_all
from processor.settings import ProcessorSettings
from tests.integration.proc import send_readings, table_rows

pytestmark = pytest.mark.integration

TOPIC = "dimension-refresh"
FLEET, SEED = 4, 5
T0 = datetime(2026, 4, 1, 8, 0, tzinfo=UTC)


def _sites(path: str) -> dict[int, str]:
    return {r["seq"]: r["site"] for r in table_rows(path, ["seq", "site"])}


def _wait(path: str, n: int, queries: list) -> dict[int, str]:
    deadline = time.monotonic() + 180
    while len(sites := _sites(path)) < n:
        assert all(q.isActive for q in queries), [str(q.exception()) for q in queries]
        assert time.monotonic() < deadline, f"silver holds {len(sites)} of {n} rows"
        time.sleep(0.5)
    return sites


def test_a_running_stream_joins_with_the_rewritten_dimension(spark, kafka_broker, lake_root):
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=1)
    device = build_fleet(FLEET, SEED)[0]
    settings = ProcessorSettings(
        trigger="processing_time", trigger_interval="1 second", queries="silver",
        fleet_size=FLEET, seed=SEED, watermark="1 hour",
        kafka={"bootstrap_servers": kafka_broker.plaintext, "topic": TOPIC},
        lake={"root": str(lake_root / "dimension-refresh")},
    )  # fmt: skip
    tables = Tables.under(settings.lake)
    queries = start_all(spark, settings)
    try:
        send_readings(kafka_broker.plaintext, TOPIC, device.device_id, range(1, 6), T0)
        assert _wait(tables.silver, 5, queries) == dict.fromkeys(range(1, 6), device.site)

        moved = devices_frame(spark, settings).withColumn(
            "site",
            F.when(F.col("device_id") == device.device_id, F.lit("Relocated")).otherwise(
                F.col("site")
            ),
        )
        moved.write.format("delta").mode("overwrite").save(tables.devices)
        send_readings(kafka_broker.plaintext, TOPIC, device.device_id, range(6, 9), T0)
        sites = _wait(tables.silver, 8, queries)
    finally:
        for q in queries:
            q.stop()
    assert sites == dict.fromkeys(range(1, 6), device.site) | dict.fromkeys(
        range(6, 9), "Relocated"
    )
    assert device.site != "Relocated"
