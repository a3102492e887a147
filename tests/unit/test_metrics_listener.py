"""processor.metrics.MetricsListener without Spark: a failed write is one line, and close waits."""

from __future__ import annotations

import threading
import time

from processor.metrics import MetricsListener


class _Spark:
    """Stands in for the session: each write takes ``write_s``, then fails or is kept."""

    def __init__(self, write_s: float = 0.0, error: Exception | None = None) -> None:
        self.write_s, self.error = write_s, error
        self.written: list[list[dict]] = []
        self.started = threading.Event()

    def createDataFrame(self, rows, schema):  # noqa: N802 (SparkSession's name)
        self.started.set()
        time.sleep(self.write_s)
        if self.error is not None:
            raise self.error
        return _Frame(self, rows)


class _Frame:
    def __init__(self, spark: _Spark, rows: list[dict]) -> None:
        self.spark, self.rows, self.write = spark, rows, self

    def format(self, _name: str) -> _Frame:
        return self

    def mode(self, _name: str) -> _Frame:
        return self

    def save(self, _path: str) -> None:
        self.spark.written.append(self.rows)


def test_a_failed_write_is_one_line_and_the_stream_goes_on(capsys) -> None:
    error = RuntimeError(
        "An error occurred while calling o3913.save.\n: org.apache.spark.SparkException: "
        "Job 4 cancelled because SparkContext was shut down\n\tat org.apache.spark.X(X.scala:1)"
    )
    spark = _Spark(error=error)
    listener = MetricsListener(spark, "/lake/ops/pipeline_metrics", flush_s=0.05)  # type: ignore[arg-type]
    listener._rows.append({"query_name": "silver"})
    assert spark.started.wait(5)
    time.sleep(0.2)
    listener._stop.set()
    out = capsys.readouterr().err.splitlines()
    assert out and out[0].startswith(
        "[processor] could not write pipeline metrics: An error occurred while calling o3913.save. ("
    ), out
    assert not any(line.startswith((":", "\tat")) for line in out), out


def test_close_lets_a_write_in_progress_end_before_it_returns() -> None:
    spark = _Spark(write_s=6.0)  # longer than the 5 s that close used to wait
    listener = MetricsListener(spark, "/lake/ops/pipeline_metrics", flush_s=0.05)  # type: ignore[arg-type]
    listener._rows.append({"query_name": "silver"})
    assert spark.started.wait(5)
    listener.close()
    assert spark.written == [[{"query_name": "silver"}]]
    assert not listener._thread.is_alive()
