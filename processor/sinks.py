"""Where the processor writes: Delta tables, each write exactly-once.

* Every query writes in ``foreachBatch``: appends and overwrites tagged with their
  writer and batch (``CommitLedger``; Spark's writer, or delta-rs for a small batch of
  silver's and the fleet summary's overwrite, with Delta's ``txn`` action as well), and
  MERGEs (delta-rs, ``merge_rows``) that add to what is there with Delta's ``txn`` action
  and the same tag, or that replace rows on the table's keys (upserts), so a replayed
  batch changes nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from delta.tables import DeltaTable
from deltalake import CommitProperties, Transaction, write_deltalake
from deltalake import DeltaTable as RustDeltaTable
from deltalake.exceptions import CommitFailedError
from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery
from pyspark.util import inheritable_thread_target

from common.cli import local_path
from common.delta_table import open_delta_table
from common.lake import READER_TABLE_PROPERTIES
from processor.readers import check_readable
from processor.settings import ProcessorSettings

log = logging.getLogger("iot_pulse.processor")
Tier = Literal["hot", "bronze", "background"]
T = TypeVar("T")


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


class TableSchemaError(RuntimeError):
    """An existing table has a column of another type than this version writes."""


@dataclass(frozen=True)
class TableChange:
    """How ``ensure_table`` found an existing table against what the query writes.

    Attributes:
        added: Columns the table gained (null in its rows so far).
        unwritten: Columns the table has and the query no longer writes (null in new rows).
    """

    added: tuple[str, ...] = ()
    unwritten: tuple[str, ...] = ()


def ensure_table(
    spark: SparkSession,
    path: str,
    empty: DataFrame,
    storage_options: Mapping[str, str] | None = None,
) -> TableChange:
    """Create an empty Delta table with ``empty``'s schema unless one exists at ``path``.

    A new table gets ``READER_TABLE_PROPERTIES`` (what the readers need, whatever the
    cluster's defaults). An existing one must be readable by the readers
    (``readers.check_readable``), and is matched by column name: the columns it lacks
    are added (at the end, null in its rows so far), so that a contract that gained a
    field or a metric keeps the lake and the checkpoints; Delta appends and MERGEs match
    by name too. Columns it has and the query no longer writes stay, null in new rows.

    Args:
        spark: The session.
        path: The table's location.
        empty: A frame with the schema the query writes.
        storage_options: How delta-rs reaches the lake (``LakeSettings.storage_options``).

    Raises:
        TableSchemaError: a column has another type than the query writes (a breaking
            change: see the README's "Changing the schema").
        TableUnreadableError: the table uses a feature the readers cannot read.
    """
    if not DeltaTable.isDeltaTable(spark, path):
        empty.limit(0).write.format("delta").mode("ignore").options(**READER_TABLE_PROPERTIES).save(
            path
        )
        return TableChange()
    check_readable(path, storage_options)
    have = {f.name: f.dataType for f in spark.read.format("delta").load(path).schema.fields}
    if retyped := [
        f"{f.name} ({have[f.name].simpleString()} -> {f.dataType.simpleString()})"
        for f in empty.schema.fields
        if f.name in have and have[f.name] != f.dataType
    ]:
        raise TableSchemaError(
            f"the table at {path} has columns of another type than this version writes: "
            f"{', '.join(retyped)}. A type change is a breaking change: write to a new lake "
            '(IOT_LAKE_ROOT), or see the README\'s "Changing the schema".'
        )
    added = [f for f in empty.schema.fields if f.name not in have]
    if added:
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in added)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({columns})")
        print(f"[processor] {path}: added the columns {columns}", file=sys.stderr, flush=True)
    return TableChange(
        added=tuple(f.name for f in added),
        unwritten=tuple(name for name in have if name not in empty.columns),
    )


class CheckpointSourcesError(RuntimeError):
    """A query's checkpoint was written by a plan with another number of sources."""


def checkpoint_sources(checkpoint: str) -> int | None:
    """How many sources the latest offsets of a local checkpoint record.

    None when the checkpoint has no offsets yet, or is not on the local file system
    (e.g. cloud storage under spark-submit: not checked).
    """
    local = local_path(checkpoint)
    if local is None:
        return None
    offsets = local / "offsets"
    batches = [p for p in offsets.glob("*") if p.name.isdigit()] if offsets.is_dir() else []
    if not batches:
        return None
    latest = max(batches, key=lambda p: int(p.name))
    # "v1", the batch's metadata, then one line per source.
    lines = [line for line in latest.read_text().splitlines() if line.strip()]
    return max(0, len(lines) - 2)


def check_checkpoint_sources(checkpoint: str, name: str, expected: int) -> None:
    """Stop before Spark does, with what to do, when a checkpoint has other sources.

    Raises:
        CheckpointSourcesError: The checkpoint records another number of sources.
    """
    found = checkpoint_sources(checkpoint)
    if found is not None and found != expected:
        raise CheckpointSourcesError(
            f"the {name} query's checkpoint at {checkpoint} was written by another version "
            f"of the processor (it read {found} sources; this version reads {expected}), and "
            "Spark cannot resume it. Point IOT_LAKE_ROOT at a new folder (replay the topic "
            "from its earliest offsets), or delete the lake (tables and _checkpoints)."
        )


def clear_unlogged_first_batch(spark: SparkSession, checkpoint: str) -> int:
    """Delete what a process killed while logging a query's first batch left behind.

    Spark writes each offsets file to a hidden temporary file (``.0.<uuid>.tmp``), then
    renames it. A kill between the two leaves only the temporary file; Spark then has no
    batch to resume, and refuses to start a new query in a folder that is not empty
    (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``), as if it belonged to another query.
    With no batch logged those files hold nothing, so they go. Any other file is left
    for Spark's check. Works on any file system the lake can be on (Hadoop's API).

    Returns:
        How many files were deleted.
    """
    jvm = spark._jvm  # type: ignore[attr-defined]
    offsets = jvm.org.apache.hadoop.fs.Path(f"{checkpoint.rstrip('/')}/offsets")
    fs = offsets.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf())  # type: ignore[attr-defined]
    if not fs.exists(offsets):
        return 0
    paths = [status.getPath() for status in fs.listStatus(offsets)]
    if any(p.getName().isdigit() for p in paths):
        return 0  # a batch is logged: Spark resumes from it and ignores the rest
    unfinished = [p for p in paths if re.fullmatch(r"\.+\d+\..+\.tmp(\.crc)?", p.getName())]
    for path in unfinished:
        fs.delete(path, False)
    if unfinished:
        log.info("%s: deleted %d unfinished offsets files", checkpoint, len(unfinished))
    return len(unfinished)


@contextmanager
def persisted(batch: DataFrame) -> Iterator[DataFrame]:
    """Cache a micro-batch while several writes read it."""
    batch.persist()
    try:
        yield batch
    finally:
        batch.unpersist()


def run_concurrently(spark: SparkSession, *writes: Callable[[], None]) -> None:
    """Run independent writes (to different tables) as concurrent Spark jobs.

    Each write's driver-side work (planning, the Delta log, the commit) overlaps
    the others' tasks. Every write is idempotent, so a failure of one, which fails
    the batch, is safe to replay whole. The threads inherit the caller's Spark
    local properties (the query's job group, so that stopping the query cancels
    them, and its scheduler pool).
    """
    if not writes:
        return
    with ThreadPoolExecutor(max_workers=len(writes), thread_name_prefix="batch-write") as pool:
        inherit = inheritable_thread_target(spark)
        for future in [pool.submit(inherit(w)) for w in writes]:
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


def has_rows(df: DataFrame) -> bool:
    """Whether ``df`` has a row, without putting a LIMIT in its plan.

    ``isEmpty()``, ``first()`` and ``head()`` run the plan under a LIMIT, and Spark
    names each LIMIT's counter in the generated code from a process-wide sequence: every
    such action is new code, compiled by Janino and then by the JIT, micro-batch after
    micro-batch. The RDD's ``isEmpty`` looks for a first row partition by partition, as
    a LIMIT would, on the plan's own generated code, which Spark has cached.
    """
    return not df._jdf.queryExecution().toRdd().isEmpty()


class CommitLedger:
    """The newest micro-batch each writer has committed to each Delta table.

    Every exactly-once append records its writer and batch in the commit's
    ``userMetadata`` (``{"txnAppId": ..., "txnVersion": ...}``, shown by ``DESCRIBE
    HISTORY``). A writer's first write to a table in a process reads the table's
    recent history for it; later ones use what this process has committed since.
    Delta's own ``txnAppId``/``txnVersion`` check rebuilds the table's whole state
    from its log (a Spark job, about half a second, on every write), so it is used
    only when the history holds nothing of the writer's: a new table, or one written
    before this ledger.

    One writer per (table, app id), as a streaming query is; if other commits follow
    its last one, up to the last 1,000 commits are searched. A history with nothing of
    the writer's is read once, not at every batch (a writer whose batches are all empty,
    such as quarantine's, commits nothing for hours).
    """

    SCAN = (10, 100, 1000)

    def __init__(self) -> None:
        # None: the history was read and holds nothing of the writer's.
        self._last: dict[tuple[str, str], int | None] = {}
        self._lock = threading.Lock()

    def last(self, spark: SparkSession, path: str, app_id: str) -> int | None:
        """The writer's newest committed batch id, or None if the history has none."""
        with self._lock:
            if (path, app_id) in self._last:
                return self._last[(path, app_id)]
        found = self._from_history(spark, path, app_id)
        with self._lock:
            self._last.setdefault((path, app_id), found)
            return self._last[(path, app_id)]

    @classmethod
    def _from_history(cls, spark: SparkSession, path: str, app_id: str) -> int | None:
        if not DeltaTable.isDeltaTable(spark, path):
            return None
        table = DeltaTable.forPath(spark, path)
        for limit in cls.SCAN:
            rows = table.history(limit).select("userMetadata").collect()  # newest first
            for row in rows:
                tag = commit_tag_of(row.userMetadata)
                if tag is not None and tag[0] == app_id:
                    return tag[1]
            if len(rows) < limit:
                return None
        return None

    def record(self, path: str, app_id: str, batch_id: int) -> None:
        """Note that ``app_id`` has committed ``batch_id`` to ``path``."""
        with self._lock:
            known = self._last.get((path, app_id))
            self._last[(path, app_id)] = batch_id if known is None else max(batch_id, known)

    def forget(self, path: str, app_id: str) -> None:
        """Drop what is known of the writer (after a failed write: the history decides)."""
        with self._lock:
            self._last.pop((path, app_id), None)

    def clear(self) -> None:
        """Forget everything, as a new process would."""
        with self._lock:
            self._last.clear()


LEDGER = CommitLedger()


def commit_tag(app_id: str, batch_id: int) -> str:
    """The ``userMetadata`` of an exactly-once commit."""
    return json.dumps({"txnAppId": app_id, "txnVersion": batch_id})


def commit_tag_of(user_metadata: str | None) -> tuple[str, int] | None:
    """``(app id, batch id)`` from a commit's ``userMetadata``, if it is a ``commit_tag``."""
    if not user_metadata:
        return None
    try:
        tag = json.loads(user_metadata)
        return str(tag["txnAppId"]), int(tag["txnVersion"])
    except (ValueError, TypeError, KeyError):
        return None


def _once(
    spark: SparkSession, path: str, app_id: str, batch_id: int, commit: Callable[[bool], bool]
) -> None:
    """Run ``commit`` unless ``LEDGER`` says the writer has committed ``batch_id`` to ``path``.

    ``commit(unknown)`` writes the batch, with Delta's ``txnAppId``/``txnVersion`` check
    when ``unknown`` (the ledger knows nothing of the writer; delta-rs's writers check
    always), and says whether it committed; the ledger then records the batch, or
    forgets the writer if it failed.
    """
    last = LEDGER.last(spark, path, app_id)
    if last is not None and batch_id <= last:
        return
    try:
        committed = commit(last is None)
    except BaseException:
        LEDGER.forget(path, app_id)
        raise
    if committed:
        LEDGER.record(path, app_id, batch_id)


def idempotent_write(
    df: DataFrame,
    path: str,
    app_id: str,
    batch_id: int,
    nonempty: bool = False,
) -> None:
    """Append a micro-batch with Spark's writer exactly once: a committed batch is skipped.

    An empty batch writes nothing (no empty commit): replaying it is empty too. What
    the writer has committed comes from ``LEDGER``; when it knows nothing, Delta's
    ``txnAppId``/``txnVersion`` check decides.

    Args:
        df: The batch's rows.
        path: The Delta table.
        app_id: The writer's id (stable across restarts).
        batch_id: The micro-batch id.
        nonempty: The caller knows that ``df`` has rows (no Spark job to check).
    """

    def commit(unknown: bool) -> bool:
        if not nonempty and not has_rows(df):
            return False
        tag = commit_tag(app_id, batch_id)
        writer = df.write.format("delta").mode("append").option("userMetadata", tag)
        if unknown:
            writer = writer.option("txnAppId", app_id).option("txnVersion", batch_id)
        writer.save(path)
        return True

    _once(df.sparkSession, path, app_id, batch_id, commit)


# A micro-batch of at most this many rows is appended by delta-rs, collected into the
# driver as Arrow; a larger one (a backlog's) by Spark's writer, from the executors.
RUST_APPEND_MAX_ROWS = 50_000


def idempotent_append(
    df: DataFrame,
    path: str,
    app_id: str,
    batch_id: int,
    nonempty: bool = False,
    rows_at_most: int | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Append a micro-batch exactly once (see ``idempotent_write``).

    When the caller knows the batch is small (``rows_at_most``, up to
    ``RUST_APPEND_MAX_ROWS``), delta-rs appends it: Spark's append of a few hundred
    rows takes 0.4-0.5 s (planning, a job, a commit) whatever the rows, and through
    delta-rs the processor used 0.06 cores less at 200 events/s (README, "What the
    processor costs"). Its commit carries Delta's ``txn`` action and the ``commit_tag``,
    as ``merge_rows``'s does, so a replayed batch is skipped whichever engine wrote it.

    Args:
        df: The batch's rows.
        path: The Delta table.
        app_id: The writer's id (stable across restarts).
        batch_id: The micro-batch id.
        nonempty: The caller knows that ``df`` has rows (no Spark job to check).
        rows_at_most: At least as many as ``df`` has, when the caller knows (0: none).
        storage_options: How delta-rs reaches the lake (``LakeSettings.storage_options``).
    """
    if rows_at_most is None or rows_at_most > RUST_APPEND_MAX_ROWS:
        idempotent_write(df, path, app_id, batch_id, nonempty=nonempty or bool(rows_at_most))
        return
    if rows_at_most == 0:
        return
    _rust_write(df, path, app_id, batch_id, "append", storage_options)


def idempotent_overwrite(
    df: DataFrame,
    path: str,
    app_id: str,
    batch_id: int,
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Replace a table's rows with a small frame's exactly once, through delta-rs.

    For a summary of a few rows rewritten every micro-batch: Spark's overwrite runs a
    job to look for a row, a job to write, and a commit that rebuilds the table's
    state (with the read of its input, 1.2-1.5 s a batch; docs/processor-costs.md).
    ``df`` is collected into the driver. Its commit carries Delta's ``txn`` action and
    the ``commit_tag`` (see ``idempotent_append``); an empty frame writes nothing, as
    ``idempotent_write``.

    Args:
        df: The rows, few enough to collect.
        path: The Delta table.
        app_id: The writer's id (stable across restarts).
        batch_id: The micro-batch id.
        storage_options: How delta-rs reaches the lake (``LakeSettings.storage_options``).
    """
    _rust_write(df, path, app_id, batch_id, "overwrite", storage_options)


def _rust_write(
    df: DataFrame,
    path: str,
    app_id: str,
    batch_id: int,
    mode: Literal["append", "overwrite"],
    storage_options: Mapping[str, str] | None,
) -> None:
    """Collect ``df`` and write it with delta-rs, once per ``(app_id, batch_id)``."""

    def commit(_unknown: bool) -> bool:
        table = open_delta_table(path, storage_options)
        done = _rust_commit(table, app_id, batch_id)
        if done is None:
            return True
        rows = df.toArrow()
        if rows.num_rows == 0:
            return False
        write_deltalake(table, _as_table_rows(table, rows), mode=mode, commit_properties=done)
        return True

    _once(df.sparkSession, path, app_id, batch_id, commit)


def _as_table_rows(table: RustDeltaTable, rows: pa.Table) -> pa.Table:
    """``rows`` with the table's columns in its order: those it lacks are null.

    A column the contract no longer has stays in the table (``ensure_table``), and new
    rows leave it null: Spark's writer does that itself, delta-rs refuses rows that
    lack a column of the table.
    """
    schema = pa.schema(table.schema().to_arrow())
    columns = [
        rows.column(f.name) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, names=schema.names)


def _rust_commit(table: RustDeltaTable, app_id: str, batch_id: int) -> CommitProperties | None:
    """A batch's delta-rs commit: Delta's ``txn`` and the tag; None if the table has it.

    delta-rs has the table's state loaded: its txn check costs nothing, so it always runs
    (the ledger covers older commits: Spark's writers record a txn only at their first
    commit after a start).
    """
    last = table.transaction_version(app_id)
    if last is not None and last >= batch_id:
        return None
    return CommitProperties(
        custom_metadata={"userMetadata": commit_tag(app_id, batch_id)},
        app_transactions=[Transaction(app_id, batch_id)],
    )


def earliest(rows: pa.Table, column: str) -> datetime | None:
    """The earliest value of a timestamp column of ``rows``; None when it has none."""
    return pc.min(rows.column(column)).as_py()


def merge_rows(
    spark: SparkSession,
    rows: pa.Table,
    path: str,
    keys: Sequence[str],
    since: str | None = None,
    update: Mapping[str, str] | None = None,
    keep_existing: bool = False,
    txn: tuple[str, int] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Upsert a few rows into a Delta table on ``keys`` with delta-rs's MERGE.

    For a micro-batch's few hundred rows, such as its 1-minute windows or its newest
    reading per device: measured on silver's batches, delta-rs merges them in about
    0.1 CPU-seconds, where Spark's MERGE planned and ran six jobs for 1.6-2.1
    (docs/processor-costs.md). With ``txn`` the commit carries Delta's ``txn`` action
    and the ``commit_tag``, so ``LEDGER`` and Delta's own check both know it, as they
    know Spark's writes, and a batch already committed is skipped.

    Args:
        spark: The session whose ``LEDGER`` lookups read the table's history.
        rows: The rows, at most one per key, columns named as the table's.
        path: The Delta table.
        keys: Columns that identify a row.
        since: A timestamp column that a stored row shares with its match (a key, or a
            time every copy of the row has): only stored rows from the hour of the
            rows' earliest value on can match (files older than that need not be read).
        update: A matched row's new values: SQL over ``t`` (stored) and ``s`` (new)
            that DataFusion reads (``transforms.combine_device_minutes``); None
            replaces every column, unless ``keep_existing``.
        keep_existing: Without ``update``: leave matched rows as they are, insert new
            keys only.
        txn: ``(app id, batch id)``: the MERGE runs once per batch (for a MERGE that
            adds to what is stored); None runs it every time.
        storage_options: How delta-rs reaches the lake (``LakeSettings.storage_options``).
    """
    if rows.num_rows == 0:
        return
    cond = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
    first = None if since is None else earliest(rows, since)
    if first is not None:
        hour = first.replace(minute=0, second=0, microsecond=0)
        cond += f" AND t.`{since}` >= '{hour.isoformat()}'"

    def merge(_unknown: bool = True) -> bool:
        table = open_delta_table(path, storage_options)
        done = None
        if txn is not None:
            done = _rust_commit(table, *txn)
            if done is None:
                return True
        source = _as_table_rows(table, rows)
        plan = table.merge(source, cond, source_alias="s", target_alias="t", commit_properties=done)
        if update is not None:
            plan = plan.when_matched_update(dict(update))
        elif not keep_existing:
            plan = plan.when_matched_update_all()
        plan.when_not_matched_insert_all().execute()
        return True

    if txn is None:
        merge()
    else:
        _once(spark, path, *txn, merge)


# Delta's errors for a commit that lost to a concurrent one (an OPTIMIZE that compacted
# files a MERGE read, two overwrites, ...): the losing commit wrote nothing.
CONFLICTS = frozenset({
    "DELTA_CONCURRENT_APPEND", "DELTA_CONCURRENT_DELETE_READ", "DELTA_CONCURRENT_DELETE_DELETE",
    "DELTA_CONCURRENT_TRANSACTION", "DELTA_CONCURRENT_WRITE",
})  # fmt: skip
# delta-rs's messages for the same: "Commit failed: a concurrent transaction deleted data
# this operation read", "... added new data", "Metadata changed since last commit" ...
_RUST_CONFLICT = re.compile(r"concurrent transaction|changed since last commit", re.IGNORECASE)
CONFLICT_ATTEMPTS = 5
# An error condition in brackets at the start of a message: ``[CLASS.SUBCLASS] ...``.
_LEADING_CONDITION = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\]")


def error_condition(exc: BaseException) -> str | None:
    """The Spark error condition (class) of a JVM error, e.g. ``DELTA_CONCURRENT_APPEND``.

    PySpark converts the JVM errors it knows (``CapturedException``), with the Java
    exception as their origin. delta-spark (4.1 and later) converts its commit conflicts
    into its own ``CapturedException`` subclasses (``delta.exceptions``) from the Java
    exception's text alone, with no origin to ask: their condition leads the message
    (``[DELTA_CONCURRENT_APPEND.WITHOUT_HINT] Transaction conflict ...``). Other Delta
    errors reach Python as a bare ``Py4JJavaError`` around the Java exception.
    """
    if isinstance(exc, CapturedException):
        condition = exc.getCondition()
        if condition is None:
            leading = _LEADING_CONDITION.match(str(exc))
            condition = leading.group(1) if leading else None
        return condition
    if isinstance(exc, Py4JJavaError):
        try:
            return exc.java_exception.getErrorClass()  # a SparkThrowable, as Delta's are
        except Py4JError:
            return None
    return None


def is_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is Delta (Spark's or delta-rs's) refusing a commit for a concurrent one."""
    if isinstance(exc, CommitFailedError):
        # delta-rs raises it for any failed commit; conflicts say so in their message.
        return _RUST_CONFLICT.search(str(exc)) is not None
    return (error_condition(exc) or "").split(".")[0] in CONFLICTS


def retry_conflicts(
    write: Callable[[], T],
    what: str,
    attempts: int = CONFLICT_ATTEMPTS,
    backoff_s: float = 0.5,
    on_conflict: Callable[[BaseException], None] | None = None,
) -> T:
    """Run ``write`` again (from scratch) while Delta refuses its commit for a concurrent one.

    Safe only for idempotent writes, which every writer here is: what an attempt
    committed before its conflict is skipped by the next. ``python -m processor
    maintain`` compacts tables while the streams write them, and Delta refuses a
    MERGE whose files an OPTIMIZE rewrote meanwhile: without a retry, the query
    would stop.

    Args:
        write: The write.
        what: What it writes, for the log line.
        attempts: Tries in all; the last conflict is raised.
        backoff_s: Wait before the second try, doubled for each next one.
        on_conflict: Called with each conflict that is retried.

    Returns:
        What the successful try of ``write`` returned.
    """
    for attempt in range(1, attempts + 1):  # the last try returns or raises
        try:
            return write()
        except (CapturedException, Py4JJavaError, CommitFailedError) as exc:
            if attempt == attempts or not is_conflict(exc):
                raise
            if on_conflict is not None:
                on_conflict(exc)
            print(
                f"[processor] {what}: a concurrent commit won "
                f"({error_condition(exc) or type(exc).__name__}); "
                f"writing again (try {attempt + 1} of {attempts})",
                file=sys.stderr,
                flush=True,
            )
            time.sleep(backoff_s * 2 ** (attempt - 1))
    raise ValueError("retry_conflicts needs at least one attempt")


class BatchInterruptedError(RuntimeError):
    """A micro-batch failed because its query is being stopped on purpose."""


# Spark takes a foreachBatch function's error for an interruption by stop() (and stops
# the query quietly) when the error's text matches StreamExecution.PROXY_ERROR, a
# regex that recurses once per character: on a real error's text, Java traces and
# all, it overflows the stack, and the JVM prints a StackOverflowError.
_INTERRUPTED = (
    "py4j.protocol.Py4JJavaError: An error occurred while calling {what}: "
    "java.lang.InterruptedException ({reason})"
)
# Ids of the queries the processor is stopping (stop_queries).
_STOPPING: set[str] = set()


def stop_queries(spark: SparkSession, queries: Sequence[StreamingQuery]) -> None:
    """Stop queries at once, mid-batch if need be; a stopped batch runs again at the next start.

    ``StreamingQuery.stop()`` cancels the query's running jobs and interrupts its
    thread, but its foreachBatch function goes on and starts new jobs, which run
    to the end (minutes, on a backlog). So once each query is marked stopped, its
    job group's future jobs are cancelled too; and a batch that fails meanwhile is
    reported to Spark as interrupted, in few words (see ``_INTERRUPTED``).
    """
    _STOPPING.update(q.id for q in queries)
    try:
        stoppers = [threading.Thread(target=q.stop, name=f"stop-{q.name}") for q in queries]
        for t in stoppers:
            t.start()
        jsc = spark.sparkContext._jsc.sc()  # type: ignore[union-attr]
        for q in queries:
            while q.isActive:  # stop() marks it stopped first thing
                time.sleep(0.05)
            jsc.cancelJobGroupAndFutureJobs(q.runId, "the processor is stopping")
        for t in stoppers:
            t.join()
    finally:
        _STOPPING.difference_update(q.id for q in queries)


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

    The query id comes from the checkpoint, so it is stable across restarts and
    makes a fine ``txnAppId``. A write that loses its commit to a concurrent one
    (``maintain`` compacting the table) runs again (``retry_conflicts``).

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
            if qid.get() not in _STOPPING:
                raise
            log.info("%s batch %d stopped: %s", name, batch_id, type(exc).__name__)
            what = f"{name} batch {batch_id}"
            raise BatchInterruptedError(
                _INTERRUPTED.format(what=what, reason="the processor is stopping")
            ) from None

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
    """Append a stream to a Delta table, exactly once per micro-batch.

    One job counts each micro-batch into the cache, so a stateful plan runs once;
    ``idempotent_append`` then appends up to ``RUST_APPEND_MAX_ROWS`` rows with
    delta-rs, more (a backlog's) with Spark's writer, and skips a replayed batch either
    way. Unlike Delta's own streaming sink, the write runs in ``foreachBatch``, so a
    background query takes its turn (see ``foreach_batch_stream``). The table must
    exist (``ensure_table``).
    """

    def write(batch: DataFrame, batch_id: int, query_id: str) -> None:
        idempotent_append(
            batch, path, query_id, batch_id,
            rows_at_most=batch.count(), storage_options=settings.lake.storage_options(),
        )  # fmt: skip

    return foreach_batch_stream(df, write, checkpoint, name, settings, tier=tier)
