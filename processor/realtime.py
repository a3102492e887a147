"""Pure steps of the real-time alert path: readings -> threshold alerts -> alert rows.

``threshold_alerts`` is what the ``realtime_alerts`` query runs in Spark's real-time
mode (``processor.realtime_app``): stateless and single-stage, as that mode requires
in Spark 4.2 (parse, a broadcast join with the device thresholds, a filter). It reads
each payload by its contract version (``parsing.parse_events``), so every
version's readings alert alike. ``landed_alerts`` shapes the alerts topic's records
for ``gold/alerts_rt`` (the ``alerts_rt`` micro-batch query).

An alert is one reading outside one of its device's thresholds: a reading over two
thresholds raises two alerts. Unlike the detector (``processor.detector``, which
raises an alert when a metric leaves its range and clears it when it comes back),
nothing is remembered between readings.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from common.alerts import ALERT_FIELDS, ALERT_ID_SEPARATOR, THRESHOLD_HIGH, THRESHOLD_LOW
from common.contract import METRIC_NAMES
from processor import parsing
from processor.schema import ALERT_RECORD_SCHEMA, SPARK_TIME_FORMAT

ALERT_COLUMNS = tuple(f.name for f in ALERT_FIELDS)
_JSON_OPTIONS = {"timestampFormat": SPARK_TIME_FORMAT}


def _check(metric: str) -> Column:
    """The reading's ``metric`` against the device's thresholds, as one struct."""
    value, low, high = F.col(metric), F.col(f"{metric}_low"), F.col(f"{metric}_high")
    kind = F.when(value > high, F.lit(THRESHOLD_HIGH)).when(value < low, F.lit(THRESHOLD_LOW))
    return F.struct(
        F.lit(metric).alias("metric"),
        kind.alias("kind"),
        value.alias("value"),
        F.when(value > high, high).otherwise(low).alias("threshold"),
    )


def threshold_alerts(
    bronze: DataFrame, devices: DataFrame, avro_schemas: Mapping[int, str] | None = None
) -> DataFrame:
    """One row per valid reading and metric outside the device's thresholds.

    Invalid records (the processor quarantines them) and readings of devices not in
    ``devices`` raise nothing.

    Args:
        bronze: Raw records shaped as bronze rows (``bronze.to_bronze``).
        devices: The device dimension (``<metric>_low`` / ``<metric>_high`` per metric).
        avro_schemas: Writer schema id -> schema, for Avro records (``parse_events``).

    Returns:
        The ``common.alerts.ALERT_FIELDS`` columns.
    """
    profile = ["device_id", "device_type", "site"]
    thresholds = [f"{m}_{bound}" for m in METRIC_NAMES for bound in ("low", "high")]
    readings = parsing.parse_events(bronze, avro_schemas).select(
        "event_id",
        "device_id",
        "event_time",
        "schema_version",
        "kafka_timestamp",
        "reason",
        *METRIC_NAMES,
    )
    joined = readings.join(F.broadcast(devices.select(*profile, *thresholds)), "device_id")
    checks = F.filter(F.array(*[_check(m) for m in METRIC_NAMES]), lambda c: c["kind"].isNotNull())
    # Only a valid reading has checks to explode. Not a row filter on ``reason``
    # (``parsing.valid_events``): in real-time mode (Spark 4.2) that filter, pushed onto
    # the Kafka scan, passes no Avro record at all, while the same filter in a batch or a
    # micro-batch does.
    breaches = joined.select(
        "event_id", "device_id", "device_type", "site", "event_time", "schema_version",
        "kafka_timestamp", F.explode(F.when(F.col("reason").isNull(), checks)).alias("c"),
    )  # fmt: skip
    return breaches.select(
        F.concat_ws(ALERT_ID_SEPARATOR, "event_id", F.col("c.metric")).alias("alert_id"),
        "event_id", "device_id", "device_type", "site",
        F.col("c.metric").alias("metric"),
        F.col("c.kind").alias("kind"),
        F.col("c.value").alias("value"),
        F.col("c.threshold").alias("threshold"),
        "event_time",
        F.col("kafka_timestamp").alias("reading_time"),
        F.col("schema_version").cast("long").alias("schema_version"),
    )  # fmt: skip


def alert_records(alerts: DataFrame) -> DataFrame:
    """Alert rows as Kafka records: ``key`` the device id, ``value`` the JSON alert."""
    return alerts.select(
        F.col("device_id").alias("key"),
        F.to_json(F.struct(*ALERT_COLUMNS), _JSON_OPTIONS).alias("value"),
    )


def landed_alerts(records: DataFrame) -> DataFrame:
    """Records of the alerts topic as rows of ``gold/alerts_rt``, one per alert id.

    The real-time query delivers at least once (a restart resends what its last
    epoch sent), so a batch may hold one alert twice: the copy sent first is kept,
    and its Kafka timestamp is the alert's ``alert_time``. Records that are not
    alerts are dropped.

    Args:
        records: Rows of Spark's Kafka source (``value``, ``timestamp`` ...).
    """
    parsed = records.select(
        F.from_json(F.col("value").cast("string"), ALERT_RECORD_SCHEMA, _JSON_OPTIONS).alias("a"),
        F.col("timestamp").alias("alert_time"),
    ).filter(F.col("a.alert_id").isNotNull())
    first = parsed.groupBy(F.col("a.alert_id").alias("_id")).agg(
        F.min_by(F.struct("a", "alert_time"), "alert_time").alias("f")
    )
    return first.select(
        *[F.col(f"f.a.{c}").alias(c) for c in ALERT_COLUMNS],
        F.col("f.alert_time").alias("alert_time"),
        (
            (F.unix_micros(F.col("f.alert_time")) - F.unix_micros(F.col("f.a.reading_time"))) / 1000
        ).alias("latency_ms"),
    )
