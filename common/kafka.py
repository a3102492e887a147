"""Client configuration for local Kafka and Azure Event Hubs, built in one place.

``librdkafka_config`` is the one function that turns ``KafkaSettings`` into a
confluent-kafka (librdkafka) config; ``spark_kafka_options`` does the same for
Spark's JVM Kafka client. Going from a local broker to Event Hubs changes the
settings, never the code.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from common.cli import one_line
from common.kafka_settings import KafkaSettings

if TYPE_CHECKING:
    from confluent_kafka import KafkaError

# librdkafka's own log lines (e.g. "%4|...|GETPID|... Coordinator load in progress") go
# through Python's logging to the service's log file, never to the terminal. They
# arrive when the client is polled.
LIBRDKAFKA_LOG = logging.getLogger("iot_pulse.librdkafka")
# How long one metadata request of check_connection waits before the errors librdkafka
# reported meanwhile are looked at (they are delivered between requests).
CHECK_SLICE_S = 0.25
EVENTHUBS_USERNAME = "$ConnectionString"
# Microsoft's recommended client settings for the Event Hubs Kafka endpoint; Azure
# closes idle connections at 240 s, so metadata refreshes must come sooner.
EVENTHUBS_LIBRDKAFKA = {
    "socket.keepalive.enable": True,
    "metadata.max.age.ms": 180000,
    "request.timeout.ms": 60000,
}
EVENTHUBS_JAVA = {
    "kafka.request.timeout.ms": "60000",
    "kafka.session.timeout.ms": "30000",
    "kafka.metadata.max.age.ms": "180000",
    "kafka.connections.max.idle.ms": "180000",
    "kafka.max.request.size": "1000000",
}
_BOOTSTRAP_HINT = (
    f"{KafkaSettings.env_name('bootstrap_servers')} (when unset: the host and port of the "
    f"connection string's Endpoint)"
)
_SECRET_KEYS = ("sasl.password", "sasl.jaas.config", "kafka.sasl.jaas.config", "oauth_cb")
# The Entra ID login callback handler for Spark's JVM Kafka client, built by infra/jars.py
# from processor/jvm/eventhubs-oauth into the processor's jar folder.
ENTRA_LOGIN_HANDLER = "io.iotpulse.eventhubs.EntraLoginCallbackHandler"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"

Role = Literal["producer", "consumer", "admin"]


class TokenCredential(Protocol):
    """The part of an azure-identity credential the OAuth callback needs."""

    def get_token(self, *scopes: str) -> Any:
        """Return an object with ``token`` and ``expires_on`` (epoch seconds)."""
        ...


class KafkaConnectionError(RuntimeError):
    """The broker could not be reached, refused the credentials, or lacks the topic."""


def oauth_callback(credential: TokenCredential, scope: str) -> Callable[[str], tuple[str, float]]:
    """Build a confluent-kafka ``oauth_cb`` that fetches Entra ID tokens.

    Args:
        credential: e.g. ``azure.identity.DefaultAzureCredential()``.
        scope: ``https://<namespace>.servicebus.windows.net/.default``.

    Returns:
        A callable returning ``(token, expiry_epoch_seconds)``.
    """

    def _cb(_oauthbearer_config: str) -> tuple[str, float]:
        token = credential.get_token(scope)
        return token.token, float(token.expires_on)

    return _cb


def entra_scope(kafka: KafkaSettings) -> str:
    """The OAuth scope for the namespace, unless the settings give one."""
    return kafka.entra_scope or f"https://{kafka.namespace_host}/.default"


def librdkafka_config(
    kafka: KafkaSettings,
    role: Role,
    *,
    credential: TokenCredential | None = None,
    client_id: str = "iot-pulse",
) -> dict[str, Any]:
    """Build the librdkafka config for the given settings and client role.

    Args:
        kafka: Connection settings.
        role: ``producer`` adds ``acks=all`` and idempotence; ``consumer`` adds the
            Event Hubs session timeout; ``admin`` adds nothing.
        credential: Azure credential for ``auth=entra`` (default: ``DefaultAzureCredential``).
        client_id: Reported to the broker.

    Returns:
        A dict for ``confluent_kafka.Producer``/``Consumer``/``AdminClient``, whose
        log lines go to ``LIBRDKAFKA_LOG``. It holds secrets: log it only through
        ``redact``.
    """
    conf: dict[str, Any] = {
        "bootstrap.servers": kafka.bootstrap_servers,
        "client.id": client_id,
        "logger": LIBRDKAFKA_LOG,
    }
    if role == "producer":
        conf |= {"acks": "all", "enable.idempotence": True}
    if kafka.auth == "none":
        conf["security.protocol"] = "PLAINTEXT"
        return conf

    conf["security.protocol"] = "SASL_SSL"
    conf |= EVENTHUBS_LIBRDKAFKA
    if role == "consumer":
        conf["session.timeout.ms"] = 30000
    if kafka.ssl_ca_location is not None:
        conf["ssl.ca.location"] = str(kafka.ssl_ca_location)
    if kafka.auth == "connection_string":
        assert kafka.connection_string is not None  # enforced by KafkaSettings
        conf |= {
            "sasl.mechanism": "PLAIN",
            "sasl.username": EVENTHUBS_USERNAME,
            "sasl.password": kafka.connection_string.get_secret_value(),
        }
    else:
        if credential is None:
            from azure.identity import DefaultAzureCredential

            credential = DefaultAzureCredential()
        conf |= {
            "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": oauth_callback(credential, entra_scope(kafka)),
        }
    return conf


def _jaas_value(value: str) -> str:
    """Quote a JAAS option value (backslashes and double quotes escaped)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def spark_kafka_options(
    kafka: KafkaSettings, *, login_options: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Build the ``kafka.*`` options of Spark's Kafka source for the given settings.

    ``auth=connection_string`` logs in with ``PLAIN`` (user ``$ConnectionString``);
    ``auth=entra`` with ``OAUTHBEARER`` through ``ENTRA_LOGIN_HANDLER``, which gets
    tokens for ``entra_scope(kafka)`` from azure-identity's ``DefaultAzureCredential``
    and must be on Spark's classpath (``python -m infra.jars spark`` puts it there).

    Args:
        kafka: Connection settings.
        login_options: Extra options of the handler's JAAS entry for ``auth=entra``, e.g.
            ``{"tokenSource": "unsecured"}`` against a local broker's unsecured listener.

    Returns:
        The options. They hold secrets: log them only through ``redact``.
    """
    opts = {"kafka.bootstrap.servers": kafka.bootstrap_servers}
    if kafka.auth == "none":
        return opts
    opts |= EVENTHUBS_JAVA
    opts["kafka.security.protocol"] = "SASL_SSL"
    if kafka.auth == "entra":
        entries = {"scope": entra_scope(kafka), **(login_options or {})}
        jaas_options = "".join(f" {k}={_jaas_value(v)}" for k, v in entries.items())
        opts |= {
            "kafka.sasl.mechanism": "OAUTHBEARER",
            "kafka.sasl.jaas.config": f"{OAUTHBEARER_LOGIN_MODULE} required{jaas_options};",
            "kafka.sasl.login.callback.handler.class": ENTRA_LOGIN_HANDLER,
        }
    else:
        assert kafka.connection_string is not None  # enforced by KafkaSettings
        secret = _jaas_value(kafka.connection_string.get_secret_value())
        opts |= {
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": (
                f'{PLAIN_LOGIN_MODULE} required username="{EVENTHUBS_USERNAME}" password={secret};'
            ),
        }
    if kafka.ssl_ca_location is not None:
        opts["kafka.ssl.truststore.type"] = "PEM"
        opts["kafka.ssl.truststore.location"] = str(kafka.ssl_ca_location)
    return opts


def connection_detail(text: str) -> str:
    """A connection error's text without librdkafka's broker prefix and timing tail.

    ``127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused
    (after 0ms in state CONNECT)`` -> ``Connect to ipv4#127.0.0.1:9092 failed: Connection
    refused``.
    """
    text = text.split(" (after ", 1)[0]
    prefix, sep, rest = text.partition(": ")
    if sep and "/" in prefix and " " not in prefix:
        text = rest
    return one_line(text)


def _host_port(broker: str) -> tuple[str, int] | None:
    """``host:port`` (or ``[v6]:port``, ``PLAINTEXT://host:port``) split; None if not."""
    address = broker.strip().rsplit("://", 1)[-1]
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _addresses(broker: str) -> int:
    """How many addresses the broker's host resolves to (0: it does not resolve)."""
    found = _host_port(broker)
    if found is None:
        return 0
    try:
        infos = socket.getaddrinfo(found[0], found[1], type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return 0
    return len({info[4][:2] for info in infos})


class _Refusals:
    """Which addresses of each bootstrap broker refused a connection.

    librdkafka tries a host's addresses one after the other, so a broker counts as
    refusing once every address its name resolves to has refused (``localhost`` may
    refuse on ::1 and answer on 127.0.0.1).
    """

    def __init__(self, bootstrap: str) -> None:
        self.brokers = [b.strip() for b in bootstrap.split(",") if b.strip()]
        self._names = {self._name(b): b for b in self.brokers}
        self._needed: dict[str, int] = {}
        self._refused: dict[str, set[str]] = {}
        self.last = ""

    @staticmethod
    def _name(broker: str) -> str:
        return broker.rsplit("://", 1)[-1]

    def add(self, text: str) -> None:
        """Take in one ``_TRANSPORT`` error's text."""
        prefix, _, rest = text.partition("/")
        if prefix not in self._names or "Connection refused" not in rest:
            return
        address = rest.split("Connect to ", 1)[-1].split(" failed", 1)[0]
        self._refused.setdefault(prefix, set()).add(address)
        self.last = connection_detail(text)

    def all_refused(self) -> bool:
        """True when every bootstrap broker refused on every address it resolves to."""
        for name, broker in self._names.items():
            if name not in self._needed:
                self._needed[name] = _addresses(broker)
            needed = self._needed[name]
            if not needed or len(self._refused.get(name, ())) < needed:
                return False
        return bool(self._names)


def redact(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client config that is safe to log."""
    return {k: ("***" if k in _SECRET_KEYS else v) for k, v in conf.items()}


def check_connection(
    conf: Mapping[str, Any], topic: str | None = None, *, timeout_s: float = 20.0
) -> int:
    """Fail fast, with a clear message, when the broker cannot be used.

    librdkafka retries forever on bad credentials or an unreachable host; this asks
    for metadata with a deadline and turns what went wrong into one readable error.

    Args:
        conf: A ``librdkafka_config`` result (any role).
        topic: If given, the topic must exist.
        timeout_s: Deadline for the whole check.

    Returns:
        The topic's partition count (0 when no topic was asked for).

    Raises:
        KafkaConnectionError: Authentication failed, the broker is unreachable, or the
            topic does not exist. The message never includes secrets.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[KafkaError] = []
    admin_conf = {
        k: v
        for k, v in conf.items()
        if k not in ("acks", "enable.idempotence", "session.timeout.ms")
    }
    admin_conf["error_cb"] = errors.append
    admin_conf["log_level"] = 0  # librdkafka repeats each failure; the exception says it once
    try:
        admin = AdminClient(admin_conf)
    except KafkaException as exc:  # a client librdkafka cannot make: its CA file, mostly
        reason = exc.args[0].str() if exc.args else str(exc)
        ca = conf.get("ssl.ca.location")
        if ca is None or "ssl.ca.location" not in reason:
            raise KafkaConnectionError(f"the Kafka client cannot start: {reason}") from None
        raise KafkaConnectionError(
            f"cannot use the CA file {ca} ({reason}): set "
            f"{KafkaSettings.env_name('ssl_ca_location')} to the PEM file of the CA that signed "
            "the broker's certificate"
        ) from None
    where = f"{conf.get('bootstrap.servers')} ({conf.get('security.protocol', 'PLAINTEXT')})"
    refusals = _Refusals(str(conf.get("bootstrap.servers", "")))
    brokers = len(refusals.brokers)
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    seen = 0
    answered = False  # a broker sent metadata (the topic was not ready)
    while time.monotonic() < deadline:
        try:
            # Short requests: librdkafka's errors are delivered between them, so that a
            # refused connection fails the check at once, not at the deadline.
            md = admin.list_topics(
                topic=topic, timeout=min(CHECK_SLICE_S, max(0.1, deadline - time.monotonic()))
            )
        except KafkaException as exc:
            last = exc
            md = None
        admin.poll(0)  # serves error_cb
        auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        if auth:
            raise KafkaConnectionError(
                f"authentication failed at {where} with SASL mechanism "
                f"{conf.get('sasl.mechanism')}: check the connection string or credential "
                f"({KafkaSettings.env_name('connection_string')}) and that it grants access "
                "to this namespace"
            )
        tls_codes = (KafkaError._SSL, KafkaError._TRANSPORT)
        tls = tls_failure([e.str() for e in errors if e.code() in tls_codes], where)
        if tls is not None:
            raise KafkaConnectionError(tls)
        for e in errors[seen:]:
            if e.code() == KafkaError._TRANSPORT:
                refusals.add(e.str())
        seen = len(errors)
        if md is None and refusals.all_refused():
            raise KafkaConnectionError(
                f"could not reach the Kafka broker at {where}: the connection was refused "
                f"(0 of {brokers} broker{'s' if brokers != 1 else ''} up; {refusals.last}); "
                f"check {_BOOTSTRAP_HINT} and that the broker is running"
            )
        if md is None:
            continue
        answered = True
        if topic is None:
            return 0
        tmd = md.topics.get(topic)
        if tmd is not None and tmd.error is None:
            return len(tmd.partitions)
        if (
            tmd is not None
            and tmd.error is not None
            and tmd.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        ):
            raise KafkaConnectionError(
                f"topic '{topic}' does not exist at {where}: create it first "
                "(locally: python -m infra.broker topic NAME; on Event Hubs: create the event hub)"
            )
        last = KafkaException(tmd.error) if tmd is not None else last
    raise KafkaConnectionError(
        f"could not reach the Kafka broker at {where} within {timeout_s:.0f} s "
        f"({_no_answer(errors, last, brokers, answered)}); check {_BOOTSTRAP_HINT} and that the "
        "broker is running"
    )


def _no_answer(
    errors: Sequence[KafkaError], last: Exception | None, brokers: int, answered: bool
) -> str:
    """Why the check found no usable broker, in a few words.

    What is up, then librdkafka's last error. Its ``_ALL_BROKERS_DOWN`` text counts
    wrongly ("0/4 brokers are down" for two bootstrap brokers, none up): never quoted.
    A broker that answered without the topic ready is up: its error is the reason.
    """
    from confluent_kafka import KafkaError

    if answered and last is not None:
        first = last.args[0] if last.args else None
        return one_line(first.str() if isinstance(first, KafkaError) else str(last))
    up = f"0 of {brokers} broker{'s' if brokers != 1 else ''} up"
    told = [e for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
    if told:
        return f"{up}; {connection_detail(told[-1].str())}"
    if last is not None and "Failed to get metadata" not in str(last):
        return f"{up}; {one_line(str(last))}"
    return f"{up}; no answer"


def tls_failure(reasons: Sequence[str], where: str) -> str | None:
    """The message for a failed TLS handshake, from librdkafka's error texts, else None.

    Args:
        reasons: librdkafka's texts of the ``_SSL`` and ``_TRANSPORT`` errors seen.
        where: The broker and protocol, as the other messages of ``check_connection``.

    Returns:
        One line: an untrusted certificate says to set the CA setting; a TLS client
        at a listener that does not speak TLS says to check the port. None when no text
        is about a TLS handshake.
    """
    for text in reasons:
        if "SSL handshake failed" not in text and "certificate" not in text:
            continue
        detail = text.split("SSL handshake failed: ", 1)[-1].split(" (after ", 1)[0]
        detail = detail.split(", verify that", 1)[0]  # librdkafka's hint names its own setting
        ca = KafkaSettings.env_name("ssl_ca_location")
        if "certificate" in detail:
            return (
                f"the TLS handshake with {where} failed: the broker's certificate is not "
                f"signed by a CA this client trusts ({detail}); set {ca} to the PEM file of "
                "the CA that signed it (the local broker's is the 'CA file' that "
                "python -m infra.broker status prints)"
            )
        if "PLAINTEXT" in detail:
            return (
                f"the TLS handshake with {where} failed: nothing speaks TLS on that port "
                f"({detail}); check {_BOOTSTRAP_HINT}: it must be the broker's SASL_SSL "
                "listener (Event Hubs: port 9093)"
            )
        return f"the TLS handshake with {where} failed ({detail}); check {_BOOTSTRAP_HINT} and {ca}"
    return None
