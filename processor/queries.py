"""How a streaming query is started: its trigger, its foreachBatch runner, its turn.

Every query writes in ``foreachBatch`` (``foreach_batch_stream``), with the query's id
as the writer's id of its exactly-once writes (``processor.writes``): the id comes from
the checkpoint, so it is the same after a restart.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_fixed

from common.cli import CliError
from common.lake import QUERY_SPECS, Query, Tier
from processor import writes
from processor.checkpoints import checkpoint_query_id, clear_unlogged_first_batch
from processor.conflicts import retry_conflicts
from processor.lake_files import LakeFiles
from processor.lifecycle import say
from processor.settings import ProcessorSettings
from processor.stopping import interrupted, is_stopping

log = logging.getLogger("iot_pulse.processor")


def tier_of(query: Query, settings: ProcessorSettings) -> Tier:
    """A query's trigger tier: the registry's (``common.lake.QUERY_SPECS``).

    Bronze's is the hot path's when silver reads bronze.
    """
    if query == Query.BRONZE and settings.silver_reads_bronze():
        return Tier.HOT
    return QUERY_SPECS[query].tier


def with_trigger(
    writer: DataStreamWriter, settings: ProcessorSettings, tier: Tier = Tier.HOT
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
        Tier.HOT: settings.trigger_interval,
        Tier.BRONZE: settings.bronze_trigger_interval,
        Tier.BACKGROUND: settings.background_trigger_interval,
    }[tier]


# The query id of each checkpoint, read once per process (``query_id``).
_QUERY_IDS: dict[str, str] = {}


def query_id(files: LakeFiles, checkpoint: str) -> str:
    """The id of the query that runs on ``checkpoint``: the same after every restart.

    Read in the micro-batch's own process (the driver's, or under Spark Connect the
    Python process that runs ``foreachBatch`` beside the server), from the checkpoint's
    ``metadata`` file, which Spark writes before the query's first batch.
    """
    if checkpoint not in _QUERY_IDS:
        _QUERY_IDS[checkpoint] = checkpoint_query_id(files, checkpoint)
    return _QUERY_IDS[checkpoint]


@contextmanager
def persisted(batch: DataFrame) -> Iterator[DataFrame]:
    """Cache a micro-batch while several writes read it."""
    batch.persist()
    try:
        yield batch
    finally:
        batch.unpersist()


# Background queries run their micro-batches one at a time: together they then take
# about one core at most, and the hot path keeps the other. (Through Spark Connect each
# query's batches run in a process of their own: the server schedules them.)
_BACKGROUND_TURN = threading.Lock()


@contextmanager
def turn(tier: Tier) -> Iterator[None]:
    """A background micro-batch's turn among the other background queries' (in this process)."""
    if tier != Tier.BACKGROUND:
        yield
        return
    with _BACKGROUND_TURN:
        yield


def foreach_batch_stream(
    df: DataFrame,
    write: Callable[[DataFrame, int, str], None],
    checkpoint: str,
    name: Query,
    settings: ProcessorSettings,
    output_mode: str = "append",
    cache: bool = True,
) -> StreamingQuery:
    """Run ``write(batch_df, batch_id, query_id)`` for every micro-batch.

    A write that loses its commit to a concurrent one (``maintain`` compacting the
    table) runs again (``conflicts.retry_conflicts``).

    Args:
        df: The stream.
        write: What to do with each micro-batch.
        checkpoint: The query's checkpoint folder.
        name: The query; its tier (``tier_of``) gives the trigger, and a background
            query's micro-batches wait for their turn among the others'.
        settings: Processor settings (the trigger).
        output_mode: ``append``, ``update`` or ``complete``.
        cache: Cache the batch while ``write`` runs (for writes that read it more
            than once).
    """
    files = LakeFiles(settings.lake)
    tier = tier_of(name, settings)

    def _write(batch: DataFrame, batch_id: int) -> None:
        qid = query_id(files, checkpoint)
        retry_conflicts(lambda: write(batch, batch_id, qid), f"{name} batch {batch_id}")

    def _batch(batch: DataFrame, batch_id: int) -> None:
        with turn(tier):
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
            if not is_stopping(query_id(files, checkpoint)):
                raise
            log.info("%s batch %d stopped: %s", name, batch_id, type(exc).__name__)
            raise interrupted(f"{name} batch {batch_id}") from None

    writer = (
        df.writeStream.foreachBatch(_run)
        .outputMode(output_mode)
        .option("checkpointLocation", checkpoint)
        .queryName(str(name))  # an exact str: Spark refuses a subclass (common.lake.Query)
    )
    clear_unlogged_first_batch(files, checkpoint)
    return started(with_trigger(writer, settings, tier), name)


# Through Spark Connect, a foreachBatch query's start starts its Python process on the
# server, and Spark gives that process 10 s to connect back (a constant of its own). On
# a loaded server it may take longer: the start fails, nothing of the query began, and
# a later start finds the machine less busy. A burst of load on a small server can last
# a minute, so the tries span about two (a Python that never starts fails as late).
WORKER_LATE = "Python worker failed to connect back"
START_ATTEMPTS = 6
START_BACKOFF_S = 10.0


def started(
    writer: DataStreamWriter,
    name: Query,
    attempts: int = START_ATTEMPTS,
    backoff_s: float = START_BACKOFF_S,
) -> StreamingQuery:
    """Start a query; again, after ``backoff_s``, while its Python process was late to start.

    Args:
        writer: The query's writer, ready to start.
        name: The query, for the progress line.
        attempts: Starts in all.
        backoff_s: The wait before each new start.

    Returns:
        The started query.

    Raises:
        CliError: Every start failed so (one line); its cause is the last start's error.
    """

    def before_sleep(state: RetryCallState) -> None:
        say(
            f"{name}: Spark's Python process for it did not start within Spark's 10 s "
            f"(a busy machine); starting it again (try {state.attempt_number + 1} of {attempts})"
        )

    def late(exc: BaseException) -> bool:
        return WORKER_LATE in str(exc)

    retrying = Retrying(
        stop=stop_after_attempt(attempts),
        wait=wait_fixed(backoff_s),
        retry=retry_if_exception(late),
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        return retrying(writer.start)
    except Exception as exc:
        if not late(exc):
            raise
        raise CliError(
            f"{name} did not start: Spark's Python process for it did not connect back "
            f"within Spark's 10 s, {attempts} times: the Spark server is too busy, or its "
            "Python fails to start (the server's log says which); give it more cores or "
            "fewer other applications, or fix its Python, then start again"
        ) from exc


def table_stream(
    df: DataFrame,
    path: str,
    checkpoint: str,
    name: Query,
    settings: ProcessorSettings,
) -> StreamingQuery:
    """Append a stream to a Delta table, exactly once per micro-batch (``writes.append_once``).

    Unlike Delta's own streaming sink, the write runs in ``foreachBatch``, so a
    background query takes its turn (see ``foreach_batch_stream``). The table must
    exist (``tables.ensure_table``).
    """

    def write(batch: DataFrame, batch_id: int, query_id: str) -> None:
        writes.append_once(batch, path, query_id, batch_id)

    return foreach_batch_stream(df, write, checkpoint, name, settings)
