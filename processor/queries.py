"""How a streaming query is started: its trigger, its foreachBatch runner, its turn.

Every query writes in ``foreachBatch`` (``foreach_batch_stream``), with the query's id
as the writer's id of its exactly-once writes (``processor.writes``): the id comes from
the checkpoint, so it is the same after a restart.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from processor import writes
from processor.checkpoints import clear_unlogged_first_batch
from processor.conflicts import retry_conflicts
from processor.settings import ProcessorSettings
from processor.stopping import interrupted, is_stopping

log = logging.getLogger("iot_pulse.processor")
Tier = Literal["hot", "bronze", "background"]


def with_trigger(
    writer: DataStreamWriter, settings: ProcessorSettings, tier: Tier = "hot"
) -> DataStreamWriter:
    """Apply the configured trigger: ``availableNow`` or the tier's processing-time interval.

    Args:
        writer: The stream's writer.
        settings: Processor settings.
        tier: ``hot`` (``trigger_interval``), ``bronze`` (``bronze_trigger_interval``) or
            ``background`` (``background_trigger_interval``).
    """
    if settings.trigger == "available_now":
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=tier_interval(settings, tier))


def tier_interval(settings: ProcessorSettings, tier: Tier) -> str:
    """The processing-time trigger interval of a tier's queries."""
    return {
        "hot": settings.trigger_interval,
        "bronze": settings.bronze_trigger_interval,
        "background": settings.background_trigger_interval,
    }[tier]


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


@contextmanager
def persisted(batch: DataFrame) -> Iterator[DataFrame]:
    """Cache a micro-batch while several writes read it."""
    batch.persist()
    try:
        yield batch
    finally:
        batch.unpersist()


# Background queries run their micro-batches one at a time: together they then take
# about one core at most, and the hot path keeps the other.
_BACKGROUND_TURN = threading.Lock()


def foreach_batch_stream(
    df: DataFrame,
    write: Callable[[DataFrame, int, str], None],
    checkpoint: str,
    name: str,
    settings: ProcessorSettings,
    output_mode: str = "append",
    tier: Tier = "hot",
    cache: bool = True,
) -> StreamingQuery:
    """Run ``write(batch_df, batch_id, query_id)`` for every micro-batch.

    A write that loses its commit to a concurrent one (``maintain`` compacting the
    table) runs again (``conflicts.retry_conflicts``).

    Args:
        df: The stream.
        write: What to do with each micro-batch.
        checkpoint: The query's checkpoint folder.
        name: The query's name.
        settings: Processor settings (the trigger).
        output_mode: ``append``, ``update`` or ``complete``.
        tier: The trigger (see ``with_trigger``); ``background`` micro-batches also
            wait for their turn among the other background queries'.
        cache: Cache the batch while ``write`` runs (for writes that read it more
            than once).
    """
    qid = QueryId()

    def _write(batch: DataFrame, batch_id: int) -> None:
        retry_conflicts(lambda: write(batch, batch_id, qid.get()), f"{name} batch {batch_id}")

    def _batch(batch: DataFrame, batch_id: int) -> None:
        with _BACKGROUND_TURN if tier == "background" else contextlib.nullcontext():
            if not cache:
                _write(batch, batch_id)
                return
            # Cached: every read of the batch (emptiness checks, several writes) must not
            # run the streaming plan, stateful operators included, again.
            with persisted(batch):
                _write(batch, batch_id)

    def _run(batch: DataFrame, batch_id: int) -> None:
        try:
            _batch(batch, batch_id)
        except Exception as exc:
            if not is_stopping(qid.get()):
                raise
            log.info("%s batch %d stopped: %s", name, batch_id, type(exc).__name__)
            raise interrupted(f"{name} batch {batch_id}") from None

    writer = (
        df.writeStream.foreachBatch(_run)
        .outputMode(output_mode)
        .option("checkpointLocation", checkpoint)
        .queryName(str(name))  # an exact str: Spark refuses a subclass (common.lake.Query)
    )
    clear_unlogged_first_batch(df.sparkSession, checkpoint)
    query = with_trigger(writer, settings, tier).start()
    qid.set(query.id)
    return query


def table_stream(
    df: DataFrame,
    path: str,
    checkpoint: str,
    name: str,
    settings: ProcessorSettings,
    tier: Tier = "hot",
) -> StreamingQuery:
    """Append a stream to a Delta table, exactly once per micro-batch (``writes.append_once``).

    Unlike Delta's own streaming sink, the write runs in ``foreachBatch``, so a
    background query takes its turn (see ``foreach_batch_stream``). The table must
    exist (``tables.ensure_table``).
    """

    def write(batch: DataFrame, batch_id: int, query_id: str) -> None:
        writes.append_once(batch, path, query_id, batch_id)

    return foreach_batch_stream(df, write, checkpoint, name, settings, tier=tier)
