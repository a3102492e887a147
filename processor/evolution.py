"""Schema changes on a lake that already holds data: what applies in place, what rebuilds.

A field or a metric added to the contract applies in place: every table gains its
column (``tables.ensure_table``) and the queries resume on their checkpoints, except
those whose checkpointed *state* holds per-column aggregates (Spark cannot resume
them on a state with another shape), and those whose rows add up all their input
(a column they gained would miss what came before). Such a query is rebuilt: its checkpoint goes,
its output table is emptied (its schema and history stay), and the query
recomputes it from all of silver on its next start. ``python -m processor rebuild
QUERY`` does the same on request (after a change of window length, for example).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from common.lake import Query
from processor.tables import TableChange

log = logging.getLogger("iot_pulse.processor")

# Queries that can be recomputed from silver (or from what they read), with the tables
# they write and the queries that read those tables as streams (rebuilt with them: a
# Delta stream stops at a deleted row).
REBUILDS: Mapping[Query, tuple[str, ...]] = {
    Query.DEVICE_STATUS: ("device_status", "fleet_summary", "site_type_10m"),
    Query.GOLD_DEVICE_SESSIONS: ("device_sessions",),
    Query.ALERTS: ("alerts", "alert_clears"),
    Query.ALERT_RECOVERIES: ("alert_recoveries",),
    Query.ALERTS_RT: ("alerts_rt",),
}
READERS: Mapping[Query, tuple[Query, ...]] = {Query.ALERTS: (Query.ALERT_RECOVERIES,)}
# Queries whose output no longer fits when its table's columns change, each with why.
_PER_COLUMN_STATE = "its state keeps one aggregate per column of {table}"
# The tables whose columns a query's state or sums depend on, where not all it writes:
# device_status recomputes the sliding windows whole from device_1m.
_STATEFUL_TABLES: Mapping[Query, tuple[str, ...]] = {
    Query.DEVICE_STATUS: ("device_status", "fleet_summary"),
}
STALE_ON_NEW_COLUMNS: Mapping[Query, str] = {
    # One aggregate buffer per output column in the checkpointed state: a change of the
    # output's columns is a change of the state's shape.
    Query.GOLD_DEVICE_SESSIONS: _PER_COLUMN_STATE,
    # Each row adds up its device's readings since the start.
    Query.DEVICE_STATUS: "each row of {table} adds up its device's readings so far",
}


def with_readers(queries: Iterable[str]) -> list[str]:
    """``queries`` and, after each, the queries that stream from its tables (in order)."""
    out: list[str] = []
    for q in queries:
        for name in (q, *READERS.get(q, ())):
            if name not in out:
                out.append(name)
    return out


def stale_queries(changes: Mapping[str, TableChange]) -> dict[str, str]:
    """The queries whose checkpointed state no longer fits, each with why, in one line.

    Args:
        changes: What ``ensure_table`` did, per table (``Tables`` field name).
    """
    stale: dict[str, str] = {}
    for query, reason in STALE_ON_NEW_COLUMNS.items():
        for table in _STATEFUL_TABLES.get(query, REBUILDS[query]):
            change = changes.get(table, TableChange())
            if change.added or change.unwritten:
                why = ", ".join(
                    [f"column {c} added" for c in change.added]
                    + [f"column {c} no longer written" for c in change.unwritten]
                )
                stale[query] = f"{reason.format(table=table)} ({why})"
    return stale


def delete_folder(spark: SparkSession, location: str) -> bool:
    """Delete a folder (local or a Hadoop URI) through Spark's file system; True if it was there."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    path = jvm.org.apache.hadoop.fs.Path(location)
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
    return bool(fs.exists(path) and fs.delete(path, True))


def reset_query(
    spark: SparkSession, query: str, checkpoint: str, tables: Mapping[str, str]
) -> None:
    """Forget a query's progress: delete its checkpoint and every row of its tables.

    The tables keep their schema and their history (a Delta DELETE); the query's next
    start reads its input from the beginning and writes them again.

    Args:
        spark: The session.
        query: The query's name (a key of ``REBUILDS``).
        checkpoint: Its checkpoint location.
        tables: ``Tables`` field name -> location, for at least the query's tables.
    """
    delete_folder(spark, checkpoint)
    for table in REBUILDS[query]:
        if DeltaTable.isDeltaTable(spark, tables[table]):
            DeltaTable.forPath(spark, tables[table]).delete()
    log.info("reset %s: checkpoint %s deleted, %s emptied", query, checkpoint, REBUILDS[query])


def say(message: str) -> None:
    """One progress line on stderr."""
    print(f"[processor] {message}", file=sys.stderr, flush=True)
