"""The alerts layer: the detector run over a micro-batch, and the shapes of its output.

The detector (``processor.detector``, plain Python) keeps a state per device: rolling
statistics per metric and the alerts it has open. That state lives in a Delta table
(``state/alert_detector``, one row per device, the state as JSON), not in Spark's
state store: a stateful Python operator (``applyInPandasWithState``) makes one Python
call per device per micro-batch, which at a fleet where most devices send one reading
a batch costs milliseconds a device, so a million devices fell minutes behind. Here a
micro-batch's readings are joined to their devices' stored states, sorted by device and
time, and each Spark task runs the detector over its devices in one Python call
(``detect_alerts``); the batch's transitions and its devices' new states come out
together.

Exactly once: ``processor.background_queries.start_alerts`` writes the raised and cleared alerts
first and the new states last, each as the query's writer for that batch. A batch
replayed before its states were written reads the states it read the first time, so it
finds the same transitions, which Delta then skips; one replayed after reads the newer
states, but every one of its writes is skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import DoubleType, StringType, StructField, StructType, TimestampType

from common.contract import METRIC_NAMES
from processor.detector import DetectorConfig, detect_columns, dump_state, load_state
from processor.times import seconds_between, with_time

_S, _D, _T = StringType(), DoubleType(), TimestampType()
# A device's stored detector state (``processor.detector.dump_state``).
DETECTOR_STATE_SCHEMA = StructType([StructField("device_id", _S), StructField("state", _S)])
# What the detector's tasks return: transitions (``transition`` set), and a device's
# new state (``transition`` null, ``state`` set) once per device of the batch.
DETECTED_SCHEMA = StructType(
    [
        StructField(name, kind)
        for name, kind in (
            ("transition", _S), ("alert_id", _S), ("device_id", _S), ("device_type", _S),
            ("site", _S), ("metric", _S), ("kind", _S), ("value", _D), ("threshold", _D),
            ("zscore", _D), ("event_time", _T), ("event_id", _S), ("state", _S),
        )
    ]
)  # fmt: skip
_ARROW_SCHEMA = to_arrow_schema(DETECTED_SCHEMA, timezone="UTC")  # as Spark sends them
_TRANSITION_COLUMNS = tuple(DETECTED_SCHEMA.names[:-1])
_READING_COLUMNS = (
    "event_id", "device_id", "device_type", "site", "event_time", "seq",
    *(c for m in METRIC_NAMES for c in (m, f"{m}_low", f"{m}_high")),
)  # fmt: skip


def detect_alerts(
    readings: DataFrame, states: DataFrame, config: DetectorConfig | None = None
) -> DataFrame:
    """A micro-batch's readings through the detector, from each device's stored state.

    Args:
        readings: Silver rows with the dimension's ``<metric>_low/_high`` columns (a
            static frame: one micro-batch).
        states: Stored states (``DETECTOR_STATE_SCHEMA``); a device without one starts
            afresh.
        config: Detector tuning.

    Returns:
        Rows of ``DETECTED_SCHEMA``: the ``raised`` and ``cleared`` transitions
        (``raised_alerts``, ``cleared_alerts``), and one row per device of the batch
        with its new state (``new_states``).
    """
    cfg = config or DetectorConfig()
    rows = readings.select(*_READING_COLUMNS)
    mine = states.join(rows.select("device_id").distinct(), "device_id", "left_semi")
    return (
        rows.join(mine, "device_id", "left")
        .repartition("device_id")
        .sortWithinPartitions("device_id", "event_time", "seq")
        .mapInArrow(lambda batches: _detect_task(batches, cfg), DETECTED_SCHEMA)
    )


def _detect_task(
    batches: Iterator[pa.RecordBatch], cfg: DetectorConfig
) -> Iterator[pa.RecordBatch]:
    """One task's readings, sorted by device and time, through the detector.

    A device's readings may span two Arrow batches: the last device of each batch waits
    for the next, so a task holds at most one batch and one device's readings.
    """
    carry: pa.Table | None = None
    for batch in batches:
        table = pa.Table.from_batches([batch])
        if carry is not None:
            table = pa.concat_tables([carry, table])
        if table.num_rows == 0:
            continue
        ids = table.column("device_id").to_pylist()
        last = ids[-1]
        start = len(ids) - 1
        while start > 0 and ids[start - 1] == last:
            start -= 1
        carry = table.slice(start)
        if start:
            yield _detect_devices(table.slice(0, start), cfg)
    if carry is not None and carry.num_rows:
        yield _detect_devices(carry, cfg)


def _detect_devices(table: pa.Table, cfg: DetectorConfig) -> pa.RecordBatch:
    """Readings of whole devices, sorted by device and time: their transitions and states."""
    columns = {name: table.column(name).to_pylist() for name in table.column_names}
    ids, stored = columns["device_id"], columns["state"]
    out: dict[str, list[object]] = {c: [] for c in (*_TRANSITION_COLUMNS, "state")}
    start = 0
    while start < len(ids):
        end = start + 1
        while end < len(ids) and ids[end] == ids[start]:
            end += 1
        state = load_state(stored[start])
        device = {name: values[start:end] for name, values in columns.items()}
        for transition in detect_columns(device, state, cfg):
            for c in _TRANSITION_COLUMNS:
                out[c].append(transition[c])
            out["state"].append(None)
        for c in _TRANSITION_COLUMNS:
            out[c].append(ids[start] if c == "device_id" else None)
        out["state"].append(dump_state(state))
        start = end
    return pa.RecordBatch.from_pydict(out, schema=_ARROW_SCHEMA)


def new_states(detected: DataFrame) -> DataFrame:
    """The new state of each device of the batch, shaped for ``state/alert_detector``."""
    return detected.filter(F.col("transition").isNull()).select("device_id", "state")


def raised_alerts(detected: DataFrame, now: datetime | None = None) -> DataFrame:
    """The ``raised`` transitions of one micro-batch, shaped for ``gold/alerts``.

    Args:
        detected: One micro-batch of ``detect_alerts``.
        now: ``detected_time`` (UTC-aware); default: the current time (``with_time``).
    """
    raised = detected.filter(F.col("transition") == "raised")
    return with_time(raised, "detected_time", now).select(
        "alert_id", "device_id", "device_type", "site", "metric", "kind", "value",
        "threshold", "zscore", "event_time", "detected_time",
    )  # fmt: skip


def cleared_alerts(detected: DataFrame) -> DataFrame:
    """The ``cleared`` transitions, shaped for ``gold/alert_clears``."""
    return detected.filter(F.col("transition") == "cleared").select(
        "alert_id",
        "device_id",
        "metric",
        "kind",
        "value",
        F.col("event_time").alias("cleared_time"),
    )


def alert_recoveries(
    alerts: DataFrame, clears: DataFrame, watermark: str, within: str
) -> DataFrame:
    """Each alert with the time its clearing came, if within ``within`` (a left outer join).

    Both streams are watermarked on their event times and the join is bounded in time
    (the clearing at most ``within`` after the alert), so the join state is bounded; an
    alert with no clearing in time is emitted with null ``recovered_time`` once the
    watermark passes ``alert_time + within``.

    Args:
        alerts: Rows of ``gold/alerts`` (``alert_id``, ``event_time`` ...).
        clears: Rows of ``gold/alert_clears`` (``alert_id``, ``cleared_time``).
        watermark: Watermark delay applied on both sides.
        within: How long after the alert a clearing still counts as its recovery.
    """
    a = alerts.select(
        "alert_id", "device_id", "metric", "kind", F.col("event_time").alias("alert_time")
    ).withWatermark("alert_time", watermark)
    c = clears.select(F.col("alert_id").alias("c_alert_id"), "cleared_time").withWatermark(
        "cleared_time", watermark
    )
    joined = a.join(
        c,
        F.expr(
            "c_alert_id = alert_id AND cleared_time >= alert_time "
            f"AND cleared_time <= alert_time + INTERVAL {within}"
        ),
        "leftOuter",
    )
    return joined.select(
        "alert_id",
        "device_id",
        "metric",
        "kind",
        "alert_time",
        F.col("cleared_time").alias("recovered_time"),
        seconds_between(F.col("cleared_time"), F.col("alert_time")).alias("time_to_recover_s"),
    )
