"""What the sources ask of Spark's readers."""

from __future__ import annotations

import pyarrow as pa

from processor import sources
from processor.settings import ProcessorSettings


def _source_options(df) -> dict[str, str]:
    """The options of a streaming DataFrame's source, as its logical plan holds them."""
    node = df._jdf.queryExecution().analyzed()
    while node.children().nonEmpty():  # down to the source, under the coalesce
        node = node.children().head()
    return dict(node.extraOptions().asCaseSensitiveMap())


def _read_tasks(df) -> int | None:
    """The most tasks the plan reads its source with (its coalesce), or None when unbounded."""
    root = df._jdf.queryExecution().analyzed()
    return root.numPartitions() if root.nodeName() == "Repartition" else None


def test_micro_batch_kafka_reads_wait_briefly_for_fetches_and_real_time_reads_do_not(spark):
    """A fetch beyond what arrived waited 500 ms (Kafka's default) at the broker, in every
    Kafka task of silver's micro-batches; real-time mode's tasks keep Kafka's default."""
    settings = ProcessorSettings(
        kafka={"bootstrap_servers": "localhost:9", "topic": "events"}, max_offsets_per_trigger=7
    )
    micro = _source_options(sources.kafka_stream(spark, settings))
    assert micro["kafka.fetch.max.wait.ms"] == "20"
    assert micro["maxOffsetsPerTrigger"] == "7"
    assert micro["subscribe"] == "events"
    bounded = _source_options(sources.kafka_stream(spark, settings, max_offsets=5))
    assert bounded["maxOffsetsPerTrigger"] == "5"  # the smaller limit
    wider = _source_options(sources.kafka_stream(spark, settings, max_offsets=50))
    assert wider["maxOffsetsPerTrigger"] == "7"
    real_time = _source_options(sources.kafka_stream(spark, settings, micro_batch=False))
    assert "kafka.fetch.max.wait.ms" not in real_time
    assert "maxOffsetsPerTrigger" not in real_time


def test_micro_batch_kafka_reads_take_at_most_shuffle_partitions_tasks(spark):
    settings = ProcessorSettings(
        kafka={"bootstrap_servers": "localhost:9", "topic": "events"}, shuffle_partitions=3
    )
    assert _read_tasks(sources.kafka_stream(spark, settings)) == 3
    assert _read_tasks(sources.kafka_stream(spark, settings, micro_batch=False)) is None


def _reads_files(df) -> bool:
    """Whether the plan scans the table's Parquet files (Spark's reader), not rows in memory."""
    return "FileScan" in df._jdf.queryExecution().executedPlan().toString()


def test_a_small_table_is_read_by_delta_rs_and_a_large_one_by_spark(spark, tmp_path):
    """Past ``max_rows`` Spark reads the table, from the hour of ``since`` on (a bound that
    changes once an hour: the same generated code from batch to batch)."""
    from datetime import UTC, datetime, timedelta

    import pytest
    from deltalake import write_deltalake
    from pyspark.sql import Row
    from pyspark.testing import assertDataFrameEqual

    path = str(tmp_path / "minutes")
    t0 = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
    at = [t0 - timedelta(minutes=1), t0, t0 + timedelta(minutes=1)]
    write_deltalake(path, pa.table({"at": at, "n": [0, 1, 2]}))
    write_deltalake(path, pa.table({"at": [t0 + timedelta(minutes=2)], "n": [3]}), mode="append")
    rows = {n: Row(at=t0.replace(tzinfo=None) + timedelta(minutes=n - 1), n=n) for n in range(4)}
    since = ("at", t0 + timedelta(minutes=1))

    small = sources.small_delta_table(spark, path, since=since)
    assert not _reads_files(small)
    assertDataFrameEqual(small, [rows[2], rows[3]])
    assert sources.small_delta_table(spark, path).count() == 4

    large = sources.small_delta_table(spark, path, since=since, max_rows=1)
    assert _reads_files(large)
    assertDataFrameEqual(large, [rows[1], rows[2], rows[3]])

    with pytest.raises(ValueError, match="has no time zone"):
        sources.small_delta_table(spark, path, since=("at", datetime(2026, 1, 1, 8, 1)))
