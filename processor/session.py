"""The SparkSession, with Delta and the Kafka connector, checked at start-up."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from common.paths import package_file
from processor.settings import ProcessorSettings

REQUIRED_JARS = (
    "delta-spark_",
    "spark-sql-kafka-0-10_",
    "spark-token-provider-kafka",
    "kafka-clients",
)


# Fair scheduling between the hot path and the rest (the pools are defined in this file).
SCHEDULER_POOLS = package_file("processor", "fairscheduler.xml")
HOT_POOL, BACKGROUND_POOL = "hot", "background"
# The JVM's logging: Spark and the Kafka client quiet on the console, WARN in the log file.
LOG4J2_CONFIG = package_file("processor", "log4j2.xml")
_LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")
# Columns whose values are (nearly) all distinct: written without a dictionary.
UNIQUE_COLUMNS = ("value", "raw", "event_id")
# PySpark's applyInPandasWithState (the alert detector) concatenates empty frames, which
# pandas 2 warns about from every Python worker; the warning is PySpark's, not ours.
PYTHON_WORKER_WARNINGS = (
    "ignore:The behavior of DataFrame concatenation with empty or all-NA entries:FutureWarning"
)


def _java_option(name: str, value: str) -> str:
    """``-Dname=value``, quoted for Spark's option parser when the value has a space."""
    option = f"-D{name}={value}"
    return f'"{option}"' if " " in option else option


def log4j2_options(level: str, log_file: Path | None) -> str:
    """Driver JVM options that load ``LOG4J2_CONFIG`` (see the file for the properties).

    Args:
        level: What Spark and the Kafka client print on the console (ERROR, WARN, INFO,
            DEBUG); the log file gets WARN and up, or ``level`` if lower.
        log_file: The log file; None writes none.
    """
    file_level = min(level, "WARN", key=_LEVELS.index)
    props = {
        "log4j2.configurationFile": str(LOG4J2_CONFIG),
        "iot.log.level": level,
        "iot.log.root": file_level if log_file else level,
        # Expected warnings stay hidden unless the user asks for INFO or DEBUG.
        "iot.log.benign": level if _LEVELS.index(level) < _LEVELS.index("WARN") else "ERROR",
    }
    if log_file is not None:
        props["iot.log.file"] = str(log_file)
    return " ".join(_java_option(k, v) for k, v in props.items())


def quiet_console(spark: SparkSession) -> None:
    """From now on, show only FATAL events on the console; the log file keeps its level.

    For a deliberate stop: the batches it interrupts log errors (aborted writes and
    broadcasts) that say nothing to the user. A no-op without ``LOG4J2_CONFIG``.
    """
    jvm = spark._jvm
    context = jvm.org.apache.logging.log4j.LogManager.getContext(False)  # type: ignore[union-attr]
    config = context.getConfiguration()
    console = config.getAppender("console")
    root = config.getRootLogger()
    if console is None or "console" not in root.getAppenders():
        return
    root.removeAppender("console")
    root.addAppender(console, jvm.org.apache.logging.log4j.Level.FATAL, None)  # type: ignore[union-attr]
    context.updateLoggers()


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


def build_session(
    settings: ProcessorSettings, app_name: str = "iot-pulse", log_file: Path | None = None
) -> SparkSession:
    """Create (or get) the session: Delta catalog, Kafka connector, RocksDB state.

    The driver JVM logs through ``LOG4J2_CONFIG`` at ``settings.log_level``, when this
    call starts it (not under ``spark-submit``, which started it already: there the
    root level is set instead).

    Args:
        settings: Processor settings (master, jars, shuffle partitions, log level ...).
        app_name: Spark application name.
        log_file: Where the JVM also logs WARN and up, with full traces.

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
        "spark.scheduler.allocation.file": str(SCHEDULER_POOLS),
        "spark.driver.extraJavaOptions": log4j2_options(settings.log_level, log_file),
        "spark.executorEnv.PYTHONWARNINGS": PYTHON_WORKER_WARNINGS,
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
    if settings.master.startswith("local"):
        conf["spark.python.daemon.module"] = "processor.worker_daemon"
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if spark._jvm.java.lang.System.getProperty("iot.log.level") is None:  # type: ignore[union-attr]
        spark.sparkContext.setLogLevel(settings.log_level)
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
