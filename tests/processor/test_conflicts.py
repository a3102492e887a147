"""Commits that lose to a concurrent one are written again (processor.conflicts), and
``maintain`` compacts tables while streams write them: real Delta tables."""

from __future__ import annotations

from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from common.lake import Table
from processor import conflicts


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
    refused: list[BaseException] = []
    failed: list[BaseException] = []

    def merge() -> None:
        target = DeltaTable.forPath(spark, path).alias("t")
        target.merge(
            source.alias("s"), "t.id = s.id"
        ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()

    def run() -> None:
        try:
            conflicts.retry_conflicts(merge, "test", backoff_s=0.0, on_conflict=refused.append)
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
    assert [conflicts.error_condition(c) for c in refused] == [
        "DELTA_CONCURRENT_APPEND.WITHOUT_HINT"
    ]
    assertDataFrameEqual(
        spark.read.format("delta").load(path), [Row(id=1, v=11), Row(id=2, v=20), Row(id=3, v=30)]
    )


def test_retry_conflicts_raises_any_other_error_at_once(spark, tmp_path):
    calls: list[int] = []

    def missing_table() -> None:
        calls.append(1)
        spark.read.format("delta").load(str(tmp_path / "nothing")).collect()

    with pytest.raises(Exception) as info:
        conflicts.retry_conflicts(missing_table, "test", backoff_s=0.0)
    assert not conflicts.is_conflict(info.value)
    assert calls == [1]  # not a conflict: no second try
    assert not conflicts.is_conflict(ValueError("DELTA_CONCURRENT_APPEND"))


class _RefusedError(Exception):
    """An error that names Delta's condition for a lost commit, as delta-spark's do."""


def test_retry_conflicts_tries_again_after_a_doubling_wait_and_raises_the_last_conflict(
    monkeypatch, capsys
):
    import time

    waits: list[float] = []
    monkeypatch.setattr(time, "sleep", waits.append)
    tries: list[int] = []

    def lose_twice() -> str:
        tries.append(1)
        if len(tries) <= 2:
            raise _RefusedError(f"[DELTA_CONCURRENT_APPEND.WITHOUT_HINT] lost {len(tries)}")
        return "written"

    seen: list[BaseException] = []
    assert conflicts.retry_conflicts(lose_twice, "t", backoff_s=0.25, on_conflict=seen.append) == (
        "written"
    )
    assert (len(tries), waits, [str(e) for e in seen]) == (
        3,
        [0.25, 0.5],
        [
            "[DELTA_CONCURRENT_APPEND.WITHOUT_HINT] lost 1",
            "[DELTA_CONCURRENT_APPEND.WITHOUT_HINT] lost 2",
        ],
    )
    assert capsys.readouterr().err.splitlines() == [
        "[processor] t: a concurrent commit won (DELTA_CONCURRENT_APPEND.WITHOUT_HINT); "
        "writing again (try 2 of 5)",
        "[processor] t: a concurrent commit won (DELTA_CONCURRENT_APPEND.WITHOUT_HINT); "
        "writing again (try 3 of 5)",
    ]

    tries.clear()
    waits.clear()

    def always_lose() -> None:
        tries.append(1)
        raise _RefusedError(f"[DELTA_CONCURRENT_WRITE] lost {len(tries)}")

    with pytest.raises(_RefusedError, match=r"lost 3$"):
        conflicts.retry_conflicts(always_lose, "t", attempts=3, backoff_s=1.0)
    assert (len(tries), waits) == (3, [1.0, 2.0])


def test_maintain_compacts_each_table_and_keeps_its_rows(spark, tmp_path, capsys):
    from processor.maintenance import maintain
    from processor.settings import ProcessorSettings

    settings = ProcessorSettings(lake={"root": str(tmp_path / "lake")})
    at = settings.lake.table
    for i in range(3):
        spark.createDataFrame([(i, "x")], "id long, v string").write.format("delta").mode(
            "append"
        ).save(at(Table.BRONZE_EVENTS))
    spark.createDataFrame([(9, "y")], "id long, v string").write.format("delta").save(
        at(Table.GOLD_FLEET_SUMMARY)
    )
    from processor.maintenance import MAX_FILE_CONF

    before = spark.conf.get(MAX_FILE_CONF, None)
    spark.sparkContext.setJobGroup("maintain", "maintain")
    try:
        maintain(spark, settings)
    finally:
        spark.sparkContext._jsc.clearJobGroup()  # PySpark has no clearJobGroup of its own
    assert spark.conf.get(MAX_FILE_CONF, None) == before  # the session's own setting back
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[maintain]")]
    assert lines == [
        "[maintain] bronze/events: compacted 3 files into 1",
        "[maintain] gold/fleet_summary: compacted 0 files into 0",
    ]
    assertDataFrameEqual(
        spark.read.format("delta").load(at(Table.BRONZE_EVENTS)),
        [Row(id=i, v="x") for i in range(3)],
    )
    assert DeltaTable.forPath(spark, at(Table.BRONZE_EVENTS)).detail().first()["numFiles"] == 1
    # VACUUM's listing ran as many tasks as the session's shuffle partitions, not 10,000.
    assert _most_tasks_in_a_stage(spark, "maintain") == 2


def test_maintain_asked_to_stop_leaves_the_tables_after_the_current_one(spark, tmp_path, capsys):
    from processor.maintenance import maintain
    from processor.settings import ProcessorSettings

    settings = ProcessorSettings(lake={"root": str(tmp_path / "lake")})
    at = settings.lake.table
    for table in (Table.BRONZE_EVENTS, Table.GOLD_FLEET_SUMMARY):
        for i in range(2):
            spark.createDataFrame([(i,)], "id long").write.format("delta").mode("append").save(
                at(table)
            )
    asked: list[bool] = []

    def stop_once_bronze_is_done() -> bool:  # the signal arrives while bronze is compacted
        asked.append("[maintain] bronze/events" in capsys.readouterr().out)
        return asked[-1]

    assert maintain(spark, settings, should_stop=stop_once_bronze_is_done) is False
    assert asked.count(True) == 1
    assert DeltaTable.forPath(spark, at(Table.BRONZE_EVENTS)).detail().first()["numFiles"] == 1
    assert DeltaTable.forPath(spark, at(Table.GOLD_FLEET_SUMMARY)).detail().first()["numFiles"] == 2
    assert maintain(spark, settings) is True  # run again: the rest
    assert DeltaTable.forPath(spark, at(Table.GOLD_FLEET_SUMMARY)).detail().first()["numFiles"] == 1


def _most_tasks_in_a_stage(spark, group: str) -> int:
    tracker = spark.sparkContext.statusTracker()
    stages = [
        tracker.getStageInfo(stage)
        for job in tracker.getJobIdsForGroup(group)
        for stage in tracker.getJobInfo(job).stageIds
    ]
    return max(s.numTasks for s in stages if s is not None)
