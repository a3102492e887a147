"""processor.metrics.MetricsListener: rows from real progress events, a failed write is one
line, and close waits for a write in progress."""

from __future__ import annotations

import shutil
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from processor import metrics
from processor.metrics import METRICS_SCHEMA, MetricsListener

# The listener's session, where the writes are stand-ins that need none.
NO_SPARK = cast(SparkSession, None)


class _Writes:
    """Stands in for ``append_metrics``: each write takes ``write_s``, then fails or is kept."""

    def __init__(self, write_s: float = 0.0, error: Exception | None = None) -> None:
        self.write_s, self.error = write_s, error
        self.written: list[list[dict]] = []
        self.started = threading.Event()

    def __call__(self, _spark: object, rows: list[dict], _path: str) -> None:
        self.started.set()
        time.sleep(self.write_s)
        if self.error is not None:
            raise self.error
        self.written.append(rows)


def test_a_failed_write_is_one_line_and_the_stream_goes_on(capsys, monkeypatch) -> None:
    error = OSError(
        "Generic S3 error: Error performing put request\n: caused by\n\tat reqwest::X (x.rs:1)"
    )
    writes = _Writes(error=error)
    monkeypatch.setattr(metrics, "append_metrics", writes)
    listener = MetricsListener(NO_SPARK, "/lake/ops/pipeline_metrics", flush_s=0.05)
    listener._rows.append({"query_name": "silver"})
    assert writes.started.wait(5)
    time.sleep(0.2)
    listener._stop.set()
    out = capsys.readouterr().err.splitlines()
    assert out and out[0].startswith(
        "[processor] could not write pipeline metrics: Generic S3 error: Error performing put "
        "request ("
    ), out
    assert not any(line.startswith((":", "\tat")) for line in out), out


def test_a_write_the_driver_jvm_died_under_says_nothing(capsys, monkeypatch) -> None:
    # A signal to every process of the run: the run's stop says the metrics are lacking.
    writes = _Writes(error=ConnectionRefusedError(111, "Connection refused"))
    asked: list[str] = []
    monkeypatch.setattr(metrics, "append_metrics", writes)
    monkeypatch.setattr(metrics, "went_away", lambda _exc, when: asked.append(when) or True)
    listener = MetricsListener(NO_SPARK, "/lake/ops/pipeline_metrics", flush_s=0.05)
    listener._rows.append({"query_name": "silver"})
    assert writes.started.wait(5)
    time.sleep(0.2)
    listener._stop.set()
    assert (capsys.readouterr().err, asked) == ("", ["under a metrics write"])


def test_close_lets_a_write_in_progress_end_before_it_returns(monkeypatch) -> None:
    writes = _Writes(write_s=6.0)  # longer than the 5 s that close used to wait
    monkeypatch.setattr(metrics, "append_metrics", writes)
    listener = MetricsListener(NO_SPARK, "/lake/ops/pipeline_metrics", flush_s=0.05)
    listener._rows.append({"query_name": "silver"})
    assert writes.started.wait(5)
    listener.close()
    assert writes.written == [[{"query_name": "silver"}]]
    assert not listener._thread.is_alive()


def test_a_failed_last_write_is_one_line_and_close_returns(capsys, monkeypatch) -> None:
    writes = _Writes(error=OSError("Generic S3 error: the bucket is gone\n\tat reqwest::X"))
    monkeypatch.setattr(metrics, "append_metrics", writes)
    listener = MetricsListener(NO_SPARK, "/lake/ops/pipeline_metrics", flush_s=3600)
    listener._rows.append({"query_name": "silver"})
    listener.close()  # does not raise: the processor still stops Spark
    out = capsys.readouterr().err.splitlines()
    assert len(out) == 1 and out[0].startswith(
        "[processor] could not write the last pipeline metrics: Generic S3 error: the bucket "
        "is gone ("
    ), out


def test_each_batch_of_a_query_is_one_row_written_by_delta_rs(
    spark, tmp_path: Path, monkeypatch
) -> None:
    """Spark's events reach ``record`` as their JSON (PySpark's own listener, as through
    Spark Connect), and ``drain`` waits for the last of them, however late the listener
    bus delivers it."""
    record = MetricsListener.record

    def slow_record(self: MetricsListener, progress_json: str) -> None:
        time.sleep(1.0)  # a busy driver: the events arrive after the query has ended
        record(self, progress_json)

    monkeypatch.setattr(MetricsListener, "record", slow_record)
    table = str(tmp_path / "pipeline_metrics")
    spark.createDataFrame([], METRICS_SCHEMA).write.format("delta").save(table)
    listener = MetricsListener(spark, table, flush_s=3600)
    spark.streams.addListener(listener)
    try:
        source = str(tmp_path / "source")
        for n in (7, 3):  # two files, a micro-batch each
            spark.range(n).coalesce(1).write.mode("append").parquet(source)
        query = (
            spark.readStream.schema("id long")
            .option("maxFilesPerTrigger", 1)
            .parquet(source)
            .writeStream.format("noop")
            .queryName("metrics_probe")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert listener.drain(30)
    finally:
        spark.streams.removeListener(listener)
        listener.close()
    got = DeltaTable(table).to_pyarrow_table().to_pylist()
    assert sorted(r["batch_id"] for r in got) == [0, 1]
    # Progress times are UTC: the rows' are this minute's, whatever the machine's zone.
    for r in got:
        assert abs(r["timestamp"] - datetime.now(UTC)) < timedelta(minutes=5), r
        assert r["watermark"] is None, r  # the query has none
    assert sorted((r["query_name"], r["num_input_rows"]) for r in got) == [
        ("metrics_probe", 3),
        ("metrics_probe", 7),
    ]


def test_append_metrics_keeps_utc_times(spark, tmp_path: Path) -> None:
    table = str(tmp_path / "m")
    spark.createDataFrame([], METRICS_SCHEMA).write.format("delta").save(table)
    row = metrics.progress_row(
        {"name": "silver", "timestamp": "2026-11-27T10:00:01.500Z", "batchId": 4}
    )
    metrics.append_metrics(spark, [row], table)
    got = DeltaTable(table).to_pyarrow_table(columns=["query_name", "timestamp"]).to_pylist()
    assert got == [
        {"query_name": "silver", "timestamp": datetime(2026, 11, 27, 10, 0, 1, 500000, tzinfo=UTC)}
    ]


def test_a_deleted_metrics_table_is_created_anew_at_the_next_append(spark, tmp_path: Path) -> None:
    table = tmp_path / "pipeline_metrics"
    spark.createDataFrame([], METRICS_SCHEMA).write.format("delta").save(str(table))
    listener = MetricsListener(spark, str(table), flush_s=3600)
    row = metrics.progress_row({"name": "silver", "batchId": 1})
    try:
        listener._rows.append(row)
        assert listener.flush() == 1
        shutil.rmtree(table)  # the user clears the pipeline's history
        listener._rows.append(row | {"batch_id": 2})
        assert listener.flush() == 1
    finally:
        listener._stop.set()
    got = DeltaTable(str(table))
    assert got.protocol().reader_features in (None, [])  # readable by the dashboard
    assert got.to_pyarrow_table(columns=["query_name", "batch_id"]).to_pylist() == [
        {"query_name": "silver", "batch_id": 2}
    ]
