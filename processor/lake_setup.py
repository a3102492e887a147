"""How the lake's tables are created and evolved before any query starts.

Every table of ``common.lake.TABLES`` is created empty with the schema its query's
transforms return on empty frames (``table_frames``), so that a table cannot differ
from what is written to it and downstream streams can start on an empty lake. An
existing table gains the columns it lacks (``processor.tables.ensure_table``); the
queries whose checkpointed state no longer fits are reset (``processor.evolution``).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from common.delta_table import open_delta_table
from common.fleet import FLEET_IDENTITY_PREFIX, fleet_identity, fleet_pools
from common.lake import READER_TABLE_PROPERTIES, TABLES, Table
from processor import alerts, bronze, evolution, gold, parsing, realtime, sources
from processor.device_rows import profile_batches
from processor.lifecycle import say
from processor.metrics import METRICS_SCHEMA
from processor.schema import DEVICE_SCHEMA, KAFKA_SOURCE_SCHEMA
from processor.settings import ProcessorSettings
from processor.silver import quarantine_out, silver_frame, silver_out
from processor.tables import TableChange, ensure_clustering, ensure_table, is_delta_table

# Devices per task of the dimension's build: a million-device fleet is five tasks.
DIMENSION_CHUNK = 200_000
# Tables created or checked at once at start-up.
SETUP_THREADS = 4
# Delta's operations that keep a table's rows as they are.
UPKEEP = frozenset(
    {
        "OPTIMIZE",
        "VACUUM START",
        "VACUUM END",
        "SET TBLPROPERTIES",
        "UNSET TBLPROPERTIES",
        "CLUSTER BY",
    }
)


def devices_frame(spark: SparkSession, settings: ProcessorSettings) -> DataFrame:
    """The device dimension of the seeded fleet (as the producer builds it).

    A fleet larger than one task's ``DIMENSION_CHUNK`` is computed by Spark's tasks, a
    range of device indices each (``processor.device_rows``); a smaller one by the same
    function here, with no Python worker to start for it.
    """
    size, seed = settings.fleet_size, settings.seed
    sites, buildings = fleet_pools(size, seed)
    rows = profile_batches(seed, size, sites, buildings, to_arrow_schema(DEVICE_SCHEMA))
    if size <= DIMENSION_CHUNK:
        ids = pa.record_batch([pa.array(np.arange(size, dtype=np.int64))], names=["id"])
        return spark.createDataFrame(pa.Table.from_batches(rows(iter([ids]))), DEVICE_SCHEMA)
    tasks = -(-size // DIMENSION_CHUNK)
    return spark.range(0, size, numPartitions=tasks).mapInArrow(rows, DEVICE_SCHEMA)


def write_devices(spark: SparkSession, settings: ProcessorSettings) -> None:
    """(Re)write the device dimension; a running silver stream sees it a second or so later.

    The commit carries the fleet's identity (``common.fleet.fleet_identity``) as its
    user metadata, so that a start with another fleet knows to write it anew
    (``dimension_is_stale``). See ``processor.device_dimension``.
    """
    devices_frame(spark, settings).write.format("delta").mode("overwrite").option(
        "overwriteSchema", "true"
    ).option("userMetadata", fleet_identity(settings.fleet_size, settings.seed)).options(
        **READER_TABLE_PROPERTIES
    ).save(settings.lake.table(Table.DIM_DEVICES))


def dimension_is_stale(spark: SparkSession, settings: ProcessorSettings) -> bool:
    """Whether the device dimension must be written: missing, of other columns, or another fleet's.

    A dimension the processor wrote for another fleet (its last write names another
    ``fleet_identity``: another size, seed or profile definition) is stale; one whose
    last write someone else made (a user's own devices, an edit) is kept as it is.
    Upkeep commits (``UPKEEP``: compaction, vacuum, properties) are not writes here.
    """
    path = settings.lake.table(Table.DIM_DEVICES)
    if not is_delta_table(spark, path):
        return True
    if sources.delta_table(spark, path).columns != DEVICE_SCHEMA.names:
        return True
    history = open_delta_table(path, settings.lake.storage_options()).history()
    written = next(
        (str(c.get("userMetadata", "")) for c in history if c.get("operation") not in UPKEEP),
        "",
    )
    wanted = fleet_identity(settings.fleet_size, settings.seed)
    return written.startswith(FLEET_IDENTITY_PREFIX) and written != wanted


def table_frames(
    spark: SparkSession, settings: ProcessorSettings, devices: DataFrame
) -> dict[Table, DataFrame]:
    """Every table of ``common.lake.TABLES`` but the dimension, as an empty frame of its rows.

    Args:
        spark: The session.
        settings: Processor settings (the windows' lengths shape some columns).
        devices: The device dimension (silver's rows carry its columns).
    """
    s = settings
    bronze_rows = bronze.to_bronze(spark.createDataFrame([], KAFKA_SOURCE_SCHEMA))
    silver_all = silver_frame(bronze_rows, devices, "1 minute")
    silver = silver_out(silver_all)
    minutes = gold.device_minute_aggregates(silver, "1 minute")
    detected = spark.createDataFrame([], alerts.DETECTED_SCHEMA)
    raised = alerts.raised_alerts(detected)
    clears = alerts.cleared_alerts(detected)
    return {
        Table.BRONZE_EVENTS: bronze_rows,
        Table.SILVER_EVENTS: silver,
        Table.SILVER_QUARANTINE: quarantine_out(silver_all),
        Table.GOLD_DEVICE_1M: minutes,
        Table.GOLD_SITE_TYPE_WINDOWS: gold.site_type_windows(
            minutes, s.sliding_length, s.sliding_slide
        ),
        Table.GOLD_DEVICE_SESSIONS: gold.device_sessions(silver, "1 minute", s.session_gap),
        Table.GOLD_ALERTS: raised,
        Table.GOLD_ALERTS_RT: realtime.landed_alerts(
            spark.createDataFrame([], KAFKA_SOURCE_SCHEMA)
        ),
        Table.GOLD_ALERT_CLEARS: clears,
        Table.GOLD_ALERT_RECOVERIES: alerts.alert_recoveries(
            raised, clears, "1 minute", s.recovery_window
        ),
        Table.GOLD_DEVICE_STATUS: gold.latest_status(silver),
        Table.GOLD_FLEET_SUMMARY: gold.fleet_summary(gold.latest_status(silver)),
        Table.OPS_PIPELINE_METRICS: spark.createDataFrame([], METRICS_SCHEMA),
        Table.OPS_SCHEMA_DRIFT: parsing.field_drift(silver),
        Table.STATE_ALERT_DETECTOR: alerts.new_states(detected),
    }


def ensure_tables(spark: SparkSession, settings: ProcessorSettings) -> dict[Table, TableChange]:
    """Create every table empty, with its schema, so that downstream streams can start.

    An existing table gains the columns it lacks, and the clustering the registry gives
    it (``TableSpec.cluster_by``).

    Returns:
        What changed, per table.
    """
    devices = settings.lake.table(Table.DIM_DEVICES)
    # The dimension is the fleet's: written anew when the contract changed its columns
    # or the fleet is another one.
    if dimension_is_stale(spark, settings):
        write_devices(spark, settings)
    frames = table_frames(spark, settings, sources.delta_table(spark, devices))
    options = settings.lake.storage_options()

    def ensure(table: Table, empty: DataFrame) -> TableChange:
        path, cluster_by = settings.lake.table(table), TABLES[table].cluster_by
        change = ensure_table(spark, path, empty, options)
        if cluster_by:
            ensure_clustering(spark, path, cluster_by, announce=not change.created)
        return change

    # Each table is a few calls to the lake and a commit, mostly waiting: several at once.
    with ThreadPoolExecutor(SETUP_THREADS, thread_name_prefix="lake-setup") as pool:
        changes = {table: pool.submit(ensure, table, empty) for table, empty in frames.items()}
        return {table: change.result() for table, change in changes.items()}


def prepare_lake(
    spark: SparkSession, settings: ProcessorSettings, requested: Sequence[str] = ()
) -> None:
    """Create or evolve the tables; reset the queries of this run whose state no longer fits.

    See ``processor.evolution``. A stale query that this process does not run is
    named, with the command that rebuilds it.

    Args:
        spark: The session.
        settings: Processor settings.
        requested: Queries to reset as well (``python -m processor rebuild``).
    """
    changes = ensure_tables(spark, settings)
    stale = evolution.stale_queries(changes)
    stale |= evolution.stateful_leftovers(settings.lake)
    stale |= evolution.renamed_leftovers(changes, settings.lake)
    wanted = settings.query_names()
    for query in evolution.with_readers([*stale, *requested]):
        why = stale.get(query) or (
            "on request" if query in requested else "it reads a table that is rebuilt"
        )
        if query not in wanted:
            say(f"query {query} must be rebuilt ({why}): run python -m processor rebuild {query}")
            continue
        say(f"rebuilding {query} from its input: {why}")
        evolution.reset_query(spark, query, settings.lake)
