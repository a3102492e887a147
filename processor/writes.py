"""How a micro-batch reaches a Delta table exactly once: Delta's own idempotent writes.

Every write in a ``foreachBatch`` names its writer (``app_id``: the query's id, which
the checkpoint keeps across restarts, and the table it writes) and the micro-batch
(``batch_id``). Delta records the pair in the commit (a ``txn`` action) and skips a
write of a batch it has recorded for that writer, so a batch replayed after a crash
changes nothing:

* appends and overwrites pass it as the writer options ``txnAppId``/``txnVersion``;
* a MERGE passes it as the session settings ``spark.databricks.delta.write.txnAppId``
  and ``...txnVersion`` (Delta's idempotent DML), set on the batch's session for that
  one MERGE, and unset after it (``dml_txn``).

A MERGE that replaces rows whole on their keys (a sliding window recomputed, an alert
kept once) gives the same table however often it runs, and needs no ``txn``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import DataFrame, DataFrameWriter, SparkSession
from pyspark.util import inheritable_thread_target

from common.file_lock import locked
from processor.tables import delta_identifier

TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"


def has_rows(df: DataFrame) -> bool:
    """Whether ``df`` has a row, counted: no LIMIT in the plan.

    ``isEmpty()``, ``first()`` and ``head()`` run the plan under a LIMIT, and Spark
    names each LIMIT's counter in the generated code from a process-wide sequence: every
    such action is new code, compiled by Janino and then by the JIT, micro-batch after
    micro-batch (the processor's throughput fell threefold). A count's plan is the same
    from batch to batch, and its code is in Spark's cache; it reads every row, which
    for a cached micro-batch (``queries.persisted``) is cheap. The public API: the same
    on a classic session and through Spark Connect.
    """
    return df.count() > 0


def append_once(
    df: DataFrame, path: str, app_id: str, batch_id: int, nonempty: bool = False
) -> bool:
    """Append a micro-batch's rows unless Delta has this writer's batch already.

    An empty frame writes nothing (no empty commit): its replay is empty too. Columns
    the table has and ``df`` lacks are null in the new rows.

    Args:
        df: The batch's rows.
        path: The Delta table.
        app_id: The writer's id (stable across restarts).
        batch_id: The micro-batch id.
        nonempty: The caller knows that ``df`` has rows (no Spark job to check).

    Returns:
        Whether the frame had rows to write (written now, or found written before).
    """
    if not nonempty and not has_rows(df):
        return False
    _txn_writer(df, app_id, batch_id).mode("append").save(path)
    return True


def overwrite_once(df: DataFrame, path: str, app_id: str, batch_id: int) -> bool:
    """Replace a table's rows with ``df``'s unless Delta has this writer's batch already.

    For a summary rewritten whole every micro-batch. An empty frame writes nothing.

    Returns:
        Whether the frame had rows to write.
    """
    if not has_rows(df):
        return False
    _txn_writer(df, app_id, batch_id).mode("overwrite").save(path)
    return True


def _txn_writer(df: DataFrame, app_id: str, batch_id: int) -> DataFrameWriter:
    return df.write.format("delta").option("txnAppId", app_id).option("txnVersion", str(batch_id))


@contextmanager
def dml_txn(spark: SparkSession, app_id: str, batch_id: int) -> Iterator[None]:
    """Make the MERGE (UPDATE, DELETE) run in this block a writer's batch, once.

    Args:
        spark: The session the MERGE runs in (``batch.sparkSession``). On a classic
            session, a streaming query's own, whose settings no other query sees.
            Through Spark Connect, every query's ``foreachBatch`` runs on the session
            that started the queries, so the settings are held there by one MERGE at a
            time (``_session_settings_held``).
        app_id: The writer's id.
        batch_id: The micro-batch id.
    """
    with _session_settings_held(spark):
        spark.conf.set(TXN_APP_ID_CONF, app_id)
        spark.conf.set(TXN_VERSION_CONF, str(batch_id))
        try:
            yield
        finally:
            spark.conf.unset(TXN_APP_ID_CONF)
            spark.conf.unset(TXN_VERSION_CONF)


@contextmanager
def _session_settings_held(spark: SparkSession) -> Iterator[None]:
    """Through Spark Connect: one ``dml_txn`` at a time on this session, across processes.

    Spark Connect runs each query's ``foreachBatch`` function in a Python process of
    its own beside the server, all on the session that started the queries: two
    queries' MERGEs would otherwise see each other's writer id. Those processes share
    the server's host, where a file lock keyed by the session serialises them. A
    classic session needs none (each query's batches run on a clone of its own).
    """
    session_id = getattr(spark, "session_id", None)
    if session_id is None:
        yield
        return
    with locked(Path(tempfile.gettempdir()) / f"iot-pulse-txn-{session_id}.lock"):
        yield


def merge(
    source: DataFrame,
    path: str,
    keys: Sequence[str],
    *,
    since: tuple[str, int | None] | None = None,
    update: Mapping[str, str] | None = None,
    keep_existing: bool = False,
    txn: tuple[str, int] | None = None,
    nonempty: bool = False,
) -> None:
    """Upsert ``source``'s rows into a Delta table on ``keys`` (Spark's MERGE).

    The table's columns that ``source`` lacks (a field the contract no longer has) are
    null in the rows it inserts or replaces.

    Args:
        source: The rows, at most one per key.
        path: The Delta table.
        keys: Columns that identify a row.
        since: ``(column, epoch seconds)``: a timestamp column that a stored row shares
            with its match (a key, or a time every copy of the row has) and a time at or
            before its earliest value in ``source`` (``times.since_floor_s``): only stored rows
            from then on can match, so older files need not be read. A None time: no bound.
        update: A matched row's new values, as SQL over ``t`` (stored) and ``s`` (new)
            (``gold.combine_device_minutes``); None replaces every column, unless
            ``keep_existing``.
        keep_existing: Without ``update``: leave matched rows as they are, insert new keys.
        txn: ``(app id, batch id)``: the MERGE runs once per batch (for a MERGE that adds
            to what is stored); None runs it every time.
        nonempty: The caller knows that ``source`` has rows (no Spark job to check).
    """
    if not nonempty and not has_rows(source):
        return
    cond = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
    if since is not None and since[1] is not None:
        cond += f" AND t.`{since[0]}` >= timestamp_seconds({int(since[1])})"
    spark = source.sparkSession
    # Every column of the table: those the source lacks (no longer written) are null.
    columns = spark.read.format("delta").load(path).columns
    row = {c: f"s.`{c}`" if c in source.columns else "NULL" for c in columns}
    clauses = []
    if update is not None:
        clauses.append("WHEN MATCHED THEN UPDATE SET " + _assignments(update))
    elif not keep_existing:
        clauses.append("WHEN MATCHED THEN UPDATE SET " + _assignments(row))
    clauses.append(
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(f'`{c}`' for c in row)}) "
        f"VALUES ({', '.join(row.values())})"
    )
    # SQL, which Delta's extension runs on a classic session and through Spark Connect.
    statement = f"MERGE INTO {delta_identifier(path)} AS t USING {{source}} AS s ON {cond} "
    if txn is None:  # not while another MERGE's writer id is set on the session
        with _session_settings_held(spark):
            spark.sql(statement + " ".join(clauses), source=source).collect()
        return
    with dml_txn(spark, *txn):
        spark.sql(statement + " ".join(clauses), source=source).collect()


def _assignments(values: Mapping[str, str]) -> str:
    """A MERGE's ``SET`` list: each target column to its SQL."""
    return ", ".join(f"t.`{c}` = {v}" for c, v in values.items())


def run_concurrently(spark: SparkSession, *writes: Callable[[], object]) -> None:
    """Run independent writes (to different tables) as concurrent Spark jobs.

    Each write's driver-side work (planning, the Delta log, the commit) overlaps the
    others' tasks. Every write is idempotent, so a failure of one, which fails the batch,
    is safe to replay whole. The threads inherit the caller's Spark local properties (the
    query's job group, so that stopping the query cancels them, and its scheduler pool).
    """
    if not writes:
        return
    with ThreadPoolExecutor(max_workers=len(writes), thread_name_prefix="batch-write") as pool:
        inherit = inheritable_thread_target(spark)
        for future in [pool.submit(inherit(w)) for w in writes]:
            future.result()
