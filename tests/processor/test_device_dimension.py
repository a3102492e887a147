"""Silver's device dimension: a cached copy that plans without Delta and follows the table."""

from __future__ import annotations

import time

import pytest
from deltalake import write_deltalake
from pyspark.sql import Row
from pyspark.sql.catalog import Catalog
from pyspark.testing import assertDataFrameEqual

from processor import sources
from processor.device_dimension import CachedDimension

SCHEMA = "device_id string, site string"


def _write(spark, path: str, rows: list[tuple[str, str]], mode: str = "overwrite") -> None:
    """Rewrite the table as another process would: delta-rs, not this session's Spark."""
    write_deltalake(path, spark.createDataFrame(rows, SCHEMA).toArrow(), mode=mode)


def _plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


class _Query:
    """What ``follow`` asks of a streaming query: whether it is still active."""

    isActive = True  # noqa: N815 - StreamingQuery's name


@pytest.fixture
def table(spark, tmp_path) -> str:
    path = str(tmp_path / "devices")
    _write(spark, path, [("dev-1", "Harbor")], mode="error")
    return path


def test_a_read_of_the_table_plans_over_the_copy_not_over_delta(spark, table):
    dims = CachedDimension(spark, table, {})
    try:
        joined = spark.createDataFrame([("dev-1", 7)], "device_id string, seq int").join(
            sources.delta_table(spark, table), "device_id"
        )
        # The join's one scan of the table is the cached copy's.
        assert _plan(joined).count("InMemoryTableScan") == 1
        assertDataFrameEqual(joined, [Row(device_id="dev-1", seq=7, site="Harbor")])
    finally:
        dims.release()


def test_the_copy_is_read_again_only_when_the_version_changes(spark, table):
    dims = CachedDimension(spark, table, {})
    try:
        assertDataFrameEqual(dims.frame, [Row(device_id="dev-1", site="Harbor")])
        assert dims.refresh_if_changed() is False

        _write(spark, table, [("dev-1", "Relocated"), ("dev-2", "Harbor")])
        # The copy is what the joins see until the version is checked.
        assertDataFrameEqual(
            sources.delta_table(spark, table), [Row(device_id="dev-1", site="Harbor")]
        )
        assert dims.refresh_if_changed() is True
        assert dims.version == 1
        assertDataFrameEqual(
            sources.delta_table(spark, table),
            [Row(device_id="dev-1", site="Relocated"), Row(device_id="dev-2", site="Harbor")],
        )
        assert "InMemoryTableScan" in _plan(sources.delta_table(spark, table))
        assert dims.refresh_if_changed() is False
    finally:
        dims.release()


def test_a_copy_left_by_an_earlier_query_is_not_reused_stale_nor_dropped_by_it(spark, table):
    first = CachedDimension(spark, table, {})
    assertDataFrameEqual(first.frame, [Row(device_id="dev-1", site="Harbor")])
    _write(spark, table, [("dev-1", "Relocated")])  # never seen by ``first``
    second = CachedDimension(spark, table, {})
    try:
        assertDataFrameEqual(second.frame, [Row(device_id="dev-1", site="Relocated")])
        first.release()  # the earlier query ends after the later one started
        assert second.frame.storageLevel.useMemory
        assert "InMemoryTableScan" in _plan(sources.delta_table(spark, table))
    finally:
        second.release()
    assert not second.frame.storageLevel.useMemory


def test_a_failed_read_keeps_the_copy_and_is_tried_again(spark, table, monkeypatch):
    dims = CachedDimension(spark, table, {})
    try:
        _write(spark, table, [("dev-1", "Relocated")])
        real = Catalog.refreshByPath

        def lost_then_failed(self, path: str) -> None:
            # As when Spark has dropped the entry and then fails to read the table again.
            sources.delta_table(spark, path).unpersist()
            raise OSError("the lake did not answer")

        monkeypatch.setattr(Catalog, "refreshByPath", lost_then_failed)
        with pytest.raises(OSError, match="did not answer"):
            dims.refresh_if_changed()
        assert dims.version == 0  # not counted as read
        assert "InMemoryTableScan" in _plan(sources.delta_table(spark, table))

        monkeypatch.setattr(Catalog, "refreshByPath", real)
        assert dims.refresh_if_changed() is True
        assert dims.version == 1
        assertDataFrameEqual(
            sources.delta_table(spark, table), [Row(device_id="dev-1", site="Relocated")]
        )
    finally:
        dims.release()


def test_follow_keeps_the_copy_current_then_drops_it_when_the_query_ends(spark, table):
    dims = CachedDimension(spark, table, {})
    query = _Query()
    thread = dims.follow(query, interval_s=0.05)  # type: ignore[arg-type]
    try:
        _write(spark, table, [("dev-1", "Relocated")])
        deadline = time.monotonic() + 30
        while dims.version != 1:  # set once the copy has been read again
            assert time.monotonic() < deadline, "the new version was never read"
            time.sleep(0.05)
        assertDataFrameEqual(dims.frame, [Row(device_id="dev-1", site="Relocated")])
        assert dims.frame.storageLevel.useMemory
    finally:
        query.isActive = False
        thread.join(30)
    assert not thread.is_alive()
    assert not dims.frame.storageLevel.useMemory  # no longer cached
