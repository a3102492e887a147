"""The exactly-once writers on a real Delta table (local SparkSession, tmp folder)."""

from __future__ import annotations

from datetime import datetime

from delta.tables import DeltaTable
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from processor import sinks


def _version(spark, path: str) -> int:
    return DeltaTable.forPath(spark, path).history(1).first()["version"]


def test_idempotent_append_writes_a_batch_once_and_skips_empty_batches(spark, tmp_path):
    path = str(tmp_path / "t")
    rows = spark.createDataFrame([(1, "a"), (2, "b")], "id long, v string")
    sinks.idempotent_append(rows, path, "app", 0)
    sinks.idempotent_append(rows, path, "app", 0)  # a replayed batch
    sinks.idempotent_append(rows.limit(0), path, "app", 1)  # an empty batch: no commit
    assert _version(spark, path) == 0
    sinks.idempotent_append(rows.limit(1), path, "app", 2)
    assert _version(spark, path) == 1
    assertDataFrameEqual(
        spark.read.format("delta").load(path),
        [Row(id=1, v="a"), Row(id=2, v="b"), Row(id=1, v="a")],
    )


def test_merge_latest_keeps_the_newer_row_per_device(spark, tmp_path):
    path = str(tmp_path / "status")
    schema = "device_id string, last_event_time timestamp, last_seq long, status string"
    t1, t2 = datetime(2026, 1, 1, 0, 0, 1), datetime(2026, 1, 1, 0, 0, 2)
    first = spark.createDataFrame([("d1", t2, 5, "online"), ("d2", t1, 1, "online")], schema)
    first.write.format("delta").save(path)
    update = spark.createDataFrame(
        [("d1", t1, 4, "offline"), ("d2", t2, 2, "degraded"), ("d3", t1, 1, "online")], schema
    )
    sinks.merge_latest(update, path)
    sinks.merge_latest(update, path)  # replaying it changes nothing
    sinks.merge_latest(update.limit(0), path)
    assertDataFrameEqual(
        spark.read.format("delta").load(path),
        [
            Row(device_id="d1", last_event_time=t2, last_seq=5, status="online"),
            Row(device_id="d2", last_event_time=t2, last_seq=2, status="degraded"),
            Row(device_id="d3", last_event_time=t1, last_seq=1, status="online"),
        ],
    )
