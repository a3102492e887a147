"""How the lake's tables are kept compact: ``python -m processor maintain``."""

from __future__ import annotations

from pyspark.sql import Row, SparkSession

from common.lake import TABLES
from processor.conflicts import retry_conflicts
from processor.settings import ProcessorSettings
from processor.tables import delta_identifier, is_delta_table


def maintain(spark: SparkSession, settings: ProcessorSettings, retain_hours: float = 168.0) -> None:
    """OPTIMIZE (compact small files) and VACUUM every table; safe while streams run.

    OPTIMIZE commits with ``dataChange=false``, which streaming readers skip and
    which does not conflict with concurrent appends. It does conflict with a
    MERGE or an overwrite that read the files it compacted: whichever commits
    second is refused, and runs again (``retry_conflicts``, in the streams'
    writers and here). VACUUM keeps ``retain_hours`` of history (Delta refuses
    less than 168 hours unless its check is disabled).
    """
    for name in TABLES:
        path = settings.lake.table(name)
        if not is_delta_table(spark, path):
            continue
        table = delta_identifier(path)

        def optimize(t: str = table) -> Row | None:
            return spark.sql(f"OPTIMIZE {t}").select("metrics.*").first()

        metrics = retry_conflicts(optimize, f"OPTIMIZE {name}")
        spark.sql(f"VACUUM {table} RETAIN {retain_hours:g} HOURS").collect()
        added = metrics["numFilesAdded"] if metrics else 0
        removed = metrics["numFilesRemoved"] if metrics else 0
        print(f"[maintain] {name}: compacted {removed} files into {added}", flush=True)
