"""Pipeline metrics: every query's progress, appended to ``ops/pipeline_metrics``.

A ``StreamingQueryListener`` turns each progress event into one row
(``progress_row``, pure) and queues it; a background thread appends the queue
to the Delta table every few seconds (in the background scheduler pool), so the
listener never blocks the queries.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from common.cli import console, first_line, full_trace_hint
from common.lake import READER_TABLE_PROPERTIES
from processor.driver_jvm import went_away
from processor.lifecycle import say
from processor.session import BACKGROUND_POOL, is_remote

log = logging.getLogger("iot_pulse.processor")
# How long closing waits for a metrics write in progress (before its own last write).
CLOSE_TIMEOUT_S = 120.0
# How long the processor waits, once its queries stopped, for their last progress events.
DRAIN_TIMEOUT_S = 30.0

METRICS_SCHEMA = (
    "query_name string, query_id string, run_id string, batch_id long, timestamp timestamp, "
    "num_input_rows long, input_rows_per_s double, processed_rows_per_s double, "
    "batch_duration_ms long, watermark timestamp, state_rows long, "
    "rows_dropped_by_watermark long, kafka_offsets_behind long"
)


def _ts(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def progress_row(progress: dict[str, Any]) -> dict[str, Any]:
    """One metrics row from a query progress (``StreamingQueryProgress.json`` parsed).

    Args:
        progress: The progress as a dict.

    Returns:
        A row following ``METRICS_SCHEMA``. ``kafka_offsets_behind`` is the largest
        per-partition lag over the query's Kafka sources (null without one).
    """
    state_ops = progress.get("stateOperators") or []
    behind = [
        int(float(src["metrics"]["maxOffsetsBehindLatest"]))
        for src in progress.get("sources") or []
        if "maxOffsetsBehindLatest" in (src.get("metrics") or {})
    ]
    watermark = (progress.get("eventTime") or {}).get("watermark")
    wm = _ts(watermark)
    return {
        "query_name": progress.get("name"),
        "query_id": progress.get("id"),
        "run_id": progress.get("runId"),
        "batch_id": int(progress.get("batchId", -1)),
        "timestamp": _ts(progress.get("timestamp")),
        "num_input_rows": int(progress.get("numInputRows") or 0),
        "input_rows_per_s": float(progress.get("inputRowsPerSecond") or 0.0),
        "processed_rows_per_s": float(progress.get("processedRowsPerSecond") or 0.0),
        "batch_duration_ms": int((progress.get("durationMs") or {}).get("triggerExecution") or 0),
        # Spark reports the epoch before the first watermark is set.
        "watermark": wm if wm is not None and wm.year > 1970 else None,
        "state_rows": sum(int(op.get("numRowsTotal") or 0) for op in state_ops),
        "rows_dropped_by_watermark": sum(
            int(op.get("numRowsDroppedByWatermark") or 0) for op in state_ops
        ),
        "kafka_offsets_behind": max(behind) if behind else None,
    }


def progress_line(progress: dict[str, Any]) -> str:
    """One readable line for a query's progress: rows, rate and where the time went.

    Args:
        progress: ``StreamingQueryProgress`` as a dict (its JSON).
    """
    durations = progress.get("durationMs") or {}
    total = int(durations.get("triggerExecution") or 0)
    parts = sorted(
        ((k, int(v)) for k, v in durations.items() if k != "triggerExecution" and v),
        key=lambda kv: -kv[1],
    )[:3]
    rate = progress.get("processedRowsPerSecond") or 0.0
    return (
        f"[progress] {progress.get('name')} batch {progress.get('batchId')}: "
        f"{int(progress.get('numInputRows') or 0):,} rows in {total:,} ms "
        f"({rate:,.0f} rows/s; " + ", ".join(f"{k} {v:,}" for k, v in parts) + ")"
    )


def append_metrics(spark: SparkSession, rows: list[dict[str, Any]], path: str) -> None:
    """Append ``progress_row`` rows to ``ops/pipeline_metrics`` with Spark's writer.

    A table deleted meanwhile (to clear the pipeline's history) is created anew.

    Args:
        spark: The session.
        rows: The rows (``METRICS_SCHEMA``'s columns; times UTC-aware).
        path: Location of the table (``processor.lake_setup`` created it).
    """
    if not is_remote(spark):  # in the flushing thread: its jobs take the background share
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", BACKGROUND_POOL)
    frame = spark.createDataFrame(rows, METRICS_SCHEMA)  # type: ignore[type-var]  # PySpark takes dicts (matched to the schema by name); its overloads list only Row, list and tuple rows
    frame.write.format("delta").mode("append").options(**READER_TABLE_PROPERTIES).save(path)


def _say_failure(what: str, exc: Exception) -> None:
    """One line on the console (the trace goes to the log): the pipeline goes on."""
    log.error(what, exc_info=exc)
    say(f"{what}: {first_line(exc)} ({full_trace_hint()})")


def _guarded(what: str, handle: Callable[[str], None], read: Callable[[], str]) -> None:
    """``handle(read())``; a failure is one line (a trace per event would flood the log)."""
    try:
        handle(read())
    except Exception as exc:
        _say_failure(what, exc)


class MetricsListener(StreamingQueryListener):
    """Queues a metrics row per progress event and flushes the queue to Delta.

    Registered with ``spark.streams.addListener``: on a classic session Spark calls it
    through the driver's Python gateway; through Spark Connect the client receives the
    events from the server. A failure in a callback is one line, not a trace per event.
    """

    def __init__(
        self,
        spark: SparkSession,
        path: str,
        flush_s: float = 10.0,
        log: bool = False,
    ) -> None:
        """Start the flusher thread.

        Args:
            spark: The session that writes the rows.
            path: Location of ``ops/pipeline_metrics``.
            flush_s: Seconds between appends.
            log: Also print a line per micro-batch (``progress_line``) to stderr.
        """
        self._log = log
        self._path = path
        self._spark = spark
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        # Run ids of the queries seen starting and not yet seen ending.
        self._running: set[str] = set()
        self._none_running = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._flush_s = flush_s
        self._thread = threading.Thread(target=self._loop, name="metrics-flush", daemon=True)
        self._thread.start()

    def record(self, progress_json: str) -> None:
        """Queue one progress (its JSON) as a row, and print its line if asked to."""
        progress = json.loads(progress_json)
        if self._log and progress.get("numInputRows"):
            console.info("%s", progress_line(progress))
        row = progress_row(progress)
        with self._lock:
            self._rows.append(row)

    def query_started(self, run_id: str) -> None:
        """Note a query run that ``drain`` waits for."""
        with self._lock:
            self._running.add(run_id)

    def query_ended(self, run_id: str) -> None:
        """Note a query run's end: Spark delivers it after the run's last progress."""
        with self._lock:
            self._running.discard(run_id)
            self._none_running.notify_all()

    def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> bool:
        """Wait until every query seen starting has been seen ending; say whether it was.

        Spark delivers listener events on a thread of its own, after the queries moved
        on, and a query's end after its last progress: once it has arrived, every
        progress of the run is queued. A listener removed before then loses the last
        micro-batches' rows.
        """
        with self._none_running:
            return self._none_running.wait_for(lambda: not self._running, timeout_s)

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's API
        """Note the run."""
        _guarded("could not record a query's start", self.query_started, lambda: str(event.runId))

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        """Queue the progress as a row."""
        _guarded("could not record a query's progress", self.record, lambda: event.progress.json)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        """Nothing to record."""

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        """Note the run's end."""
        _guarded("could not record a query's end", self.query_ended, lambda: str(event.runId))

    def flush(self) -> int:
        """Append the queued rows now; return how many were written."""
        with self._lock:
            rows, self._rows = self._rows, []
        if not rows:
            return 0
        append_metrics(self._spark, rows, self._path)
        return len(rows)

    def _loop(self) -> None:
        while not self._stop.wait(self._flush_s):
            try:
                self.flush()
            except Exception as exc:  # keep the pipeline running; say what failed
                # A signal to every process of the run stopped the driver's JVM under the
                # write: the run's stop says the last metrics are lacking.
                if not went_away(exc, "under a metrics write"):
                    _say_failure("could not write pipeline metrics", exc)

    def close(self, write_rest: bool = True) -> None:
        """Stop the thread, let a write in progress end, and write what is left.

        Args:
            write_rest: False when Spark has gone, and with it the writer.
        """
        self._stop.set()
        # A write in progress ends first, so the last rows follow it: on a busy machine or
        # a remote lake a write takes seconds.
        self._thread.join(timeout=CLOSE_TIMEOUT_S)
        if not write_rest:
            return
        try:
            self.flush()
        except Exception as exc:  # the processor still stops Spark and says why it stopped
            _say_failure("could not write the last pipeline metrics", exc)
