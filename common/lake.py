"""The lake's layout: every table's path under the lake root, and where checkpoints go.

The processor writes these tables, the dashboard and the load test read them; each
names a table by its ``Table`` member, never by its path, and a streaming query by
its ``Query`` member.
"""

from __future__ import annotations

from enum import StrEnum
from urllib.parse import urlparse


class Table(StrEnum):
    """A Delta table, as its path under the lake root."""

    BRONZE_EVENTS = "bronze/events"
    SILVER_EVENTS = "silver/events"
    SILVER_QUARANTINE = "silver/quarantine"
    DIM_DEVICES = "dim/devices"
    GOLD_DEVICE_1M = "gold/device_1m"
    GOLD_SITE_TYPE_10M = "gold/site_type_10m"
    GOLD_DEVICE_SESSIONS = "gold/device_sessions"
    GOLD_ALERTS = "gold/alerts"
    GOLD_ALERTS_RT = "gold/alerts_rt"
    GOLD_ALERT_CLEARS = "gold/alert_clears"
    GOLD_ALERT_RECOVERIES = "gold/alert_recoveries"
    GOLD_DEVICE_STATUS = "gold/device_status"
    GOLD_FLEET_SUMMARY = "gold/fleet_summary"
    OPS_PIPELINE_METRICS = "ops/pipeline_metrics"
    OPS_SCHEMA_DRIFT = "ops/schema_drift"


class Query(StrEnum):
    """A streaming query of the processor, as its name.

    The name is the query's checkpoint folder (``checkpoint_location``), its Spark
    query name and its ``query_name`` in ``ops/pipeline_metrics``. The members are in
    the order the processor lists them (``--queries``). ``realtime_alerts`` runs in
    its own Spark application (``processor.realtime_app``), the others in the main one.
    """

    SILVER = "silver"
    BRONZE = "bronze"
    DEVICE_STATUS = "device_status"
    GOLD_DEVICE_SESSIONS = "gold_device_sessions"
    ALERTS = "alerts"
    ALERT_RECOVERIES = "alert_recoveries"
    ALERTS_RT = "alerts_rt"
    REALTIME_ALERTS = "realtime_alerts"


CHECKPOINTS = "_checkpoints"  # one folder per streaming query below it
S3_SCHEMES = ("s3a", "s3")  # Spark writes s3a:// (Hadoop's S3A); delta-rs reads both
# Spark on a lake on local disk. Without Hadoop's native library, which no registry
# serves, Hadoop's FileContext runs `readlink` in a new process for each path it
# renames (a file and its .crc, before and after: 4 per rename); the checkpoints and
# Delta's default log store commit by FileContext renames, a dozen a second at 200
# events/s. Both have a FileSystem-based twin that renames in Java, with the same
# guarantees on a local disk: an existence check, then a rename (Delta's own
# HDFSLogStore does the same there, under the same lock).
LOCAL_DISK_SPARK_CONF = {
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileSystemBasedCheckpointFileManager"
    ),
    "spark.delta.logStore.file.impl": "io.delta.storage.LocalLogStore",
}


# Stated on every table the processor creates, so that a cluster's own defaults cannot
# give a table a feature its readers (the dashboard and `loadtest verify`, through
# delta-rs) cannot read: Databricks workspaces often turn deletion vectors on for new
# tables (spark.databricks.delta.properties.defaults.enableDeletionVectors).
READER_TABLE_PROPERTIES = {"delta.enableDeletionVectors": "false"}


def lake_scheme(root: str) -> str:
    """The URI scheme of a lake root, lower case; ``""`` for a local folder.

    A one-letter scheme is a Windows drive (``C:/lake``), not a URI.
    """
    scheme = urlparse(root).scheme  # lower case
    return scheme if len(scheme) > 1 else ""


def table_location(root: str, table: Table | str) -> str:
    """Location of ``table`` under the lake ``root`` (a folder or a URI)."""
    return f"{root.rstrip('/')}/{table}"


def checkpoint_location(root: str, query: Query | str) -> str:
    """Checkpoint location of one streaming query; every query has its own."""
    return f"{root.rstrip('/')}/{CHECKPOINTS}/{query}"
