"""How a table is created, and how an existing one is checked and evolved at start-up."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from common.cli import local_path
from common.lake import READER_TABLE_PROPERTIES
from processor.lifecycle import say
from processor.readers import check_readable


class TableSchemaError(RuntimeError):
    """An existing table has a column of another type than this version writes."""


def delta_identifier(path: str) -> str:
    """A Delta table's path as a SQL identifier: ``delta.`<path>```.

    A relative local path is made absolute (from the working folder, as Spark's readers
    and writers take it): Delta's SQL takes only an absolute one for a table.
    """
    local = local_path(path)
    if local is not None and not local.is_absolute():
        path = str(local.absolute())
    return "delta.`" + path.replace("`", "``") + "`"


def is_delta_table(spark: SparkSession, path: str) -> bool:
    """Whether a Delta table is at ``path`` (through Spark: classic or Spark Connect)."""
    try:
        spark.read.format("delta").load(path).schema  # noqa: B018 - the analysis is the check
    except AnalysisException:  # no such folder, or not a Delta table
        return False
    return True


@dataclass(frozen=True)
class TableChange:
    """How ``ensure_table`` found an existing table against what the query writes.

    Attributes:
        added: Columns the table gained (null in its rows so far).
        unwritten: Columns the table has and the query no longer writes (null in new rows).
        created: The table did not exist: it was created, empty.
    """

    added: tuple[str, ...] = ()
    unwritten: tuple[str, ...] = ()
    created: bool = False


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
        storage_options: How the readers (delta-rs) reach the lake
            (``LakeSettings.storage_options``), for the readability check.

    Raises:
        TableSchemaError: a column has another type than the query writes (a breaking
            change: see docs/contract.md, "Changing the schema").
        TableUnreadableError: the table uses a feature the readers cannot read.
    """
    if not is_delta_table(spark, path):
        empty.limit(0).write.format("delta").mode("ignore").options(**READER_TABLE_PROPERTIES).save(
            path
        )
        return TableChange(created=True)
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
            '(IOT_LAKE_ROOT), or see docs/contract.md, "Changing the schema".'
        )
    added = [f for f in empty.schema.fields if f.name not in have]
    if added:
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in added)
        spark.sql(f"ALTER TABLE {delta_identifier(path)} ADD COLUMNS ({columns})")
        say(f"{path}: added the columns {columns}")
    return TableChange(
        added=tuple(f.name for f in added),
        unwritten=tuple(name for name in have if name not in empty.columns),
    )


def ensure_clustering(
    spark: SparkSession, path: str, columns: Sequence[str], *, announce: bool = True
) -> bool:
    """Cluster the table at ``path`` by ``columns`` (Delta's liquid clustering) unless it is.

    Clustering changes no row and no file: it tells OPTIMIZE (``processor.maintenance``)
    how to lay the files out when it compacts them. It adds the ``clustering`` writer
    feature; the readers (delta-rs) read the table as before.

    Args:
        spark: The session.
        path: The table's location.
        columns: The clustering columns.
        announce: Say so on the console when it changes (not for a table just created).

    Returns:
        Whether the table's clustering columns were changed.
    """
    table = delta_identifier(path)
    detail = spark.sql(f"DESCRIBE DETAIL {table}").select("clusteringColumns").first()
    if detail is not None and list(detail["clusteringColumns"] or []) == list(columns):
        return False
    named = ", ".join(f"`{c}`" for c in columns)
    spark.sql(f"ALTER TABLE {table} CLUSTER BY ({named})").collect()
    if announce:
        say(f"{path}: clustered by {', '.join(columns)}")
    return True
