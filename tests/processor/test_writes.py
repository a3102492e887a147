"""Exactly-once Delta writes (processor.writes) on real tables: local SparkSession, tmp folder."""

from __future__ import annotations

import time
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from processor import gold, writes
from processor.tables import TableChange, ensure_table
from processor.times import since_floor_s
from tests.delta_log import commits


def _version(spark, path: str) -> int:
    return DeltaTable.forPath(spark, path).history(1).first()["version"]


def _txns(path: str) -> dict[int, list[tuple[str, int]]]:
    """Commit version -> the ``(appId, version)`` of its Delta ``txn`` actions, every commit."""
    return {c.version: list(c.txns) for c in commits(path)}


def test_append_once_writes_a_batch_once_and_skips_empty_batches(spark, tmp_path):
    path = str(tmp_path / "t")
    rows = spark.createDataFrame([(1, "a"), (2, "b")], "id long, v string")
    assert writes.append_once(rows, path, "app", 0) is True
    assert writes.append_once(rows, path, "app", 0) is True  # a replayed batch: Delta skips it
    assert writes.append_once(rows.limit(0), path, "app", 1) is False  # empty: no commit
    assert _version(spark, path) == 0
    writes.append_once(rows.limit(1), path, "app", 2)
    assert _txns(path) == {0: [("app", 0)], 1: [("app", 2)]}
    assertDataFrameEqual(
        spark.read.format("delta").load(path),
        [Row(id=1, v="a"), Row(id=2, v="b"), Row(id=1, v="a")],
    )


def test_every_append_records_its_batch_and_a_new_session_skips_a_replay(spark, tmp_path):
    """Delta keeps each writer's newest batch in the table itself: a replay is skipped by a
    new session as by the writing one, after another writer's commits too, and a column the
    table has and the batch lacks is null in its rows."""
    from pyspark.sql import functions as F

    path = str(tmp_path / "t")
    rows = spark.createDataFrame([(1, "a")], "id long, v string")
    writes.append_once(rows.withColumn("old", F.lit(0.5)), path, "app", 0)
    writes.append_once(rows, path, "app", 1)
    spark.createDataFrame([(9, "z")], "id long, v string").write.format("delta").mode(
        "append"
    ).save(path)  # someone else's commit comes last
    other = spark.newSession()  # as a restarted processor's
    replay = other.createDataFrame([(1, "a")], "id long, v string")
    writes.append_once(replay, path, "app", 1)  # the replay of batch 1: skipped
    writes.append_once(replay, path, "other", 1)  # another writer's batch 1: written
    writes.append_once(replay, path, "app", 2)
    assert _txns(path) == {0: [("app", 0)], 1: [("app", 1)], 2: [], 3: [("other", 1)],
                           4: [("app", 2)]}  # fmt: skip
    assertDataFrameEqual(
        spark.read.format("delta").load(path),
        [Row(id=1, v="a", old=0.5), Row(id=9, v="z", old=None)] + [Row(id=1, v="a", old=None)] * 3,
    )
    assert {c.engine for c in commits(path)} == {"Apache-Spark/4.2.0"}


def test_overwrite_once_replaces_the_rows_once_per_batch(spark, tmp_path):
    path = str(tmp_path / "t")
    schema = "kind string, devices long, at timestamp"
    t0 = datetime(2026, 1, 1, 8, 30)
    ensure_table(spark, path, spark.createDataFrame([], schema))  # as the processor does
    first = spark.createDataFrame([("a", 2, t0), ("b", 1, None)], schema)
    second = spark.createDataFrame([("a", 3, t0 + timedelta(minutes=1))], schema)
    writes.overwrite_once(first, path, "app", 0)
    writes.overwrite_once(second, path, "app", 0)  # a replay of batch 0: skipped
    assertDataFrameEqual(
        spark.read.format("delta").load(path),
        [Row(kind="a", devices=2, at=t0), Row(kind="b", devices=1, at=None)],
    )
    writes.overwrite_once(second, path, "app", 1)
    assert writes.overwrite_once(second.limit(0), path, "app", 2) is False  # no commit
    assert _txns(path) == {0: [], 1: [("app", 0)], 2: [("app", 1)]}
    assertDataFrameEqual(
        spark.read.format("delta").load(path),
        [Row(kind="a", devices=3, at=t0 + timedelta(minutes=1))],
    )


def test_device_status_keeps_the_newer_reading_and_adds_the_events_once(spark, tmp_path):
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
    )

    def merge(rows, batch_id: int) -> None:
        writes.merge(
            rows, path, ("device_id",), txn=("q", batch_id),
            update=gold.combine_device_status(rows.columns),
        )  # fmt: skip

    merge(update, 0)
    merge(update, 0)  # a replayed batch: skipped
    restarted = spark.newSession()  # a new process's session: the table says it was committed
    merge(restarted.createDataFrame(update.collect(), schema), 0)
    merge(update.limit(0), 1)  # empty: no commit
    merge(spark.createDataFrame([("d3", t2, 2, "offline", 2)], schema), 2)
    assert _txns(path) == {0: [], 1: [("q", 0)], 2: [("q", 2)]}
    assertDataFrameEqual(
        spark.read.format("delta").load(path),
        [
            Row(device_id="d1", last_event_time=t2, last_seq=5, status="online", events=6),
            Row(device_id="d2", last_event_time=t2, last_seq=2, status="degraded", events=2),
            Row(device_id="d3", last_event_time=t2, last_seq=2, status="offline", events=3),
        ],
    )
    # The txn was set for the MERGE only: the session is as it was.
    assert spark.conf.get(writes.TXN_APP_ID_CONF, None) is None
    assert spark.conf.get(writes.TXN_VERSION_CONF, None) is None


def test_a_merges_txn_is_seen_by_its_own_session_only(spark, tmp_path):
    """Each streaming query runs on a clone of the session: the txn one query sets for its
    MERGE is not another's, whose MERGE (of a batch id already recorded) still runs."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    for path in (a, b):
        spark.createDataFrame([(1, 1)], "id long, v long").write.format("delta").save(path)
    other = spark.newSession()
    rows = spark.createDataFrame([(1, 5)], "id long, v long")
    writes.merge(rows, a, ("id",), txn=("q", 3))
    with writes.dml_txn(spark, "q", 3):  # this session's next MERGE would be a replay ...
        writes.merge(other.createDataFrame([(1, 7)], "id long, v long"), b, ("id",))
        assert other.conf.get(writes.TXN_APP_ID_CONF, None) is None
    assert [r.v for r in spark.read.format("delta").load(b).collect()] == [7]  # ... not other's
    assert _txns(b) == {0: [], 1: []}


def test_a_merge_into_a_table_at_a_relative_path(spark, tmp_path):
    """A lake root given relative to the working folder (IOT_LAKE_ROOT=.local/lake)."""
    import os

    table = tmp_path / "lake" / "t"
    spark.createDataFrame([("a", 1)], "id string, v long").write.format("delta").save(str(table))
    relative = os.path.relpath(table)  # from this process's folder, the JVM's too
    assert not Path(relative).is_absolute()
    writes.merge(spark.createDataFrame([("a", 2), ("b", 3)], "id string, v long"), relative, ["id"])
    assert sorted(tuple(r) for r in spark.read.format("delta").load(str(table)).collect()) == [
        ("a", 2),
        ("b", 3),
    ]


def test_a_merge_without_a_txn_replaces_or_keeps_matched_rows_and_inserts_new_ones(spark, tmp_path):
    """Site windows replace theirs whole, every time; landed alerts keep the first copy.

    Only stored rows from ``since`` on can match; a column the batch does not write (a
    metric dropped from the contract) is left null in the rows it inserts or replaces.
    """
    path = str(tmp_path / "t")
    t0 = datetime(2026, 1, 1, 5, 10)
    early = t0.replace(hour=4)
    spark.createDataFrame(
        [("a", t0, 1, 0.5), ("b", early, 2, 0.5)], "id string, at timestamp, v long, old double"
    ).write.format("delta").save(path)
    later = t0 + timedelta(seconds=25)
    rows = spark.createDataFrame(
        [("a", t0.replace(minute=30), 10), ("b", later, 20), ("c", later, 30)],
        "id string, at timestamp, v long",
    )
    # The earliest time, 05:10:25, floored to its minute: a's stored row at 05:10:00 can match.
    minute = int(t0.replace(tzinfo=UTC).timestamp())  # the session's zone is UTC
    assert rows.agg(since_floor_s(F.col("at"))).collect()[0][0] == minute

    def stored() -> list[tuple]:
        return sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())

    writes.merge(rows, path, ("id",), since=("at", minute), keep_existing=True)
    # b's stored row is from 04:10, before the batch's minute: not matched, so inserted.
    kept = [("a", t0, 1, 0.5), ("b", early, 2, 0.5), ("b", later, 20, None), ("c", later, 30, None)]
    assert stored() == kept
    writes.merge(rows, path, ("id",), since=("at", minute))
    writes.merge(rows, path, ("id",), since=("at", minute))  # the same again: no change
    replaced = [("a", t0.replace(minute=30), 10, None), ("b", early, 2, 0.5),
                ("b", later, 20, None), ("c", later, 30, None)]  # fmt: skip
    assert stored() == replaced
    # A batch whose ``since`` is all null has no bound: it still merges.
    none = spark.createDataFrame([("d", None, 40)], "id string, at timestamp, v long")
    since = none.agg(since_floor_s(F.col("at"))).collect()[0][0]
    writes.merge(none, path, ("id",), since=("at", since), keep_existing=True)
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


def _add_minutes(spark, batch, path: str, batch_id: int) -> None:
    """What silver's writer does with a batch's readings."""
    writes.merge(
        gold.device_minute_aggregates(batch, "1 minute"), path,
        ("device_id", "window_start"), update=gold.combine_device_minutes(),
        txn=("q", batch_id), since=("window_start", batch.agg(since_floor_s(F.col("event_time")))
                                    .collect()[0][0]),
    )  # fmt: skip


def test_device_minutes_merged_batch_by_batch_equal_one_aggregation_once_each(spark, tmp_path):
    path = str(tmp_path / "device_1m")
    batch0 = _silver(spark, [("d1", 10, 1, 20.0, None), ("d1", 40, 2, 22.0, None),
                             ("d2", 20, 1, 10.0, 50.0)])  # fmt: skip
    batch1 = _silver(spark, [("d1", 65, 3, 30.0, None), ("d1", 50, 4, 18.0, None),
                             ("d2", 30, 2, None, 70.0)])  # fmt: skip
    ensure_table(spark, path, gold.device_minute_aggregates(batch0, "1 minute"))
    _add_minutes(spark, batch0, path, 0)
    _add_minutes(spark, batch0, path, 0)  # a replayed batch: skipped
    _add_minutes(spark, batch1, path, 1)
    _add_minutes(spark, batch1, path, 1)
    _add_minutes(spark, batch0, path, 0)  # an older batch: skipped too
    assert _txns(path) == {0: [], 1: [("q", 0)], 2: [("q", 1)]}
    stored = spark.read.format("delta").load(path)
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
        stored.select(*cols), [Row(**dict(zip(cols, r, strict=True))) for r in expected]
    )
    everything = gold.device_minute_aggregates(batch0.unionByName(batch1), "1 minute")
    assertDataFrameEqual(stored, everything.select(*stored.columns), rtol=1e-12)


def test_a_window_stored_before_a_metric_existed_absorbs_its_later_readings(spark, tmp_path):
    """The metric's columns were added to the table (null); a late reading of that window
    with the metric gives the metric's aggregates of that reading alone."""
    path = str(tmp_path / "device_1m")
    before = _silver(spark, [("d2", 20, 1, 10.0, 50.0)])
    old = gold.device_minute_aggregates(before, "1 minute")
    humidity = [c for c in old.columns if c.startswith("humidity_pct_")]
    old.drop(*humidity).write.format("delta").save(path)
    assert ensure_table(spark, path, old) == TableChange(added=tuple(humidity))
    _add_minutes(spark, _silver(spark, [("d2", 30, 2, 12.0, 70.0)]), path, 1)
    cols = ["events", "temperature_c_avg", "temperature_c_count", *humidity]
    assertDataFrameEqual(
        spark.read.format("delta").load(path).select(*cols),
        [Row(events=2, temperature_c_avg=11.0, temperature_c_count=2, humidity_pct_min=70.0,
             humidity_pct_avg=70.0, humidity_pct_max=70.0, humidity_pct_count=1)],
    )  # fmt: skip


def test_concurrent_writes_inherit_the_callers_local_properties(spark):
    sc = spark.sparkContext
    seen: list[str | None] = []
    sc.setLocalProperty("spark.scheduler.pool", "hot")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            writes.run_concurrently(
                spark,
                lambda: seen.append(sc.getLocalProperty("spark.scheduler.pool")),
                lambda: seen.append(sc.getLocalProperty("spark.scheduler.pool")),
            )
    finally:
        sc.setLocalProperty("spark.scheduler.pool", None)
    assert seen == ["hot", "hot"]


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

    assert writes.has_rows(batch([1, 2])) is True
    assert writes.has_rows(batch([1])) is False
    before = compilations()
    assert writes.has_rows(batch([3, 4])) is True
    assert writes.has_rows(batch([0])) is False
    assert compilations() == before
    batch([1, 2]).isEmpty()
    before = compilations()
    batch([3, 4]).isEmpty()
    assert compilations() > before  # the control: a LIMIT is new code every time


def test_no_streaming_write_runs_an_action_under_a_limit():
    """isEmpty(), first(), head() and take() on a micro-batch compile new code every batch.

    Silver's schema-drift check once called ``isEmpty()`` per batch: Janino and the JIT
    then compiled through every batch, and the processor's throughput fell threefold.
    The per-batch code (transforms, writes, the wiring) must use ``writes.has_rows``.
    """
    import re

    import processor

    limited = re.compile(r"\.(isEmpty|first|head|take|limit)\(")
    # Allowed: an empty table's schema (written once), a table's clustering (read once at
    # start) and OPTIMIZE's metrics (maintain).
    allowed = {
        ("tables.py", "empty.limit(0)"),
        ("tables.py", 'spark.sql(f"DESCRIBE DETAIL {table}")'),
        ("maintenance.py", '.select("metrics.*").first()'),
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


def _hold(events, session_id: str, hold_s: float) -> None:  # a foreachBatch process's MERGE
    from types import SimpleNamespace

    with writes._session_settings_held(SimpleNamespace(session_id=session_id)):
        # Stamped inside the hold: a queue's feeder thread may deliver "out" after the next
        # holder's "in", but the clock (one for every process) orders them as they held.
        events.put(("in", time.monotonic()))
        time.sleep(hold_s)
        events.put(("out", time.monotonic()))


@pytest.mark.parametrize(("sessions", "expected"), [
    (("s1", "s1"), ["in", "out", "in", "out"]),  # one session: one MERGE at a time
    (("s1", "s2"), ["in", "in", "out", "out"]),  # two sessions: no wait
])  # fmt: skip
def test_merges_on_one_connect_session_hold_its_settings_one_at_a_time(sessions, expected):
    """Through Spark Connect every query's foreachBatch process shares the session."""
    import multiprocessing

    events = multiprocessing.get_context("fork").Queue()
    procs = [
        multiprocessing.get_context("fork").Process(target=_hold, args=(events, s, 4.0))
        for s in sessions
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    stamped = sorted((events.get(timeout=10) for _ in range(4)), key=lambda e: e[1])
    assert [what for what, _ in stamped] == expected


@pytest.mark.timeout(30)
def test_a_classic_session_holds_nothing():
    """A classic session (no session_id): two holds at once do not wait for each other."""
    from types import SimpleNamespace

    classic = SimpleNamespace()
    with writes._session_settings_held(classic), writes._session_settings_held(classic):
        pass
