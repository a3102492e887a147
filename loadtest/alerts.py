"""What the real-time alert path should have sent: the breaches, from the readings themselves.

An oracle apart from Spark: it reads the events topic with confluent-kafka and checks
each reading against its device's thresholds (``common.fleet``) in plain Python, each
payload by its contract version. ``bench/alerts.py`` and the end-to-end test compare
the alerts topic and ``gold/alerts_rt`` with it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from confluent_kafka import Consumer, TopicPartition

from common.alerts import THRESHOLD_HIGH, THRESHOLD_LOW, alert_id
from common.contract import METRIC_NAMES, VERSION_BY_NUMBER
from common.fleet import Device
from common.kafka import LIBRDKAFKA_LOG


def read_topic(bootstrap: str, topic: str, timeout_s: float = 10.0) -> list[tuple[bytes, int]]:
    """Every record of ``topic`` up to its current end: (value, Kafka timestamp in ms).

    Raises:
        TimeoutError: No record came within ``timeout_s`` before the end.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "iot-pulse-check",
            "enable.auto.commit": False,
            "logger": LIBRDKAFKA_LOG,  # librdkafka's lines to the log file, not the terminal
        }
    )
    try:
        parts = consumer.list_topics(topic, timeout=timeout_s).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1]
            for p in parts
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[tuple[bytes, int]] = []
        done = {p for p, end in ends.items() if end == 0}
        while len(done) < len(parts):
            msg = consumer.poll(timeout_s)
            if msg is None:
                raise TimeoutError(f"{topic}: no record within {timeout_s:g} s before its end")
            if msg.error():
                continue
            value, offset, partition = msg.value(), msg.offset(), msg.partition()
            if value is not None:
                out.append((value, msg.timestamp()[1]))
            if offset is not None and partition is not None and offset + 1 >= ends[partition]:
                done.add(partition)
        return out
    finally:
        consumer.close()


def expected_alerts(
    readings: list[tuple[bytes, int]], fleet: Sequence[Device]
) -> dict[str, tuple[str, float, float, int]]:
    """The alerts the readings call for: alert id -> (kind, value, threshold, reading's ms).

    Args:
        readings: Records of the events topic (``read_topic``); all valid readings.
        fleet: The devices, with their thresholds.
    """
    thresholds = {d.device_id: d.thresholds() for d in fleet}
    out: dict[str, tuple[str, float, float, int]] = {}
    for value, ts in readings:
        event = json.loads(value)
        keys = VERSION_BY_NUMBER[event["schema_version"]].keys
        for metric in METRIC_NAMES:
            reading = event.get(keys.get(metric, ""))
            low, high = thresholds[event["device_id"]].get(metric, (None, None))
            if reading is None:
                continue
            if high is not None and reading > high:
                out[alert_id(event["event_id"], metric)] = (THRESHOLD_HIGH, reading, high, ts)
            elif low is not None and reading < low:
                out[alert_id(event["event_id"], metric)] = (THRESHOLD_LOW, reading, low, ts)
    return out
