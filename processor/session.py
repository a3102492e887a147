"""The SparkSession, with Delta and the Kafka connector, checked at start-up."""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from processor.settings import ProcessorSettings

REQUIRED_JARS = (
    "delta-spark_",
    "spark-sql-kafka-0-10_",
    "spark-token-provider-kafka",
    "kafka-clients",
)


HOT_POOL, BACKGROUND_POOL = "hot", "background"
# Columns whose values are (nearly) all distinct: written without a dictionary.
UNIQUE_COLUMNS = ("value", "raw", "event_id")
# Fair scheduling between the hot path and the rest: the hot pool's pending tasks get
# the cores first (minShare), the background queries take what is left.
_POOLS_XML = f"""<?xml version="1.0"?>
<allocations>
  <pool name="{HOT_POOL}">
    <schedulingMode>FIFO</schedulingMode><weight>4</weight><minShare>2</minShare>
  </pool>
  <pool name="{BACKGROUND_POOL}">
    <schedulingMode>FAIR</schedulingMode><weight>1</weight><minShare>0</minShare>
  </pool>
</allocations>
"""


def scheduler_pools_file() -> str:
    """Write the fair-scheduler pools (hot, background) to a temporary file; its path."""
    fd, path = tempfile.mkstemp(prefix="iot-pulse-pools-", suffix=".xml")
    with os.fdopen(fd, "w") as fh:
        fh.write(_POOLS_XML)
    atexit.register(Path(path).unlink, missing_ok=True)
    return path


class ConnectorJarsMissingError(RuntimeError):
    """Delta or the Kafka connector is not on the classpath."""


def connector_jars(jars_dir: str) -> list[str]:
    """The jar files in ``jars_dir``, checked to hold Delta and the Kafka connector.

    Raises:
        ConnectorJarsMissingError: the folder lacks one of them.
    """
    folder = Path(jars_dir)
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    missing = [r for r in REQUIRED_JARS if not any(Path(j).name.startswith(r) for j in jars)]
    if missing:
        raise ConnectorJarsMissingError(
            f"{folder} lacks the jars {', '.join(missing)}: run 'python -m infra.jars spark' "
            "(or unset IOT_PROCESSOR_JARS_DIR to resolve them with spark.jars.packages)"
        )
    return jars


def build_session(settings: ProcessorSettings, app_name: str = "iot-pulse") -> SparkSession:
    """Create (or get) the session: Delta catalog, Kafka connector, RocksDB state.

    Args:
        settings: Processor settings (master, jars, shuffle partitions ...).
        app_name: Spark application name.

    Raises:
        ConnectorJarsMissingError: the Delta classes cannot be loaded.
    """
    if settings.master.startswith("local") and not os.environ.get("PYSPARK_PYTHON"):
        # Python workers must see this interpreter's packages (pandas, pyarrow).
        os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder.appName(app_name)
    if settings.master:
        builder = builder.master(settings.master)
    if settings.jars_dir:
        builder = builder.config("spark.jars", ",".join(connector_jars(settings.jars_dir)))
    else:
        builder = builder.config("spark.jars.packages", settings.packages)
    conf = {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        # Commit a small changelog per batch instead of uploading RocksDB snapshots.
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.scheduler.mode": "FAIR",
        "spark.scheduler.allocation.file": scheduler_pools_file(),
        "spark.ui.enabled": str(settings.ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": settings.driver_memory,
        "spark.databricks.delta.optimizeWrite.enabled": "false",
        "spark.sql.adaptive.enabled": "false",
        # The contract checks make wide CASE WHEN projections; inferring constraints over
        # them costs minutes of planning per micro-batch, and buys nothing here.
        "spark.sql.constraintPropagation.enabled": "false",
        # Delta collects min/max statistics on a table's first 32 columns at every write;
        # the keys and times lead each table, so new tables index only their first 6.
        "spark.databricks.delta.properties.defaults.dataSkippingNumIndexedCols": "6",
        # Micro-batches are cached for one batch only: skip compressing the cache.
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        # Eight queries, Delta's own jobs and MERGEs generate a few hundred distinct
        # classes; with the default cache of 100, every micro-batch recompiles them all
        # (Janino, then the JIT again) and the processor spends its time compiling.
        "spark.sql.codegen.cache.maxEntries": "2000",
        # Delta rebuilds its snapshot with 50 tasks by default: far too many on 2 cores.
        "spark.databricks.delta.snapshotPartitions": "2",
        # Parquet tries a dictionary for every column it writes; the raw payloads and the
        # event ids are unique, so for them it is work for nothing (bronze took twice
        # as long). Low-cardinality columns (devices, sites, status) keep theirs.
        **{f"spark.hadoop.parquet.enable.dictionary#{c}": "false" for c in UNIQUE_COLUMNS},
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        for cls in (
            "io.delta.tables.DeltaTable",
            "org.apache.spark.sql.kafka010.KafkaSourceProvider",
        ):
            spark._jvm.org.apache.spark.util.Utils.classForName(cls, True, False)
    except Exception as exc:
        raise ConnectorJarsMissingError(
            "Delta or the Kafka connector is not on Spark's classpath "
            f"({type(exc).__name__}); run 'python -m infra.jars spark' and set "
            "IOT_PROCESSOR_JARS_DIR, or let spark.jars.packages resolve them"
        ) from exc
    return spark
