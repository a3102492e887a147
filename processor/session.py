"""The SparkSession, with Delta and the Kafka connector, checked at start-up."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from common.jars import ConnectorJarsMissingError, connector_jars
from common.paths import package_file
from common.redact import log4j_redacted
from processor import driver_jvm
from processor.connect_server import bound_connect_retries, check_connect_server, remote_url
from processor.settings import S3_PACKAGES, S3_PACKAGES_EXCLUDES, ProcessorSettings

log = logging.getLogger("iot_pulse.processor")

# Fair scheduling between the hot path and the rest (the pools are defined in this file).
SCHEDULER_POOLS = package_file("processor", "fairscheduler.xml")
HOT_POOL, BACKGROUND_POOL = "hot", "background"
# The JVM's logging: Spark and the Kafka client quiet on the console, WARN in the log file.
LOG4J2_CONFIG = package_file("processor", "log4j2.xml")
_LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")
# Columns whose values are (nearly) all distinct: written without a dictionary.
UNIQUE_COLUMNS = ("value", "raw", "event_id")


# Spark's settings that capture each DataFrame call's call site (PySpark's and the JVM's).
CALL_SITE_CAPTURE = (
    "spark.python.sql.dataFrameDebugging.enabled",
    "spark.sql.dataFrameQueryContext.enabled",
)
# A local driver's collector: the throughput one (Parallel), not G1. A local driver runs
# every task, and its work is small allocations in many micro-batches: G1's write
# barriers, card refinement and concurrent marking cost CPU all the time, while
# Parallel's full collections of a heap of a few hundred MB live are short.
LOCAL_DRIVER_JVM_OPTIONS = ("-XX:+UseParallelGC",)
# The local profile: settings for a local master, where the driver's JVM runs every task
# on the cores of one machine. A cluster master gets Spark's and Delta's defaults.
LOCAL_PROFILE = {
    # Adaptive execution re-plans each micro-batch's shuffles after a first stage; on a
    # few cores and micro-batches of a few thousand rows it costs more than it saves.
    "spark.sql.adaptive.enabled": "false",
    # Delta rebuilds a snapshot with 50 tasks by default: far too many on a few cores.
    "spark.databricks.delta.snapshotPartitions": "2",
    # Micro-batches are cached for one batch only: skip compressing the cache.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    # Memory pages of 1 MB, not the 32 MB Spark derives from a 2 GB driver: every
    # micro-batch broadcasts its devices' dimension rows in a hash map that takes a
    # whole page, and the driver keeps each broadcast until a GC releases it.
    "spark.buffer.pageSize": "1m",
    # Spark's status store (the UI's data, kept even with the UI off) holds the last
    # 1,000 jobs, stages and SQL executions by default; seven queries make dozens a
    # minute, and pruning so large a store costs the driver's CPU.
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.ui.retainedTasks": "1000",
    "spark.sql.ui.retainedExecutions": "50",
    # Python workers forked from a daemon that has imported the transforms' modules.
    "spark.python.daemon.module": "processor.worker_daemon",
}
# The JVM system property that names the log file (LOG4J2_CONFIG's file appender).
LOG_FILE_PROPERTY = "iot.log.file"


def _java_option(name: str, value: str) -> str:
    """``-Dname=value``, quoted for Spark's option parser when the value needs it.

    Spark's parser takes what is inside single quotes as it is (a regex's backslashes);
    a value that holds a single quote itself goes in double quotes, where a backslash
    escapes the next character.
    """
    option = f"-D{name}={value}"
    if not any(c in option for c in " \\\"'"):
        return option
    if "'" not in option:
        return f"'{option}'"
    escaped = option.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


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
        # Each event, and its trace in the file, cut of secrets (common.redact).
        "iot.log.message": log4j_redacted("%m"),
        "iot.log.event": log4j_redacted("%m%n%ex"),
    }
    if log_file is not None:
        props[LOG_FILE_PROPERTY] = str(log_file)
    return " ".join(_java_option(k, v) for k, v in props.items())


def quiet_console(spark: SparkSession) -> None:
    """From now on, the console shows only the JVM's FATAL events; what it prints goes to the log.

    For a deliberate stop: the batches it interrupts log errors (aborted writes and
    broadcasts) that say nothing to the user; and Spark's block manager stops while
    block removals it was asked for are still running (a burst of them, after a GC),
    and Scala prints each one's reply, refused by the stopped thread pool, straight to
    stderr as a ``RejectedExecutionException`` trace (``processor.driver_stderr``). The
    log file keeps its level. Through Spark Connect the server's console is its own.
    """
    if not is_remote(spark):
        driver_jvm.quiet()


def build_session(
    settings: ProcessorSettings, app_name: str = "iot-pulse", log_file: Path | None = None
) -> SparkSession:
    """Create (or get) the session: Delta catalog, Kafka connector, RocksDB state.

    With a Spark Connect server (``settings.remote``, or ``SPARK_REMOTE``) the session
    is its client: the server has the connectors and its own application settings
    (``application_conf``), and this session sets only its own (``runtime_conf``).
    Otherwise the driver JVM logs through ``LOG4J2_CONFIG`` at ``settings.log_level``,
    when this call starts it (not under ``spark-submit``, which started it already:
    there the root level is set instead).

    Args:
        settings: Processor settings (master, jars, shuffle partitions, log level ...).
        app_name: Spark application name.
        log_file: Where the JVM also logs WARN and up, with full traces.

    Raises:
        ConnectorJarsMissingError: the Delta classes cannot be loaded.
    """
    if (remote := remote_url(settings)) or connect_environment():
        return _connect_session(settings, remote)
    if settings.master.startswith("local") and not os.environ.get("PYSPARK_PYTHON"):
        # Python workers must see this interpreter's packages (pandas, pyarrow).
        os.environ["PYSPARK_PYTHON"] = sys.executable
    # spark-submit starts the JVM before Python, and passes it the gateway's port.
    started_here = "PYSPARK_GATEWAY_PORT" not in os.environ
    builder = SparkSession.builder.appName(app_name)
    if settings.master:
        builder = builder.master(settings.master)
    s3 = settings.lake.on_s3
    if settings.jars_dir:
        jars = connector_jars(settings.jars_dir, s3=s3)
        builder = builder.config("spark.jars", ",".join(jars))
    elif s3 and "hadoop-aws" not in settings.packages:
        builder = builder.config("spark.jars.packages", f"{settings.packages},{S3_PACKAGES}")
        builder = builder.config("spark.jars.excludes", S3_PACKAGES_EXCLUDES)
    else:
        builder = builder.config("spark.jars.packages", settings.packages)
    for key, value in session_conf(settings, log_file).items():
        builder = builder.config(key, value)
    if started_here and not driver_jvm.launched():
        spark = driver_jvm.launch(builder, log_file)
    else:
        spark = builder.getOrCreate()
    if not started_here:
        spark.sparkContext.setLogLevel(settings.log_level)
    _check_sources(spark)
    return spark


@contextmanager
def conf_held(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """The session's settings ``conf`` within the block; the session's own back after it."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def is_remote(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect client (no JVM, no SparkContext here)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def connect_environment() -> bool:
    """Whether this process runs where sessions are Spark Connect's (Databricks serverless)."""
    from pyspark.sql.utils import is_remote as connect_mode

    return connect_mode()


def _connect_session(settings: ProcessorSettings, url: str) -> SparkSession:
    """A Spark Connect session (on ``url``, else the environment's), with the processor's conf."""
    if url:
        check_connect_server(url)
    builder = SparkSession.builder.remote(url) if url else SparkSession.builder
    spark = builder.getOrCreate()
    for key, value in runtime_conf(settings).items():
        spark.conf.set(key, value)
    _check_sources(spark)
    if url:  # it answered, so a cluster that had to start is up; a platform's own is left be
        bound_connect_retries(spark)
    return spark


def is_local(settings: ProcessorSettings) -> bool:
    """Whether the processor runs on a local master (the local profile applies)."""
    return settings.master.startswith("local")


def session_conf(settings: ProcessorSettings, log_file: Path | None = None) -> dict[str, str]:
    """A classic session's settings: the application's, the session's, and the local profile.

    Args:
        settings: Processor settings (master, shuffle partitions, log level, the lake).
        log_file: Where the JVM also logs WARN and up (``log4j2_options``).
    """
    conf = application_conf(settings, log_file) | runtime_conf(settings)
    if is_local(settings):
        conf |= LOCAL_PROFILE
    return conf


def application_conf(settings: ProcessorSettings, log_file: Path | None = None) -> dict[str, str]:
    """What the Spark application starts with: a classic driver's, or a Connect server's.

    Args:
        settings: Processor settings (master, log level ...).
        log_file: Where the JVM also logs WARN and up (``log4j2_options``).
    """
    driver_options = (
        *(LOCAL_DRIVER_JVM_OPTIONS if is_local(settings) else ()),
        *((settings.driver_java_options,) if settings.driver_java_options else ()),
    )
    return {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.scheduler.mode": "FAIR",
        "spark.scheduler.allocation.file": str(SCHEDULER_POOLS),
        "spark.driver.extraJavaOptions": " ".join(
            (*driver_options, log4j2_options(settings.log_level, log_file))
        ),
        "spark.ui.enabled": str(settings.ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": settings.driver_memory,
        # Seven queries, Delta's own jobs and MERGEs generate a few hundred distinct
        # classes; with the default cache of 100, every micro-batch recompiles them all
        # (Janino, then the JIT again) and the processor spends its time compiling.
        "spark.sql.codegen.cache.maxEntries": "2000",
        # PySpark records the Python call site of every DataFrame and Column call, for
        # error messages (the "DataFrame query context"): py4j round trips around each
        # call (Column.alias: 11 instead of 1) and a JVM stack trace, hundreds per
        # micro-batch. Errors keep their message and trace.
        **{key: "false" for key in CALL_SITE_CAPTURE},
    }


def runtime_conf(settings: ProcessorSettings) -> dict[str, str]:
    """The processor's session settings: set on a classic session, or on a Connect one.

    Args:
        settings: Processor settings (shuffle partitions, the lake).
    """
    return {
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        # Commit a small changelog per batch instead of uploading RocksDB snapshots.
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # The contract checks make wide CASE WHEN projections; inferring constraints over
        # them costs minutes of planning per micro-batch, and buys nothing here.
        "spark.sql.constraintPropagation.enabled": "false",
        # Delta collects min/max statistics on a table's first 32 columns at every write;
        # the keys and times lead each table, so new tables index only their first 6.
        "spark.databricks.delta.properties.defaults.dataSkippingNumIndexedCols": "6",
        # VACUUM lists a table's files with this many tasks, 10,000 by Spark's default,
        # for a listing of a few files per table.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(
            settings.shuffle_partitions
        ),
        # Parquet tries a dictionary for every column it writes; the raw payloads and the
        # event ids are unique, so for them it is work for nothing. Low-cardinality
        # columns (devices, sites, status) keep theirs.
        **{f"spark.hadoop.parquet.enable.dictionary#{c}": "false" for c in UNIQUE_COLUMNS},
        # The lake's own settings: S3A's endpoint, region and keys for a lake on S3.
        **settings.lake.spark_conf(),
    }


def _check_sources(spark: SparkSession) -> None:
    """Check that Spark has Delta and the Kafka connector (S3A's jars: ``connector_jars``).

    Each format is looked up with an analysis that fails on what is missing
    (``DATA_SOURCE_NOT_FOUND``) before it reads anything: the same check on a classic
    session and through Spark Connect.

    Raises:
        ConnectorJarsMissingError: one of them is not on Spark's classpath.
    """
    missing = [
        what
        for what, found in (
            ("Delta", _has_source(spark, "delta")),
            ("the Kafka connector", _has_source(spark, "kafka")),
        )
        if not found
    ]
    if missing:
        where = "the Spark Connect server's" if is_remote(spark) else "Spark's"
        raise ConnectorJarsMissingError(
            f"{' and '.join(missing)} is not on {where} classpath; run "
            "'python -m infra.jars spark' and set IOT_PROCESSOR_JARS_DIR (for a Connect "
            "server: its --jars), or let spark.jars.packages resolve them"
        )


def _has_source(spark: SparkSession, name: str) -> bool:
    """Whether Spark resolves the data source ``name`` (an analysis, no data read)."""
    try:
        spark.read.format(name).load("/nonexistent-iot-pulse-probe").schema  # noqa: B018
    except AnalysisException as exc:
        return "DATA_SOURCE_NOT_FOUND" not in (exc.getCondition() or str(exc))
    except Exception as exc:  # noqa: BLE001 - any other error: the source was found
        return "DATA_SOURCE_NOT_FOUND" not in str(exc)
    return True
