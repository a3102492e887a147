"""The MQTT side of the bridge: a persistent QoS 1 subscription whose messages wait for ``ack``.

The client connects with a fixed client id, Clean Start off and a Session Expiry
Interval, so the broker keeps the subscription, and queues what devices publish, while
the bridge is away. ``start`` returns only once the broker has granted the QoS 1
subscription. Messages are acknowledged by hand (paho's ``manual_ack``): a message
not acknowledged before the connection ends is sent again by the broker when the
bridge reconnects.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

from bridge.settings import BridgeSettings
from common.mqtt import MqttConnectionError, connect, make_client
from common.mqtt_settings import MqttSettings

log = logging.getLogger("iot_pulse.bridge")


def subscription_refused_message(topic_filter: str, reason: Any, settings: MqttSettings) -> str:
    """The line for a SUBACK that does not grant ``topic_filter`` at QoS 1.

    Args:
        topic_filter: The subscription asked for.
        reason: The SUBACK's reason code (paho ``ReasonCode``: a failure, or the QoS granted).
        settings: The settings used (for the host and the user).

    """
    where, value = settings.where, int(reason.value)
    if value == 0:
        return (
            f"the MQTT broker at {where} granted the subscription to {topic_filter} at QoS 0 "
            "only: the bridge needs QoS 1 to lose nothing; raise the broker's maximum QoS"
        )
    return (
        f"the MQTT broker at {where} refused the subscription to {topic_filter} ({reason}, "
        f"code {value}): check the broker's ACL for {MqttSettings.env_name('username')} "
        f"and {BridgeSettings.env_name('topic_filter')}"
    )


@dataclass(frozen=True)
class Inbound:
    """One message taken from the broker.

    Attributes:
        topic: Its topic.
        payload: Its bytes, forwarded as they are.
        mid: Its packet id on this connection (what ``ack`` needs).
        qos: Its QoS (0 needs no acknowledgement).
        dup: The broker says it may have been delivered before.
        connection: The connection it came on (``MqttInbox.connection``).
        received: ``time.monotonic()`` when it came.
    """

    topic: str
    payload: bytes
    mid: int
    qos: int
    dup: bool
    connection: int
    received: float


class MqttInbox:
    """Subscribes with a persistent session and hands messages over through ``messages``.

    paho's network thread puts each message in ``messages``; the forwarding loop takes
    them and calls ``ack`` once Kafka has them. An acknowledgement owed on a connection
    that has since dropped is not sent: the broker sends that message again on the new
    connection (with the same packet id), and that copy is the one acknowledged.
    """

    def __init__(
        self,
        settings: MqttSettings,
        *,
        client_id: str,
        topic_filter: str,
        session_expiry_s: int,
        receive_maximum: int,
    ) -> None:
        """Build the client (not connected: ``start`` connects).

        Args:
            settings: Broker and credentials.
            client_id: Fixed client id (the session is this id's).
            topic_filter: The subscription (QoS 1).
            session_expiry_s: MQTT 5 Session Expiry Interval.
            receive_maximum: MQTT 5 Receive Maximum: messages the broker may have
                unacknowledged at this client.

        """
        self.settings = settings
        self.topic_filter = topic_filter
        self.session_expiry_s = session_expiry_s
        self.receive_maximum = receive_maximum
        self.messages: queue.Queue[Inbound] = queue.Queue()
        self.connection = 0  # counts successful connects
        self.connected = False
        self.disconnects = 0
        self.acks_dropped = 0  # owed on a connection that had dropped
        self._lock = threading.Lock()
        self._suback = threading.Event()  # the first connection's SUBACK came
        self._suback_reason: Any = None
        self._client = make_client(settings, client_id, manual_ack=True)
        self._client.on_connect = self._on_connect
        self._client.on_disconnect = self._on_disconnect
        self._client.on_subscribe = self._on_subscribe
        self._client.on_message = self._on_message

    def _properties(self) -> Any:
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]  # paho's Properties is not annotated
        props.SessionExpiryInterval = self.session_expiry_s
        props.ReceiveMaximum = self.receive_maximum
        return props

    def start(self) -> bool:
        """Connect (resuming the session) and subscribe; return whether a session was there.

        Returns once the broker has granted the subscription at QoS 1, waiting for its
        SUBACK as long as for its CONNACK (``connect_timeout_s``).

        Raises:
            common.mqtt.MqttConnectionError: Unreachable, TLS failed or refused; or the
                subscription was refused, or not answered in time.

        """
        resumed = connect(
            self._client, self.settings, clean_start=False, properties=self._properties()
        )
        timeout = self.settings.connect_timeout_s
        if not self._suback.wait(timeout):
            self.stop()
            raise MqttConnectionError(
                f"the MQTT broker at {self.settings.where} did not answer the subscription "
                f"to {self.topic_filter} within {timeout:.0f} s"
            )
        reason = self._suback_reason
        if reason.is_failure or int(reason.value) < 1:
            self.stop()
            raise MqttConnectionError(
                subscription_refused_message(self.topic_filter, reason, self.settings)
            )
        return resumed

    def _on_connect(self, client: Any, _u: Any, _flags: Any, reason: Any, _p: Any) -> None:
        if reason.is_failure:
            return
        with self._lock:
            self.connection += 1
            self.connected = True
        # Subscribing again on a resumed session changes nothing; on a new one it is needed.
        client.subscribe(self.topic_filter, qos=1)

    def _on_subscribe(self, _c: Any, _u: Any, _mid: int, reasons: list[Any], _p: Any) -> None:
        reason = reasons[0]
        if not self._suback.is_set():
            self._suback_reason = reason
            self._suback.set()
        elif reason.is_failure or int(reason.value) < 1:  # again, after a reconnect
            log.error("%s", subscription_refused_message(self.topic_filter, reason, self.settings))

    def _on_disconnect(self, _c: Any, _u: Any, _flags: Any, _reason: Any, _p: Any) -> None:
        with self._lock:
            self.connected = False
            self.disconnects += 1

    def _on_message(self, _c: Any, _u: Any, msg: Any) -> None:
        self.messages.put(
            Inbound(
                topic=msg.topic,
                payload=msg.payload,
                mid=msg.mid,
                qos=msg.qos,
                dup=bool(msg.dup),
                connection=self.connection,
                received=time.monotonic(),
            )
        )

    def ack(self, msg: Inbound) -> bool:
        """Acknowledge ``msg`` to the broker; False when its connection has dropped since."""
        if msg.qos == 0:
            return True
        with self._lock:
            current = self.connected and msg.connection == self.connection
        if not current:
            self.acks_dropped += 1
            return False
        self._client.ack(msg.mid, msg.qos)
        return True

    def stop(self) -> None:
        """Disconnect (the broker keeps the session) and stop the network thread."""
        self._client.disconnect()
        self._client.loop_stop()
