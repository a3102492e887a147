"""One bridge run: check both brokers, forward until SIGINT/SIGTERM, stop in order.

The order of a stop is what makes it at least once: Kafka is flushed first (each
delivered message acknowledged on MQTT as its report comes), then MQTT is
disconnected; what was not acknowledged stays in the broker's session for next time.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from bridge.forward import Forwarder
from bridge.kafka_side import KafkaOutbox
from bridge.mqtt_side import MqttInbox
from bridge.settings import BridgeSettings
from common.cli import console
from common.kafka import check_connection, librdkafka_config, redact
from common.stop_signals import StopFlag, stopped_by_signals

log = logging.getLogger("iot_pulse.bridge")
# Seconds for the Kafka check; with MQTT's connect timeout (8 s) an error comes within 30 s.
KAFKA_CHECK_S = 20.0
# The start of the line said once Kafka is checked and the MQTT subscription granted:
# `make demo`, the image's HEALTHCHECK and compose's healthcheck wait for it.
READY_LINE = "[bridge] forwarding"


def say(line: str) -> None:
    """Say a line on the console (and so in the log)."""
    console.info("%s", line)


def kafka_config(settings: BridgeSettings) -> dict[str, Any]:
    """The bridge's librdkafka producer config: the shared builder plus its linger."""
    conf = librdkafka_config(settings.kafka, "producer", client_id="iot-pulse-bridge")
    conf["linger.ms"] = settings.linger_ms
    return conf


def run(settings: BridgeSettings, stop: StopFlag | None = None, *, signals: bool = True) -> int:
    """Connect both sides, forward until stopped, and stop in order.

    Args:
        settings: The bridge's settings.
        stop: Stop flag (default: a new one set by SIGINT/SIGTERM).
        signals: Install the SIGINT/SIGTERM handlers (main thread only).

    Returns:
        0 after a clean stop; 1 when messages were still at Kafka after the flush
        timeout (the broker sends them again next run).

    Raises:
        common.mqtt.MqttConnectionError: The MQTT broker cannot be used, or it refused
            the subscription.
        common.kafka.KafkaConnectionError: The Kafka broker or topic cannot be used, at
            the start or while forwarding (fatal producer error, authorization refused,
            topic gone); the messages not delivered stay unacknowledged on MQTT.

    """
    stop = stop or StopFlag()
    conf = kafka_config(settings)
    # Kafka first: no MQTT message is taken before the topic is known to be writable.
    check_connection(conf, settings.kafka.topic, timeout_s=KAFKA_CHECK_S)
    inbox = MqttInbox(
        settings.mqtt,
        client_id=settings.client_id,
        topic_filter=settings.topic_filter,
        session_expiry_s=settings.session_expiry_s,
        receive_maximum=settings.max_in_flight,
    )
    resumed = inbox.start()
    try:
        outbox = KafkaOutbox(conf, settings.kafka.topic)
    except BaseException:
        inbox.stop()
        raise
    say(
        f"{READY_LINE} mqtt://{settings.mqtt.where} {settings.topic_filter} -> "
        f"{redact(conf)['bootstrap.servers']} topic {settings.kafka.topic} "
        f"(session {'resumed' if resumed else 'new'}, client id {settings.client_id})"
    )
    forwarder = Forwarder(inbox, outbox, settings.device_level, say=say)
    with stopped_by_signals(stop, signals):
        try:
            left = forwarder.run(
                stop.is_set,
                metrics_every_s=settings.metrics_every_s,
                flush_timeout_s=settings.flush_timeout_s,
            )
        finally:
            outbox.close()
            inbox.stop()
    queued = inbox.messages.qsize()
    say(forwarder.metrics.line(left, queued))
    final = forwarder.metrics.as_dict(left, queued) | {"stopped_by": stop.reason or "stop"}
    say("[bridge] stopped: " + json.dumps(final, separators=(",", ":")))
    return 1 if left else 0
