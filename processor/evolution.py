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
from collections.abc import Iterable, Mapping

from pyspark.sql import SparkSession

from common.lake import QUERY_SPECS, RENAMED, TABLES, Query, Table, rebuildable, written_by
from common.lake_settings import LakeSettings
from processor.lake_files import LakeFiles
from processor.tables import TableChange, delta_identifier, is_delta_table

log = logging.getLogger("iot_pulse.processor")

# The queries that can be recomputed from what they read (silver, their own input
# tables, or the alerts topic again): ``common.lake.QUERY_SPECS``. A rebuild empties the
# tables each writes (``common.lake.TABLES``) and rebuilds with it the queries that
# stream from them: a Delta stream stops at a deleted row.
REBUILDABLE: tuple[Query, ...] = rebuildable()


def stateful_leftovers(lake: LakeSettings) -> dict[str, str]:
    """The stateless queries whose checkpoint holds an earlier version's state, with why.

    A query the registry calls ``stateless`` (``common.lake.QuerySpec``) whose checkpoint
    has a ``state`` folder ran as an earlier version, whose state the checkpoint kept
    (the alert detector's was in Spark's state store; it is now ``state/alert_detector``).
    """
    files = LakeFiles(lake)
    return {
        query: "its checkpoint holds an earlier version's detector state (now a table)"
        for query, spec in QUERY_SPECS.items()
        if spec.stateless and files.file_type(f"{lake.checkpoint(query)}/state") == "directory"
    }


def renamed_leftovers(changes: Mapping[Table, TableChange], lake: LakeSettings) -> dict[str, str]:
    """The queries whose table was just created under a new name beside its old one, with why.

    A lake written by an earlier version holds the table under its old path
    (``common.lake.RENAMED``): the query that writes it is rebuilt, so the new table
    holds everything from silver on, as the old one did. The old folder stays (the
    message says so): nothing reads or writes it any more.

    Args:
        changes: What ``ensure_table`` did, per table.
        lake: Where the tables are.
    """
    files = LakeFiles(lake)
    stale: dict[str, str] = {}
    for old, table in RENAMED.items():
        writer = TABLES[table].writer
        if writer is None or not changes.get(table, TableChange()).created:
            continue
        if files.file_type(f"{lake.table(old)}/_delta_log") == "directory":
            stale[writer] = (
                f"{old} is now {table} and is written again from silver "
                f"(delete {lake.table(old)} once nothing of yours reads it)"
            )
    return stale


def stream_readers(query: Query | str) -> tuple[Query, ...]:
    """The queries that stream from the tables ``query`` writes."""
    out: list[Query] = []
    for table in written_by(query):
        out += [q for q in TABLES[table].streamed_by if q not in out]
    return tuple(out)


def with_readers(queries: Iterable[str]) -> list[str]:
    """``queries`` and, after each, the rebuildable queries that stream from its tables."""
    out: list[str] = []
    for q in queries:
        for name in (q, *(r for r in stream_readers(q) if r in REBUILDABLE)):
            if name not in out:
                out.append(name)
    return out


def stale_queries(changes: Mapping[Table, TableChange]) -> dict[str, str]:
    """The queries whose checkpointed state no longer fits, each with why, in one line.

    Args:
        changes: What ``ensure_table`` did, per table.
    """
    stale: dict[str, str] = {}
    for table, spec in TABLES.items():
        change = changes.get(table, TableChange())
        if spec.fixed_columns is None or spec.writer is None:
            continue
        if change.added or change.unwritten:
            why = ", ".join(
                [f"column {c} added" for c in change.added]
                + [f"column {c} no longer written" for c in change.unwritten]
            )
            stale[spec.writer] = f"{spec.fixed_columns.format(table=table)} ({why})"
    return stale


def reset_query(spark: SparkSession, query: Query | str, lake: LakeSettings) -> None:
    """Forget a query's progress: delete its checkpoint and every row of its tables.

    The tables keep their schema and their history (a Delta DELETE); the query's next
    start reads its input from the beginning and writes them again.

    Args:
        spark: The session.
        query: One of ``REBUILDABLE``.
        lake: Where its checkpoint and tables are.
    """
    checkpoint = lake.checkpoint(query)
    LakeFiles(lake).delete_folder(checkpoint)
    tables = written_by(query)
    for table in tables:
        location = lake.table(table)
        if is_delta_table(spark, location):
            spark.sql(f"DELETE FROM {delta_identifier(location)}").collect()
    log.info("reset %s: checkpoint %s deleted, %s emptied", query, checkpoint, ", ".join(tables))
