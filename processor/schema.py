"""Spark types for the event contract, derived from ``common.contract``."""

from __future__ import annotations

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from common.alerts import ALERT_FIELDS
from common.contract import DEVICE_FIELDS, FIELDS, METRIC_NAMES

SPARK_TYPES: dict[str, DataType] = {
    "string": StringType(),
    "long": LongType(),
    "double": DoubleType(),
    "timestamp": TimestampType(),
}

# The contract's time format (``common.contract.format_time``), in Spark's pattern letters.
SPARK_TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"

# Typed event columns, in contract order.
EVENT_SCHEMA = StructType(
    [StructField(f.name, SPARK_TYPES[f.type], nullable=not f.required) for f in FIELDS]
)

# The device dimension: profile columns plus a (low, high) threshold pair per metric.
DEVICE_SCHEMA = StructType(
    [StructField(f.name, SPARK_TYPES[f.type], nullable=False) for f in DEVICE_FIELDS]
    + [StructField("battery_powered", BooleanType(), nullable=False)]
    + [
        StructField(f"{m}_{bound}", DoubleType(), nullable=True)
        for m in METRIC_NAMES
        for bound in ("low", "high")
    ]
)

# One record of the alerts topic (``common.alerts``).
ALERT_RECORD_SCHEMA = StructType(
    [StructField(f.name, SPARK_TYPES[f.type], nullable=not f.required) for f in ALERT_FIELDS]
)

# A record of Spark's Kafka source, as ``spark.readStream.format("kafka")`` gives it.
KAFKA_SOURCE_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
