"""Where the processor writes: Delta tables, each write exactly-once.

* Plain appends use Delta's streaming sink, which is idempotent per batch.
* ``foreachBatch`` writers use ``txnAppId``/``txnVersion`` (appends) or a
  MERGE on the table's keys (upserts), so a replayed batch changes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from processor.settings import ProcessorSettings


def with_trigger(
    writer: DataStreamWriter, settings: ProcessorSettings, background: bool = False
) -> DataStreamWriter:
    """Apply the configured trigger: ``availableNow`` or a processing-time interval.

    Args:
        writer: The stream's writer.
        settings: Processor settings.
        background: Use ``background_trigger_interval`` (queries off the hot path).
    """
    if settings.trigger == "available_now":
        return writer.trigger(availableNow=True)
    interval = settings.background_trigger_interval if background else settings.trigger_interval
    return writer.trigger(processingTime=interval)


def ensure_table(spark: SparkSession, path: str, empty: DataFrame) -> None:
    """Create an empty Delta table with ``empty``'s schema unless one exists at ``path``."""
    if not DeltaTable.isDeltaTable(spark, path):
        empty.limit(0).write.format("delta").mode("ignore").save(path)


def delta_stream(
    df: DataFrame,
    path: str,
    checkpoint: str,
    name: str,
    settings: ProcessorSettings,
    output_mode: str = "append",
    background: bool = False,
) -> StreamingQuery:
    """Write a stream to a Delta table with its own checkpoint (Delta's exactly-once sink).

    ``append`` adds each batch's rows; ``complete`` rewrites the table every batch.
    ``background`` selects the slower trigger of queries off the hot path.
    """
    writer = (
        df.writeStream.format("delta")
        .outputMode(output_mode)
        .option("checkpointLocation", checkpoint)
        .queryName(name)
    )
    return with_trigger(writer, settings, background).start(path)


@contextmanager
def persisted(batch: DataFrame) -> Iterator[DataFrame]:
    """Cache a micro-batch while several writes read it."""
    batch.persist()
    try:
        yield batch
    finally:
        batch.unpersist()


def run_concurrently(*writes: Callable[[], None]) -> None:
    """Run independent writes (to different tables) as concurrent Spark jobs.

    Each write's driver-side work (planning, the Delta log, the commit) overlaps
    the others' tasks. Every write is idempotent, so a failure of one, which fails
    the batch, is safe to replay whole.
    """
    with ThreadPoolExecutor(max_workers=len(writes), thread_name_prefix="batch-write") as pool:
        for future in [pool.submit(w) for w in writes]:
            future.result()


class QueryId:
    """The running query's id, known once ``start()`` returns; batches wait for it."""

    def __init__(self) -> None:
        self._id: str | None = None
        self._ready = threading.Event()

    def set(self, query_id: str) -> None:
        """Record the id (called right after ``start()``)."""
        self._id = query_id
        self._ready.set()

    def get(self) -> str:
        """The id; blocks until it is set."""
        self._ready.wait(60)
        if self._id is None:
            raise RuntimeError("the streaming query id was never recorded")
        return self._id


def idempotent_append(df: DataFrame, path: str, app_id: str, batch_id: int) -> None:
    """Append a micro-batch exactly once: Delta skips a (txnAppId, txnVersion) it has seen.

    An empty batch writes nothing (no empty commit): replaying it is empty too.
    """
    if df.isEmpty():
        return
    (
        df.write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", batch_id)
        .save(path)
    )


def merge_batch(df: DataFrame, path: str, keys: Sequence[str]) -> None:
    """Upsert a micro-batch on ``keys``: matching rows are replaced, new rows inserted."""
    if df.isEmpty():
        return
    target = DeltaTable.forPath(df.sparkSession, path)
    cond = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
    (
        target.alias("t")
        .merge(df.alias("s"), cond)
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )


def foreach_batch_stream(
    df: DataFrame,
    write: Callable[[DataFrame, int, str], None],
    checkpoint: str,
    name: str,
    settings: ProcessorSettings,
    output_mode: str = "append",
    background: bool = False,
) -> StreamingQuery:
    """Run ``write(batch_df, batch_id, query_id)`` for every micro-batch.

    The batch is cached while ``write`` runs. The query id comes from the checkpoint,
    so it is stable across restarts and makes a fine ``txnAppId``. ``background``
    selects the slower trigger.
    """
    qid = QueryId()

    def _run(batch: DataFrame, batch_id: int) -> None:
        # Cached: every read of the batch (emptiness checks, several writes) must not
        # run the streaming plan, stateful operators included, again.
        with persisted(batch):
            write(batch, batch_id, qid.get())

    writer = (
        df.writeStream.foreachBatch(_run)
        .outputMode(output_mode)
        .option("checkpointLocation", checkpoint)
        .queryName(name)
    )
    query = with_trigger(writer, settings, background).start()
    qid.set(query.id)
    return query


def merge_latest(df: DataFrame, path: str) -> None:
    """Upsert one row per device, keeping whichever of old and new is newer."""
    if df.isEmpty():
        return
    target = DeltaTable.forPath(df.sparkSession, path)
    newer = (
        "s.last_event_time > t.last_event_time"
        " OR (s.last_event_time = t.last_event_time AND s.last_seq > t.last_seq)"
    )
    (
        target.alias("t")
        .merge(df.alias("s"), "t.device_id = s.device_id")
        .whenMatchedUpdateAll(condition=newer)
        .whenNotMatchedInsertAll()
        .execute()
    )
