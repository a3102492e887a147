"""The lake's layout: every table, who writes and reads it, and where checkpoints go.

The processor writes these tables, the dashboard and the load test read them; each
names a table by its ``Table`` member, never by its path, and a streaming query by
its ``Query`` member. ``TABLES`` is the registry the rest derives from: the query that
writes each table (what a rebuild empties), the key its rows are matched on (what a
MERGE joins on), the queries that stream from it (rebuilt with its writer) and the
readers outside the processor. A table's schema is what its query's transforms return:
the processor creates it from them (``processor.lake_setup``), so the two cannot differ.
``QUERY_SPECS`` holds what each query is: its trigger's tier and its rebuild rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from urllib.parse import urlparse


class Table(StrEnum):
    """A Delta table, as its path under the lake root."""

    BRONZE_EVENTS = "bronze/events"
    SILVER_EVENTS = "silver/events"
    SILVER_QUARANTINE = "silver/quarantine"
    DIM_DEVICES = "dim/devices"
    GOLD_DEVICE_1M = "gold/device_1m"
    GOLD_SITE_TYPE_WINDOWS = "gold/site_type_windows"
    GOLD_DEVICE_SESSIONS = "gold/device_sessions"
    GOLD_ALERTS = "gold/alerts"
    GOLD_ALERTS_RT = "gold/alerts_rt"
    GOLD_ALERT_CLEARS = "gold/alert_clears"
    GOLD_ALERT_RECOVERIES = "gold/alert_recoveries"
    GOLD_DEVICE_STATUS = "gold/device_status"
    GOLD_FLEET_SUMMARY = "gold/fleet_summary"
    OPS_PIPELINE_METRICS = "ops/pipeline_metrics"
    OPS_SCHEMA_DRIFT = "ops/schema_drift"
    STATE_ALERT_DETECTOR = "state/alert_detector"


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


class Tier(StrEnum):
    """How often a query's micro-batches run (``processor.queries.tier_interval``)."""

    HOT = "hot"  # the hot path: every trigger_interval, in its own scheduler pool
    BRONZE = "bronze"  # every bronze_trigger_interval
    BACKGROUND = "background"  # every background_trigger_interval, taking turns
    REALTIME = "realtime"  # Spark's real-time mode, in an application of its own


@dataclass(frozen=True)
class QuerySpec:
    """One streaming query of the registry.

    Attributes:
        tier: Its trigger's tier. Bronze's is the hot path's when silver reads bronze
            (``processor.queries.tier_of``).
        rebuildable: ``python -m processor rebuild`` may reset it: the tables it writes
            are recomputed from what it reads.
        stateless: Its checkpoint holds no state; a ``state`` folder in it is an earlier
            version's, and the query is rebuilt so that its state is recomputed.
    """

    tier: Tier
    rebuildable: bool = False
    stateless: bool = False


QUERY_SPECS: Mapping[Query, QuerySpec] = MappingProxyType(
    {
        Query.SILVER: QuerySpec(Tier.HOT),
        Query.BRONZE: QuerySpec(Tier.BRONZE),
        Query.DEVICE_STATUS: QuerySpec(Tier.BACKGROUND, rebuildable=True),
        Query.GOLD_DEVICE_SESSIONS: QuerySpec(Tier.BACKGROUND, rebuildable=True),
        # The alert detector's state is the table state/alert_detector, not Spark's.
        Query.ALERTS: QuerySpec(Tier.BACKGROUND, rebuildable=True, stateless=True),
        Query.ALERT_RECOVERIES: QuerySpec(Tier.BACKGROUND, rebuildable=True),
        Query.ALERTS_RT: QuerySpec(Tier.BACKGROUND, rebuildable=True),
        Query.REALTIME_ALERTS: QuerySpec(Tier.REALTIME),
    }
)


def rebuildable() -> tuple[Query, ...]:
    """The queries ``python -m processor rebuild`` may reset, in the registry's order."""
    return tuple(q for q, spec in QUERY_SPECS.items() if spec.rebuildable)


class Reader(StrEnum):
    """A reader of the lake outside the processor; both read through delta-rs."""

    DASHBOARD = "the dashboard"
    VERIFY = "loadtest verify"


@dataclass(frozen=True)
class TableSpec:
    """One table of the registry.

    Attributes:
        writer: The streaming query that writes it; None for what the processor writes
            itself (the device dimension at start, the metrics from its listener).
        key: The columns that identify a row (a MERGE matches on them).
        streamed_by: The queries that read it as a stream.
        read_by: The readers outside the processor.
        fixed_columns: Why its writer starts again from scratch (a rebuild) when the
            table's columns change, ``{table}`` naming it; None when they may change
            freely.
        cluster_by: The columns its files are laid out by (Delta's liquid clustering),
            when ``python -m processor maintain`` compacts them; none: files stay in the
            order they were written.
    """

    writer: Query | None
    key: tuple[str, ...]
    streamed_by: tuple[Query, ...] = ()
    read_by: frozenset[Reader] = frozenset()
    fixed_columns: str | None = None
    cluster_by: tuple[str, ...] = ()


_BOTH = frozenset(Reader)
# One aggregate buffer per output column in the checkpointed state: a change of the
# output's columns is a change of the state's shape.
_PER_COLUMN_STATE = "its state keeps one aggregate per column of {table}"
# Each row adds up its device's readings since the start. (device_status recomputes the
# sliding windows whole from device_1m: their columns may change freely.)
_RUNNING_SUMS = "each row of {table} adds up its device's readings so far"
_DASHBOARD = frozenset({Reader.DASHBOARD})
_SILVER_READERS = (Query.DEVICE_STATUS, Query.GOLD_DEVICE_SESSIONS, Query.ALERTS)
TABLES: Mapping[Table, TableSpec] = MappingProxyType(
    {
        # Silver streams bronze only with silver_input=bronze (or the rate source).
        Table.BRONZE_EVENTS: TableSpec(
            Query.BRONZE, ("topic", "partition", "offset"), (Query.SILVER,),
            frozenset({Reader.VERIFY}),
        ),
        Table.SILVER_EVENTS: TableSpec(Query.SILVER, ("event_id",), _SILVER_READERS, _BOTH),
        Table.SILVER_QUARANTINE: TableSpec(
            Query.SILVER, ("topic", "partition", "offset"), (), _BOTH
        ),
        Table.DIM_DEVICES: TableSpec(None, ("device_id",), (), _DASHBOARD),
        # The hot path writes each batch's devices, the whole fleet mixed, in time order:
        # clustered, a device's history is in few files (bench/layout.py).
        Table.GOLD_DEVICE_1M: TableSpec(
            Query.SILVER, ("device_id", "window_start"), (), _BOTH,
            cluster_by=("device_id", "window_start"),
        ),
        Table.GOLD_SITE_TYPE_WINDOWS: TableSpec(
            Query.DEVICE_STATUS, ("site", "device_type", "window_start")
        ),
        Table.GOLD_DEVICE_SESSIONS: TableSpec(
            Query.GOLD_DEVICE_SESSIONS, ("device_id", "session_start"), (), _DASHBOARD,
            _PER_COLUMN_STATE,
        ),
        Table.GOLD_ALERTS: TableSpec(
            Query.ALERTS, ("alert_id",), (Query.ALERT_RECOVERIES,), _DASHBOARD
        ),
        Table.GOLD_ALERTS_RT: TableSpec(Query.ALERTS_RT, ("alert_id",)),
        Table.GOLD_ALERT_CLEARS: TableSpec(Query.ALERTS, ("alert_id",), (Query.ALERT_RECOVERIES,)),
        Table.GOLD_ALERT_RECOVERIES: TableSpec(
            Query.ALERT_RECOVERIES, ("alert_id",), (), _DASHBOARD
        ),
        Table.GOLD_DEVICE_STATUS: TableSpec(
            Query.DEVICE_STATUS, ("device_id",), (), _DASHBOARD, _RUNNING_SUMS
        ),
        Table.GOLD_FLEET_SUMMARY: TableSpec(
            Query.DEVICE_STATUS, ("device_type",), fixed_columns=_RUNNING_SUMS
        ),
        Table.OPS_PIPELINE_METRICS: TableSpec(None, ("query_id", "batch_id"), (), _BOTH),
        Table.OPS_SCHEMA_DRIFT: TableSpec(
            Query.SILVER, ("field", "schema_version", "seen_time"), (), _DASHBOARD
        ),
        # The alert detector's state per device (processor.alerts).
        Table.STATE_ALERT_DETECTOR: TableSpec(Query.ALERTS, ("device_id",)),
    }
)  # fmt: skip


# Tables an earlier version wrote under another path: the old path, then the table. The
# processor recomputes such a table at its first start on a lake that holds the old one
# (``processor.evolution.renamed_leftovers``); the old folder is left for its owner.
RENAMED: Mapping[str, Table] = MappingProxyType(
    {"gold/site_type_10m": Table.GOLD_SITE_TYPE_WINDOWS}  # its window length is a setting
)


def written_by(query: Query | str) -> tuple[Table, ...]:
    """The tables a query writes, in the registry's order."""
    return tuple(t for t, spec in TABLES.items() if spec.writer == query)


def read_by(reader: Reader) -> frozenset[Table]:
    """The tables a reader outside the processor reads."""
    return frozenset(t for t, spec in TABLES.items() if reader in spec.read_by)


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
