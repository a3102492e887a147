"""The exactly-once writers on a real Delta table (local SparkSession, tmp folder)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from deltalake import DeltaTable as RustDeltaTable
from pyspark.errors import StreamingQueryException
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


def _log_actions(path: str, version: int) -> list[str]:
    lines = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return sorted(next(iter(json.loads(line))) for line in lines)


def test_idempotent_append_skips_a_replayed_batch_after_a_restart_from_the_history(spark, tmp_path):
    """Only a writer's first append per process has Delta check (and record) its txn; the
    rest are tagged commits, and a restarted process finds them in the history."""
    path = str(tmp_path / "t")
    rows = spark.createDataFrame([(1, "a")], "id long, v string")
    sinks.idempotent_append(rows, path, "app", 0)  # new: Delta checks and records a txn
    sinks.idempotent_append(rows, path, "app", 1)  # known: a tagged commit, no txn
    assert "txn" in _log_actions(path, 0)
    assert "txn" not in _log_actions(path, 1)
    spark.createDataFrame([(9, "z")], "id long, v string").write.format("delta").mode(
        "append"
    ).save(path)  # someone else's commit comes last
    sinks.LEDGER.clear()  # a new process
    sinks.idempotent_append(rows, path, "app", 1)  # the replay of batch 1: skipped
    sinks.idempotent_append(rows, path, "other", 1)  # another writer's batch 1: written
    sinks.idempotent_append(rows, path, "app", 2)
    assert _version(spark, path) == 4
    history = DeltaTable.forPath(spark, path).history().select("version", "userMetadata")
    tags = {r.version: sinks.commit_tag_of(r.userMetadata) for r in history.collect()}
    assert tags == {0: ("app", 0), 1: ("app", 1), 2: None, 3: ("other", 1), 4: ("app", 2)}
    assert spark.read.format("delta").load(path).count() == 5


def _writer(path: str, version: int) -> str:
    """Which engine made a commit: ``spark`` or ``delta-rs``."""
    lines = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    info = next(json.loads(line)["commitInfo"] for line in lines if "commitInfo" in line)
    return "delta-rs" if "clientVersion" in info else "spark"


def test_a_small_batch_is_appended_by_delta_rs_once_and_a_backlog_by_spark(
    spark, tmp_path, monkeypatch
):
    from pyspark.sql import functions as F

    path = str(tmp_path / "t")
    t0 = datetime(2026, 1, 1, 8, 30)
    rows = spark.createDataFrame([(1, "a", t0), (2, None, t0)], "id long, v string, at timestamp")
    sinks.idempotent_append(rows.withColumn("old", F.lit(0.5)), path, "app", 0)  # Spark's
    # The table's column ``old`` is no longer written: delta-rs's rows leave it null.
    sinks.idempotent_append(rows, path, "app", 1, rows_at_most=2)
    sinks.idempotent_append(rows, path, "app", 1, rows_at_most=2)  # a replay: the ledger
    sinks.LEDGER.clear()
    with monkeypatch.context() as mp:  # a history with no tag: delta-rs's own txn check
        mp.setattr(sinks.CommitLedger, "_from_history", classmethod(lambda *_: None))
        sinks.idempotent_append(rows, path, "app", 1, rows_at_most=2)
    sinks.idempotent_append(rows.limit(0), path, "app", 2, rows_at_most=0)  # nothing
    none = rows.filter("id > 2")
    sinks.idempotent_append(none, path, "app", 3, rows_at_most=2)  # a bound: still nothing
    monkeypatch.setattr(sinks, "RUST_APPEND_MAX_ROWS", 1)
    sinks.idempotent_append(none, path, "app", 4, rows_at_most=2)  # Spark's: no empty commit
    sinks.idempotent_append(rows, path, "app", 5, rows_at_most=2)  # too many to collect
    assert [_writer(path, v) for v in range(3)] == ["spark", "delta-rs", "spark"]
    assert _version(spark, path) == 2
    assert "txn" in _log_actions(path, 1)
    tags = [r.userMetadata for r in DeltaTable.forPath(spark, path).history().collect()]
    assert [sinks.commit_tag_of(t) for t in tags] == [("app", 5), ("app", 1), ("app", 0)]
    assertDataFrameEqual(
        spark.read.format("delta").load(path),
        [Row(id=1, v="a", at=t0, old=0.5), Row(id=2, v=None, at=t0, old=0.5)]
        + [Row(id=1, v="a", at=t0, old=None), Row(id=2, v=None, at=t0, old=None)] * 2,
    )


def test_a_small_frame_replaces_the_table_through_delta_rs_once_per_batch(spark, tmp_path):
    path = str(tmp_path / "t")
    schema = "kind string, devices long, at timestamp"
    t0 = datetime(2026, 1, 1, 8, 30)
    sinks.ensure_table(spark, path, spark.createDataFrame([], schema))  # as the processor does
    first = spark.createDataFrame([("a", 2, t0), ("b", 1, None)], schema)
    second = spark.createDataFrame([("a", 3, t0 + timedelta(minutes=1))], schema)
    sinks.idempotent_overwrite(first, path, "app", 0)
    sinks.idempotent_overwrite(second, path, "app", 0)  # a replay of batch 0: the ledger
    assert _version(spark, path) == 1
    sinks.LEDGER.clear()  # a new process: the history finds batch 0
    sinks.idempotent_overwrite(second, path, "app", 0)
    assertDataFrameEqual(
        spark.read.format("delta").load(path),
        [Row(kind="a", devices=2, at=t0), Row(kind="b", devices=1, at=None)],
    )
    sinks.idempotent_overwrite(second, path, "app", 1)
    sinks.idempotent_overwrite(second.limit(0), path, "app", 2)  # nothing to write: no commit
    assert _version(spark, path) == 2
    assert _writer(path, 1) == _writer(path, 2) == "delta-rs"
    assert "txn" in _log_actions(path, 2)
    tags = [r.userMetadata for r in DeltaTable.forPath(spark, path).history().collect()]
    assert [sinks.commit_tag_of(t) for t in tags] == [("app", 1), ("app", 0), None]
    assertDataFrameEqual(
        spark.read.format("delta").load(path),
        [Row(kind="a", devices=3, at=t0 + timedelta(minutes=1))],
    )


def test_a_table_written_before_the_ledger_is_still_written_exactly_once(spark, tmp_path):
    """Delta's own txn record decides when the history has no tag of the writer's."""
    path = str(tmp_path / "t")
    rows = spark.createDataFrame([(1, "a")], "id long, v string")
    rows.write.format("delta").option("txnAppId", "app").option("txnVersion", 7).save(path)
    sinks.LEDGER.clear()
    sinks.idempotent_append(rows, path, "app", 7)  # a replay: Delta skips it
    assert _version(spark, path) == 0
    sinks.idempotent_append(rows, path, "app", 8)
    sinks.idempotent_append(rows, path, "app", 8)  # and again, now known to the ledger
    assert _version(spark, path) == 1
    assert spark.read.format("delta").load(path).count() == 2


def test_a_writer_with_only_empty_batches_reads_the_history_once(spark, tmp_path, monkeypatch):
    """Quarantine's batches are empty for hours: its writer must not search the table's
    history (up to 1,000 commits) again at every batch."""
    path = str(tmp_path / "t")
    rows = spark.createDataFrame([(1, "a")], "id long, v string")
    sinks.idempotent_append(rows, path, "other", 0)  # the table exists, with another's commit
    sinks.LEDGER.clear()
    reads = []
    real = sinks.CommitLedger._from_history.__func__

    def counted(cls, spark_, path_, app_id):
        reads.append(app_id)
        return real(cls, spark_, path_, app_id)

    monkeypatch.setattr(sinks.CommitLedger, "_from_history", classmethod(counted))
    for batch_id in range(4):
        sinks.idempotent_append(rows.limit(0), path, "app", batch_id)
    assert reads == ["app"]
    sinks.idempotent_append(rows, path, "app", 4)  # unknown to the ledger: Delta's txn too
    sinks.idempotent_append(rows, path, "app", 4)  # a replay, now known: skipped
    assert reads == ["app"]
    assert "txn" in _log_actions(path, 1)
    assert spark.read.format("delta").load(path).count() == 2


def test_device_status_keeps_the_newer_reading_and_adds_the_events_once(spark, tmp_path):
    from processor import transforms

    path = str(tmp_path / "status")
    schema = (
        "device_id string, last_event_time timestamp, last_seq long, status string, events long"
    )
    t1, t2 = datetime(2026, 1, 1, 0, 0, 1), datetime(2026, 1, 1, 0, 0, 2)
    first = spark.createDataFrame([("d1", t2, 5, "online", 5), ("d2", t1, 1, "online", 1)], schema)
    first.write.format("delta").save(path)
    update = spark.createDataFrame(
        [("d1", t1, 4, "offline", 1), ("d2", t2, 2, "degraded", 1), ("d3", t1, 1, "online", 1)],
        schema,
    ).toArrow()

    def merge(rows, batch_id: int) -> None:
        sinks.merge_rows(
            spark, rows, path, ("device_id",),
            update=transforms.combine_device_status(rows.column_names), txn=("q", batch_id),
        )  # fmt: skip

    merge(update, 0)
    merge(update, 0)  # a replayed batch: skipped
    sinks.LEDGER.clear()  # a new process: the table's history says it was committed
    merge(update, 0)
    merge(update.slice(0, 0), 1)  # empty: no commit
    merge(spark.createDataFrame([("d3", t2, 2, "offline", 2)], schema).toArrow(), 2)
    assert _version(spark, path) == 2
    assertDataFrameEqual(
        spark.read.format("delta").load(path),
        [
            Row(device_id="d1", last_event_time=t2, last_seq=5, status="online", events=6),
            Row(device_id="d2", last_event_time=t2, last_seq=2, status="degraded", events=2),
            Row(device_id="d3", last_event_time=t2, last_seq=2, status="offline", events=3),
        ],
    )
    # Each MERGE's commit carries the tag that the ledger reads, and Delta's txn.
    history = DeltaTable.forPath(spark, path).history().select("version", "userMetadata")
    tags = {r.version: sinks.commit_tag_of(r.userMetadata) for r in history.collect()}
    assert tags == {0: None, 1: ("q", 0), 2: ("q", 2)}
    assert RustDeltaTable(path).transaction_version("q") == 2


def test_a_merge_without_a_txn_replaces_or_keeps_matched_rows_and_inserts_new_ones(spark, tmp_path):
    """Site windows replace theirs whole, every time; landed alerts keep the first copy.

    Only stored rows from the hour of the batch's earliest ``since`` on can match; a
    column the batch does not write (a metric dropped from the contract) is left null.
    """
    import pyarrow as pa

    path = str(tmp_path / "t")
    t0 = datetime(2026, 1, 1, 5, 10)
    early = t0.replace(hour=4)
    spark.createDataFrame(
        [("a", t0, 1, 0.5), ("b", early, 2, 0.5)], "id string, at timestamp, v long, old double"
    ).write.format("delta").save(path)
    utc = pa.timestamp("us", tz="UTC")
    rows = pa.table({
        "id": ["a", "b", "c"],
        "at": pa.array([t0.replace(minute=30), t0, t0], utc),
        "v": pa.array([10, 20, 30], pa.int64()),
    })  # fmt: skip

    def stored() -> list[tuple]:
        return sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())

    sinks.merge_rows(spark, rows, path, ("id",), since="at", keep_existing=True)
    # b's stored row is from 04:10, before the batch's hour: not matched, so inserted.
    kept = [("a", t0, 1, 0.5), ("b", early, 2, 0.5), ("b", t0, 20, None), ("c", t0, 30, None)]
    assert stored() == kept
    sinks.merge_rows(spark, rows, path, ("id",), since="at")
    sinks.merge_rows(spark, rows, path, ("id",), since="at")  # the same again: no change
    replaced = [("a", t0.replace(minute=30), 10, None), ("b", early, 2, 0.5),
                ("b", t0, 20, None), ("c", t0, 30, None)]  # fmt: skip
    assert stored() == replaced
    # A batch whose ``since`` is all null has no bound: it still merges.
    none = pa.table({"id": ["d"], "at": pa.array([None], utc), "v": pa.array([40], pa.int64())})
    sinks.merge_rows(spark, none, path, ("id",), since="at", keep_existing=True)
    assert stored() == [*replaced, ("d", None, 40, None)]


def _silver(spark, rows):
    """Silver-shaped rows (device, seconds after 00:00, seq, temperature, humidity)."""
    from common.contract import METRIC_NAMES

    schema = "event_time timestamp, device_id string, device_type string, site string, seq long, "
    schema += ", ".join(f"{m} double" for m in METRIC_NAMES)
    base = datetime(2026, 1, 1)
    data = []
    for device, secs, seq, temp, hum in rows:
        metrics = {m: None for m in METRIC_NAMES} | {"temperature_c": temp, "humidity_pct": hum}
        when = base + timedelta(seconds=secs)
        data.append((when, device, "thermostat", "Oslo", seq, *metrics.values()))
    return spark.createDataFrame(data, schema)


def test_device_minutes_merged_batch_by_batch_equal_one_aggregation_once_each(spark, tmp_path):
    from processor import transforms

    path = str(tmp_path / "device_1m")
    batch0 = _silver(spark, [("d1", 10, 1, 20.0, None), ("d1", 40, 2, 22.0, None),
                             ("d2", 20, 1, 10.0, 50.0)])  # fmt: skip
    batch1 = _silver(spark, [("d1", 65, 3, 30.0, None), ("d1", 50, 4, 18.0, None),
                             ("d2", 30, 2, None, 70.0)])  # fmt: skip
    sinks.ensure_table(spark, path, transforms.device_minute_aggregates(batch0, "1 minute"))

    def add(batch, batch_id: int) -> None:
        sinks.merge_rows(
            spark, transforms.device_minute_aggregates(batch, "1 minute").toArrow(), path,
            ("device_id", "window_start"), update=transforms.combine_device_minutes(),
            txn=("q", batch_id), since="window_start",
        )  # fmt: skip

    add(batch0, 0)
    add(batch0, 0)  # a replayed batch: skipped
    add(batch1, 1)
    sinks.LEDGER.clear()  # a new process: the history says batch 1 is in
    add(batch1, 1)
    assert _version(spark, path) == 2
    assert [r.userMetadata for r in DeltaTable.forPath(spark, path).history(1).collect()] == [
        sinks.commit_tag("q", 1)
    ]
    # A history with no tag of the writer's: Delta's txn action decides, batch 0 included.
    sinks.LEDGER.clear()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sinks.CommitLedger, "_from_history", classmethod(lambda *_: None))
        add(batch0, 0)
        add(batch1, 1)
    assert _version(spark, path) == 2
    assert RustDeltaTable(path).transaction_version("q") == 1
    gold = spark.read.format("delta").load(path)
    t = datetime(2026, 1, 1)
    cols = ["window_start", "device_id", "events", "temperature_c_min", "temperature_c_avg",
            "temperature_c_max", "temperature_c_count", "humidity_pct_min", "humidity_pct_avg",
            "humidity_pct_max", "humidity_pct_count", "last_event_time", "last_seq"]  # fmt: skip
    expected = [
        (t, "d1", 3, 18.0, 20.0, 22.0, 3, None, None, None, 0, t.replace(second=50), 4),
        (t.replace(minute=1), "d1", 1, 30.0, 30.0, 30.0, 1, None, None, None, 0,
         t.replace(minute=1, second=5), 3),
        (t, "d2", 2, 10.0, 10.0, 10.0, 1, 50.0, 60.0, 70.0, 2, t.replace(second=30), 2),
    ]  # fmt: skip
    assertDataFrameEqual(
        gold.select(*cols), [Row(**dict(zip(cols, r, strict=True))) for r in expected]
    )
    everything = transforms.device_minute_aggregates(batch0.unionByName(batch1), "1 minute")
    assertDataFrameEqual(gold, everything.select(*gold.columns), rtol=1e-12)


def test_a_window_stored_before_a_metric_existed_absorbs_its_later_readings(spark, tmp_path):
    """The metric's columns were added to the table (null); a late reading of that window
    with the metric gives the metric's aggregates of that reading alone."""
    from processor import transforms

    path = str(tmp_path / "device_1m")
    before = _silver(spark, [("d2", 20, 1, 10.0, 50.0)])
    old = transforms.device_minute_aggregates(before, "1 minute")
    humidity = [c for c in old.columns if c.startswith("humidity_pct_")]
    old.drop(*humidity).write.format("delta").save(path)
    assert sinks.ensure_table(spark, path, old) == sinks.TableChange(added=tuple(humidity))
    later = _silver(spark, [("d2", 30, 2, 12.0, 70.0)])
    sinks.merge_rows(
        spark, transforms.device_minute_aggregates(later, "1 minute").toArrow(), path,
        ("device_id", "window_start"), update=transforms.combine_device_minutes(), txn=("q", 1),
        since="window_start",
    )  # fmt: skip
    cols = ["events", "temperature_c_avg", "temperature_c_count", *humidity]
    assertDataFrameEqual(
        spark.read.format("delta").load(path).select(*cols),
        [Row(events=2, temperature_c_avg=11.0, temperature_c_count=2, humidity_pct_min=70.0,
             humidity_pct_avg=70.0, humidity_pct_max=70.0, humidity_pct_count=1)],
    )  # fmt: skip


def test_concurrent_writes_inherit_the_callers_local_properties(spark):
    import warnings

    sc = spark.sparkContext
    seen: list[str | None] = []
    sc.setLocalProperty("spark.scheduler.pool", "hot")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sinks.run_concurrently(
                spark,
                lambda: seen.append(sc.getLocalProperty("spark.scheduler.pool")),
                lambda: seen.append(sc.getLocalProperty("spark.scheduler.pool")),
            )
    finally:
        sc.setLocalProperty("spark.scheduler.pool", None)
    assert seen == ["hot", "hot"]


def test_a_checkpoint_with_another_number_of_sources_stops_with_what_to_do(tmp_path):
    ckpt = tmp_path / "silver"
    assert sinks.checkpoint_sources(str(ckpt)) is None  # nothing yet
    (ckpt / "offsets").mkdir(parents=True)
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'
    (ckpt / "offsets" / "9").write_text(f'v1\n{meta}\n{{"t":{{"0":5}}}}\n')
    # The latest batch counts (10 after 9, not as text), and an earlier version read twice.
    (ckpt / "offsets" / "10").write_text(f'v1\n{meta}\n{{"t":{{"0":7}}}}\n{{"t":{{"0":7}}}}\n')
    assert sinks.checkpoint_sources(str(ckpt)) == 2
    assert sinks.checkpoint_sources(f"file://{ckpt}") == 2
    assert sinks.checkpoint_sources("abfss://lake@acct.dfs.core.windows.net/silver") is None
    with pytest.raises(
        sinks.CheckpointSourcesError, match="it read 2 sources; this version reads 1"
    ):
        sinks.check_checkpoint_sources(str(ckpt), "silver", expected=1)
    (ckpt / "offsets" / "11").write_text(f'v1\n{meta}\n{{"t":{{"0":9}}}}\n')
    sinks.check_checkpoint_sources(str(ckpt), "silver", expected=1)


def test_unique_columns_are_written_without_a_dictionary(spark, tmp_path):
    import pyarrow.parquet as pq

    rows = [(f"dev-{i % 3}", f"payload {i}".encode(), f"id-{i}") for i in range(200)]
    frame = spark.createDataFrame(rows, "key string, value binary, event_id string")
    frame.coalesce(1).write.format("delta").save(str(tmp_path / "t"))
    (part,) = (tmp_path / "t").glob("*.parquet")
    meta = pq.ParquetFile(part).metadata.row_group(0)
    dictionary = {
        meta.column(i).path_in_schema: any("DICTIONARY" in e for e in meta.column(i).encodings)
        for i in range(3)
    }
    assert dictionary == {"key": True, "value": False, "event_id": False}


def test_has_rows_answers_without_new_generated_code_per_batch(spark, compilations):
    """isEmpty() puts a LIMIT in the plan, whose counter gets a new name each time."""
    from pyspark.sql import functions as F

    def batch(values: list[int]):
        # A cached micro-batch with a broadcast join, as silver's rows (with_audit) are.
        rows = spark.createDataFrame([(v,) for v in values], "v long").persist()
        one = spark.createDataFrame([(len(values),)], "n long")
        return rows.filter(F.col("v") > 1).crossJoin(F.broadcast(one)).select("v", "n")

    assert sinks.has_rows(batch([1, 2])) is True
    assert sinks.has_rows(batch([1])) is False
    before = compilations()
    assert sinks.has_rows(batch([3, 4])) is True
    assert sinks.has_rows(batch([0])) is False
    assert compilations() == before
    batch([1, 2]).isEmpty()
    before = compilations()
    batch([3, 4]).isEmpty()
    assert compilations() > before  # the control: a LIMIT is new code every time


def test_no_streaming_write_runs_an_action_under_a_limit():
    """isEmpty(), first(), head() and take() on a micro-batch compile new code every batch.

    Silver's schema-drift check once called ``isEmpty()`` per batch: Janino and the JIT
    then compiled through every batch, and the processor's throughput fell threefold.
    The per-batch code (transforms, sinks, the wiring) must use ``sinks.has_rows``.
    """
    import re
    from pathlib import Path

    import processor

    limited = re.compile(r"\.(isEmpty|first|head|take|limit)\(")
    # Allowed: has_rows' RDD isEmpty (no LIMIT), an empty table's schema (written once)
    # and OPTIMIZE's metrics (maintain).
    allowed = {
        ("sinks.py", "toRdd().isEmpty()"), ("sinks.py", "empty.limit(0)"),
        ("pipeline.py", ".first(),"),
    }  # fmt: skip
    found = []
    for path in sorted(Path(processor.__file__).parent.glob("*.py")):
        for line in path.read_text().splitlines():
            code = line.split("#", 1)[0]
            prose = code.lstrip().startswith(("``", '"'))
            known = any(path.name == f and a in code for f, a in allowed)
            if limited.search(code) and not prose and not known:
                found.append(f"{path.name}: {line.strip()}")
    assert found == []


def _gated(spark, rows: list[tuple[int, int]], entered: Path, go: Path):
    """A one-partition frame of (id, v) whose evaluation waits for ``go`` (once ``entered``).

    It holds a MERGE that reads it while the MERGE's snapshot of the target is taken.
    """
    from pyspark.sql import functions as F

    def gate(v: int) -> int:
        import os
        import time

        if not os.path.exists(go):
            open(entered, "w").close()
            deadline = time.time() + 120
            while not os.path.exists(go) and time.time() < deadline:
                time.sleep(0.05)
        return v

    udf = F.udf(gate, "long", useArrow=False)  # a plain UDF; no eval type to infer from hints
    return spark.createDataFrame(rows, "id long, v long").coalesce(1).withColumn("v", udf("v"))


def _wait_for(path: Path, seconds: float = 120.0) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def test_a_merge_that_loses_to_a_concurrent_optimize_is_written_again(spark, tmp_path):
    """OPTIMIZE compacts the files a running MERGE read: Delta refuses the MERGE's commit
    (its compacted file is new data where the MERGE read), and ``retry_conflicts`` runs
    it again, whole."""
    import threading

    path = str(tmp_path / "t")
    for row in [(1, 10), (2, 20)]:  # two files, for OPTIMIZE to compact
        spark.createDataFrame([row], "id long, v long").write.format("delta").mode("append").save(
            path
        )
    entered, go = tmp_path / "entered", tmp_path / "go"
    source = _gated(spark, [(1, 11), (3, 30)], entered, go)
    conflicts: list[BaseException] = []
    failed: list[BaseException] = []

    def merge() -> None:
        target = DeltaTable.forPath(spark, path).alias("t")
        target.merge(
            source.alias("s"), "t.id = s.id"
        ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()

    def run() -> None:
        try:
            sinks.retry_conflicts(merge, "test", backoff_s=0.0, on_conflict=conflicts.append)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    _wait_for(entered)
    compacted = DeltaTable.forPath(spark, path).optimize().executeCompaction()
    assert compacted.select("metrics.numFilesRemoved").first()[0] == 2
    go.touch()
    thread.join(180)
    assert not failed, failed
    # Delta 4.4's condition has a subclass (4.0's had none).
    assert [sinks.error_condition(c) for c in conflicts] == ["DELTA_CONCURRENT_APPEND.WITHOUT_HINT"]
    assertDataFrameEqual(
        spark.read.format("delta").load(path), [Row(id=1, v=11), Row(id=2, v=20), Row(id=3, v=30)]
    )


def test_retry_conflicts_raises_any_other_error_at_once(spark, tmp_path):
    calls: list[int] = []

    def missing_table() -> None:
        calls.append(1)
        spark.read.format("delta").load(str(tmp_path / "nothing")).collect()

    with pytest.raises(Exception) as info:
        sinks.retry_conflicts(missing_table, "test", backoff_s=0.0)
    assert not sinks.is_conflict(info.value)
    assert calls == [1]  # not a conflict: no second try
    assert not sinks.is_conflict(ValueError("DELTA_CONCURRENT_APPEND"))


def test_maintain_compacts_each_table_and_keeps_its_rows(spark, tmp_path, capsys):
    from processor.pipeline import Tables, maintain
    from processor.settings import ProcessorSettings

    settings = ProcessorSettings(lake={"root": str(tmp_path / "lake")})
    tables = Tables.under(settings.lake)
    for i in range(3):
        spark.createDataFrame([(i, "x")], "id long, v string").write.format("delta").mode(
            "append"
        ).save(tables.bronze)
    spark.createDataFrame([(9, "y")], "id long, v string").write.format("delta").save(
        tables.fleet_summary
    )
    spark.sparkContext.setJobGroup("maintain", "maintain")
    try:
        maintain(spark, settings)
    finally:
        spark.sparkContext._jsc.clearJobGroup()  # PySpark has no clearJobGroup of its own
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[maintain]")]
    assert lines == [
        "[maintain] bronze: compacted 3 files into 1",
        "[maintain] fleet_summary: compacted 0 files into 0",
    ]
    assertDataFrameEqual(
        spark.read.format("delta").load(tables.bronze), [Row(id=i, v="x") for i in range(3)]
    )
    assert DeltaTable.forPath(spark, tables.bronze).detail().first()["numFiles"] == 1
    # VACUUM's listing ran as many tasks as the session's shuffle partitions, not 10,000.
    assert _most_tasks_in_a_stage(spark, "maintain") == 2


def _most_tasks_in_a_stage(spark, group: str) -> int:
    tracker = spark.sparkContext.statusTracker()
    stages = [
        tracker.getStageInfo(stage)
        for job in tracker.getJobIdsForGroup(group)
        for stage in tracker.getJobInfo(job).stageIds
    ]
    return max(s.numTasks for s in stages if s is not None)


def test_an_older_table_gains_the_new_columns_and_its_stream_resumes(spark, tmp_path, capsys):
    path, ckpt = str(tmp_path / "t"), str(tmp_path / "ckpt")
    spark.createDataFrame([(1, "a")], "id long, v string").write.format("delta").save(path)
    seen: list[Row] = []

    def drain() -> None:
        (
            spark.readStream.format("delta").load(path).writeStream
            .foreachBatch(lambda df, _id: seen.extend(df.orderBy("id").collect()))
            .option("checkpointLocation", ckpt).trigger(availableNow=True).start()
            .awaitTermination()
        )  # fmt: skip

    drain()
    newer = spark.createDataFrame([], "id long, v string, w double")
    assert sinks.ensure_table(spark, path, newer) == sinks.TableChange(added=("w",))
    assert "added the columns `w` double" in capsys.readouterr().err
    assert sinks.ensure_table(spark, path, newer) == sinks.TableChange()  # now current
    assert capsys.readouterr().err == ""
    spark.createDataFrame([(2, "b", 0.5)], "id long, v string, w double").write.format(
        "delta"
    ).mode("append").save(path)
    drain()
    assert seen == [Row(id=1, v="a"), Row(id=2, v="b", w=0.5)]
    assertDataFrameEqual(
        spark.read.format("delta").load(path),
        [Row(id=1, v="a", w=None), Row(id=2, v="b", w=0.5)],
    )
    # By name: a column in the middle is added at the end; one no longer written stays.
    change = sinks.ensure_table(
        spark, path, spark.createDataFrame([], "id long, x string, w double")
    )
    assert change == sinks.TableChange(added=("x",), unwritten=("v",))
    assert spark.read.format("delta").load(path).columns == ["id", "v", "w", "x"]
    with pytest.raises(sinks.TableSchemaError, match=r"v \(string -> bigint\)"):
        sinks.ensure_table(spark, path, spark.createDataFrame([], "id long, v long"))


def test_a_delta_rs_merge_that_loses_to_a_concurrent_optimize_is_written_again(
    spark, tmp_path, capsys
):
    """delta-rs refuses a MERGE whose files an OPTIMIZE compacted after it read them;
    ``retry_conflicts`` knows that refusal for a conflict and writes again."""
    import pyarrow as pa
    from deltalake.exceptions import CommitFailedError

    path = str(tmp_path / "t")
    for row in [(1, 10), (2, 20)]:  # two files
        spark.createDataFrame([row], "id long, v long").write.format("delta").mode("append").save(
            path
        )
    snapshots = [RustDeltaTable(path)]  # the first try's snapshot: two files
    DeltaTable.forPath(spark, path).optimize().executeCompaction()
    rows = pa.table({"id": pa.array([1], pa.int64()), "v": pa.array([11], pa.int64())})

    def write() -> None:
        table = snapshots.pop() if snapshots else RustDeltaTable(path)
        merge = table.merge(rows, "t.id = s.id", source_alias="s", target_alias="t")
        merge.when_matched_update_all().when_not_matched_insert_all().execute()

    sinks.retry_conflicts(write, "test", backoff_s=0.0)
    assert "test: a concurrent commit won (CommitFailedError)" in capsys.readouterr().err
    # delta-rs fails other commits with the same class: those are no conflict.
    assert not sinks.is_conflict(CommitFailedError("Unsupported table features: deletionVectors"))
    assertDataFrameEqual(spark.read.format("delta").load(path), [Row(id=1, v=11), Row(id=2, v=20)])


def _unfinished_offsets_file(spark, checkpoint: str) -> None:
    """Leave ``offsets/0`` as a kill between writing and renaming it does.

    Spark's own checkpoint file manager writes the file; it is never closed, so never
    renamed into place: only its hidden temporary file (and checksum) exist.
    """
    jvm = spark._jvm
    batch0 = jvm.org.apache.hadoop.fs.Path(f"{checkpoint}/offsets/0")
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    managers = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager
    out = managers.create(batch0.getParent(), conf).createAtomic(batch0, False)
    out.write(bytearray(b"v1\n"))
    out.flush()


def test_a_query_killed_while_logging_its_first_batch_starts_again(spark, tmp_path):
    from processor.settings import ProcessorSettings

    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    spark.createDataFrame([(1, "a"), (2, "b")], "id long, v string").write.format("delta").save(
        source
    )
    checkpoint = str(tmp_path / "checkpoint")
    _unfinished_offsets_file(spark, checkpoint)
    left = sorted(p.name for p in (tmp_path / "checkpoint" / "offsets").iterdir())
    assert [re.sub(r"[0-9a-f-]{36}", "U", name) for name in left] == ["..0.U.tmp.crc", ".0.U.tmp"]

    # What Spark does with that folder on its own: no batch to resume, and not empty.
    plain = (
        spark.readStream.format("delta").load(source).writeStream.format("noop")
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )  # fmt: skip
    with pytest.raises(StreamingQueryException, match="STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"):
        plain.awaitTermination(120)

    sinks.ensure_table(spark, target, spark.createDataFrame([], "id long, v string"))
    query = sinks.table_stream(
        spark.readStream.format("delta").load(source), target, checkpoint, "killed_first",
        ProcessorSettings(trigger="available_now"),
    )  # fmt: skip
    query.awaitTermination(120)
    assert query.exception() is None
    assertDataFrameEqual(
        spark.read.format("delta").load(target), [Row(id=1, v="a"), Row(id=2, v="b")]
    )
    assert sorted(p.name for p in (tmp_path / "checkpoint" / "offsets").iterdir()) == [
        ".0.crc",
        "0",
    ]
    # A logged batch is never touched again: the clearing only runs before batch 0.
    unfinished = tmp_path / "checkpoint" / "offsets" / ".1.0000.tmp"
    unfinished.write_text("v1\n")
    assert sinks.clear_unlogged_first_batch(spark, checkpoint) == 0
    assert unfinished.read_text() == "v1\n"
