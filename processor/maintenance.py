"""How the lake's tables are kept compact: ``python -m processor maintain``."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Row, SparkSession

from common.lake import TABLES, Table
from processor.conflicts import retry_conflicts
from processor.session import conf_held
from processor.settings import ProcessorSettings
from processor.tables import delta_identifier, is_delta_table

# The largest file OPTIMIZE writes (Delta's default: 1 GB). A clustered table's files then
# each hold a narrow range of its clustering columns, so that a device's history in
# gold/device_1m is read from one or two files; at 1 GB a million devices' hour is in a
# few files that every read opens whole (bench/layout.py).
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_FILE_CONF = "spark.databricks.delta.optimize.maxFileSize"


def maintain(
    spark: SparkSession,
    settings: ProcessorSettings,
    retain_hours: float = 168.0,
    should_stop: Callable[[], bool] = lambda: False,
) -> bool:
    """OPTIMIZE (compact small files) and VACUUM every table; safe while streams run.

    OPTIMIZE writes files of at most ``MAX_FILE_BYTES``, and lays a clustered table's
    out by its clustering columns (``common.lake.TableSpec.cluster_by``).

    OPTIMIZE commits with ``dataChange=false``, which streaming readers skip and
    which does not conflict with concurrent appends. It does conflict with a
    MERGE or an overwrite that read the files it compacted: whichever commits
    second is refused, and runs again (``retry_conflicts``, in the streams'
    writers and here). VACUUM keeps ``retain_hours`` of history (Delta refuses
    less than 168 hours unless its check is disabled).

    Args:
        spark: The session.
        settings: Processor settings (the lake).
        retain_hours: History VACUUM keeps.
        should_stop: Asked before each table; when true, the tables left are not touched.

    Returns:
        Whether every table was maintained.
    """
    with conf_held(spark, {MAX_FILE_CONF: str(MAX_FILE_BYTES)}):  # a caller's session goes on
        for name in TABLES:
            if should_stop():
                return False
            _compact(spark, settings, name, retain_hours)
    return True


def _compact(
    spark: SparkSession, settings: ProcessorSettings, name: Table, retain_hours: float
) -> None:
    """OPTIMIZE and VACUUM one table, if it exists; say what the compaction did."""
    path = settings.lake.table(name)
    if not is_delta_table(spark, path):
        return
    table = delta_identifier(path)

    def optimize() -> Row | None:
        return spark.sql(f"OPTIMIZE {table}").select("metrics.*").first()

    metrics = retry_conflicts(optimize, f"OPTIMIZE {name}")
    spark.sql(f"VACUUM {table} RETAIN {retain_hours:g} HOURS").collect()
    added = metrics["numFilesAdded"] if metrics else 0
    removed = metrics["numFilesRemoved"] if metrics else 0
    print(f"[maintain] {name}: compacted {removed} files into {added}", flush=True)
