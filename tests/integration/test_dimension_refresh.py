"""A running silver stream sees a rewritten device dimension within seconds of its commit.

Silver's joins read a cached copy of ``dim/devices`` (``processor.device_dimension``),
read again when the table's version changes: ``python -m processor devices`` (or any
writer, another process included) needs no restart of the processor.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from deltalake import write_deltalake
from pyspark.sql import functions as F

from common.fleet import build_fleet
from common.lake import Table
from infra.broker import ensure_topic
from processor import sources
from processor.lake_setup import devices_frame
from processor.pipeline import start_all
from processor.settings import ProcessorSettings
from processor.silver import enriched_rows
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


def _plan(query) -> str:
    """The physical plan of the query's last micro-batch (what ``query.explain()`` prints)."""
    return query._jsq.explainInternal(False)


def _cached_scans_of_a_batch_join(spark, path: str) -> int:
    """Scans of a cached copy in a micro-batch's join with the dimension, read as the writer does."""
    batch = spark.createDataFrame([("dev-00000", None)], "device_id string, reason string")
    joined = enriched_rows(batch, sources.delta_table(spark, path))
    return joined._jdf.queryExecution().executedPlan().toString().count("InMemoryTableScan")


def test_a_running_stream_joins_with_the_rewritten_dimension(spark, kafka_broker, lake_root):
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=1)
    device = build_fleet(FLEET, SEED)[0]
    settings = ProcessorSettings(
        trigger="processing_time", trigger_interval="1 second", queries="silver",
        fleet_size=FLEET, seed=SEED, watermark="1 hour",
        kafka={"bootstrap_servers": kafka_broker.plaintext, "topic": TOPIC},
        lake={"root": str(lake_root / "dimension-refresh")},
    )  # fmt: skip
    at = settings.lake.table
    queries = start_all(spark, settings)
    try:
        send_readings(kafka_broker.plaintext, TOPIC, device.device_id, range(1, 6), T0)
        assert _wait(at(Table.SILVER_EVENTS), 5, queries) == dict.fromkeys(range(1, 6), device.site)
        # The stream's device check scans the cached copy, and so does a micro-batch's
        # join, which reads the table in the batch's session (the cache manager's match).
        assert _plan(queries[0]).count("InMemoryTableScan") == 1
        assert _cached_scans_of_a_batch_join(spark, at(Table.DIM_DEVICES)) == 1

        moved = devices_frame(spark, settings).withColumn(
            "site",
            F.when(F.col("device_id") == device.device_id, F.lit("Relocated")).otherwise(
                F.col("site")
            ),
        )
        # Written by delta-rs, as another process would: this session's Spark never sees it.
        write_deltalake(at(Table.DIM_DEVICES), moved.toArrow(), mode="overwrite")
        committed = time.monotonic()
        seq = 5
        while "Relocated" not in _sites(at(Table.SILVER_EVENTS)).values():
            assert all(q.isActive for q in queries), [str(q.exception()) for q in queries]
            assert time.monotonic() - committed < 60, "silver never joined the new dimension"
            seq += 1
            send_readings(kafka_broker.plaintext, TOPIC, device.device_id, [seq], T0)
            time.sleep(0.5)
        switched_s = time.monotonic() - committed
        sites = _wait(at(Table.SILVER_EVENTS), seq, queries)
        assert _plan(queries[0]).count("InMemoryTableScan") == 1
        assert _cached_scans_of_a_batch_join(spark, at(Table.DIM_DEVICES)) == 1
    finally:
        for q in queries:
            q.stop()
    first = min(n for n, site in sites.items() if site == "Relocated")
    # One switch, at one micro-batch: the old site before it, the new one from it on.
    assert sites == dict.fromkeys(range(1, first), device.site) | dict.fromkeys(
        range(first, seq + 1), "Relocated"
    )
    assert first > 5
    assert device.site != "Relocated"
    # A check a second, a 1-second trigger and a micro-batch, which alone takes seconds on
    # two loaded cores: still less than a restart of the processor takes.
    assert switched_s < 30, switched_s
