"""MQTT in one place: device topics, the paho client built from ``MqttSettings``, connecting.

Topics and the device id in them are pure functions. ``make_client`` builds a paho-mqtt
(2.x) MQTT 5 client; ``connect`` connects it and waits for the broker's answer, turning
what went wrong (unreachable, TLS, refused credentials) into one ``MqttConnectionError``
line that never holds the password.
"""

from __future__ import annotations

import socket
import ssl
import threading
from typing import TYPE_CHECKING, Any, cast

from common.mqtt_settings import MqttSettings

if TYPE_CHECKING:
    from paho.mqtt.client import CallbackOnConnect_v2, CleanStartOption, Client

TELEMETRY = "telemetry"
# CONNACK reason codes (MQTT 5) that mean the credentials, not the network, are wrong.
_BAD_CREDENTIALS = 134
_NOT_AUTHORIZED = 135


class MqttConnectionError(RuntimeError):
    """The MQTT broker could not be reached, failed TLS, or refused the client."""


def telemetry_topic(prefix: str, device_id: str) -> str:
    """The topic a device publishes its readings to, e.g. ``devices/dev-00001/telemetry``."""
    return f"{prefix}/{device_id}/{TELEMETRY}"


def telemetry_filter(prefix: str) -> str:
    """The subscription that matches every device's telemetry topic under ``prefix``."""
    return f"{prefix}/+/{TELEMETRY}"


def device_level(topic_filter: str) -> int:
    """The position of the device id in topics matching ``topic_filter``: its one ``+`` level.

    Args:
        topic_filter: An MQTT subscription such as ``devices/+/telemetry``.

    Returns:
        The 0-based level that holds the device id.

    Raises:
        ValueError: The filter does not have exactly one ``+`` level, or holds ``#``.

    """
    levels = topic_filter.split("/")
    if "#" in topic_filter:
        raise ValueError(
            f"topic filter {topic_filter!r} holds '#': use one '+' level for the device id, "
            "e.g. devices/+/telemetry"
        )
    plus = [n for n, level in enumerate(levels) if level == "+"]
    if len(plus) != 1 or topic_filter.count("+") != 1:
        raise ValueError(
            f"topic filter {topic_filter!r} must have exactly one '+' level (the device id), "
            "e.g. devices/+/telemetry"
        )
    return plus[0]


def device_id_from_topic(topic: str, level: int) -> str | None:
    """The device id at ``level`` of ``topic``; None when that level is missing or empty.

    ``device_id_from_topic("devices/dev-00007/telemetry", 1)`` is ``"dev-00007"``.
    """
    levels = topic.split("/")
    if level >= len(levels) or not levels[level]:
        return None
    return levels[level]


def make_client(settings: MqttSettings, client_id: str, *, manual_ack: bool = False) -> Client:
    """A paho MQTT 5 client with the settings' credentials and TLS (not connected).

    Args:
        settings: Broker and credentials.
        client_id: The client id; a fixed one keeps a persistent session across runs.
        manual_ack: Received QoS 1 messages are acknowledged only by ``client.ack``.

    """
    from paho.mqtt.client import Client
    from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

    client = Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=MQTTProtocolVersion.MQTTv5,
        manual_ack=manual_ack,
    )
    if settings.username:
        password = settings.password.get_secret_value() if settings.password else None
        client.username_pw_set(settings.username, password)
    if settings.use_tls:
        ca = str(settings.tls_ca_file) if settings.tls_ca_file else None
        try:
            client.tls_set(ca_certs=ca)
        except ssl.SSLError as exc:  # a file that holds no certificate
            raise MqttConnectionError(
                f"cannot use the CA file {ca} ({exc.reason or exc}): set "
                f"{MqttSettings.env_name('tls_ca_file')} to the PEM file of the CA that signed "
                "the broker's certificate"
            ) from None
    client.connect_timeout = settings.connect_timeout_s
    client.reconnect_delay_set(1, 5)
    return client


def refused_message(reason: str, value: int, settings: MqttSettings) -> str:
    """The line for a broker that answered CONNECT with a failure reason code.

    Args:
        reason: The reason's name as paho gives it (``Bad user name or password`` ...).
        value: The MQTT 5 reason code.
        settings: The settings used (for the host and the variables to check).

    """
    user, pw = MqttSettings.env_name("username"), MqttSettings.env_name("password")
    if value in (_BAD_CREDENTIALS, _NOT_AUTHORIZED):
        return (
            f"the MQTT broker at {settings.where} refused the credentials ({reason}): "
            f"check {user} and {pw}"
        )
    return f"the MQTT broker at {settings.where} refused the connection ({reason}, code {value})"


def unreachable_message(exc: BaseException, settings: MqttSettings) -> str:
    """The line for a connection that failed before the broker answered (network, TLS)."""
    host, port = MqttSettings.env_name("host"), MqttSettings.env_name("port")
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"the TLS handshake with the MQTT broker at {settings.where} failed: its "
            f"certificate is not trusted ({exc.verify_message}); set "
            f"{MqttSettings.env_name('tls_ca_file')} to the PEM file of the CA that signed it"
        )
    if isinstance(exc, ssl.SSLError):
        return (
            f"the TLS handshake with the MQTT broker at {settings.where} failed "
            f"({exc.reason or exc}); check {port} (the broker's TLS listener) and "
            f"{MqttSettings.env_name('tls')}"
        )
    reason = (
        "timed out"
        if isinstance(exc, TimeoutError | socket.timeout)
        else (getattr(exc, "strerror", None) or str(exc) or type(exc).__name__)
    )
    return (
        f"could not reach the MQTT broker at {settings.where} ({reason}); check {host} and "
        f"{port} and that the broker is running"
    )


def connect(
    client: Client,
    settings: MqttSettings,
    *,
    clean_start: CleanStartOption,
    properties: Any = None,
    timeout_s: float | None = None,
) -> bool:
    """Connect ``client``, start its network thread and wait for the broker's answer.

    The client's ``on_connect`` is chained: one set before is still called. After a
    successful connect paho reconnects by itself when the connection drops.

    Args:
        client: From ``make_client``.
        settings: Broker and credentials.
        clean_start: MQTT 5 Clean Start (False resumes the client id's session).
        properties: CONNECT properties (``paho.mqtt.properties.Properties``).
        timeout_s: Seconds to wait for CONNACK (default: ``settings.connect_timeout_s``).

    Returns:
        Whether the broker had a session for the client id (``session present``).

    Raises:
        MqttConnectionError: Unreachable, TLS failed, refused, or no answer in time.

    """
    timeout = settings.connect_timeout_s if timeout_s is None else timeout_s
    answered = threading.Event()
    result: dict[str, Any] = {}
    # paho types the callback as either callback API's; make_client's clients use
    # VERSION2, whose callback takes five arguments.
    chained = cast("CallbackOnConnect_v2 | None", client.on_connect)

    def on_connect(c: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if not answered.is_set():
            result["reason"] = reason
            result["session_present"] = bool(getattr(flags, "session_present", False))
            answered.set()
        if chained is not None:
            chained(c, userdata, flags, reason, props)

    client.on_connect = on_connect
    try:
        client.connect(
            settings.host,
            settings.port,
            keepalive=settings.keepalive_s,
            clean_start=clean_start,
            properties=properties,
        )
    except (OSError, ssl.SSLError) as exc:
        client.on_connect = chained
        raise MqttConnectionError(unreachable_message(exc, settings)) from None
    client.loop_start()
    if not answered.wait(timeout):
        client.loop_stop()
        client.on_connect = chained
        raise MqttConnectionError(
            f"the MQTT broker at {settings.where} did not answer within {timeout:.0f} s; "
            f"check {MqttSettings.env_name('host')} and {MqttSettings.env_name('port')} "
            "(is it an MQTT listener?)"
        )
    client.on_connect = chained
    reason = result["reason"]
    if reason.is_failure:
        client.loop_stop()
        client.disconnect()
        raise MqttConnectionError(refused_message(str(reason), int(reason.value), settings))
    return bool(result["session_present"])
