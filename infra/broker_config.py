"""What a local broker runs with: its files, its ports, its ``server.properties``, its secret.

The SASL_SSL listener takes ``PLAIN`` with the Azure Event Hubs convention (user
``$ConnectionString``, password a connection string kept in a 0600 file) and
``OAUTHBEARER`` with Kafka's unsecured validator; ``infra.broker`` starts and stops it.
"""

from __future__ import annotations

import base64
import os
import re
import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path

from common.kafka import EVENTHUBS_USERNAME
from infra.tls import TlsFiles, ensure_tls

NODE_ID = 1
BIND_HOST = "127.0.0.1"
SASL_SSL_HOST = "localhost"
SAS_KEY_NAME = "RootManageSharedAccessKey"
_CONNECTION_STRING_RE = re.compile(
    r"^Endpoint=sb://[^/;]+/;SharedAccessKeyName=[^;]+;SharedAccessKey=(?P<key>[A-Za-z0-9+/=]{44})$"
)


@dataclass(frozen=True)
class Ports:
    """The broker's TCP ports (all on the loopback interface)."""

    plaintext: int
    sasl_ssl: int
    controller: int


class Layout:
    """Where each file of a broker lives inside its data dir."""

    def __init__(self, root: Path) -> None:
        self.root = root.expanduser().resolve()
        self.state_file = self.root / "broker.json"
        self.lock_file = self.root / ".lock"
        self.properties = self.root / "server.properties"
        self.secret = self.root / "connection-string"
        self.tls_dir = self.root / "tls"
        self.kraft_dir = self.root / "kraft"
        self.logs_dir = self.root / "logs"
        self.server_log = self.logs_dir / "server.log"
        self.stdout_log = self.logs_dir / "broker.out"

    def formatted(self) -> bool:
        """Whether the KRaft storage has been formatted."""
        return (self.kraft_dir / "meta.properties").is_file()


def write_config(layout: Layout, ports: Ports) -> None:
    """Write TLS files, the connection string and ``server.properties`` for ``ports``."""
    tls = ensure_tls(layout.tls_dir)
    connection_string = _ensure_connection_string(layout.secret, ports.sasl_ssl)
    write_private(layout.properties, _server_properties(layout, ports, tls, connection_string))
    layout.logs_dir.mkdir(exist_ok=True)


def _ensure_connection_string(path: Path, sasl_ssl_port: int) -> str:
    """Return the Event Hubs-style connection string, creating its key on first use.

    The key is generated once per data dir; only the endpoint changes when the
    SASL_SSL port does.
    """
    key = None
    if path.exists():
        match = _CONNECTION_STRING_RE.match(path.read_text().strip())
        key = match.group("key") if match else None
    if key is None:
        key = base64.b64encode(secrets.token_bytes(32)).decode("ascii")
    value = (
        f"Endpoint=sb://{SASL_SSL_HOST}:{sasl_ssl_port}/;"
        f"SharedAccessKeyName={SAS_KEY_NAME};SharedAccessKey={key}"
    )
    if not path.exists() or path.read_text().strip() != value:
        write_private(path, value + "\n")
    path.chmod(0o600)
    return value


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64, as Kafka's ``random-uuid`` makes."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cid.startswith("-"):
            return cid


def _server_properties(layout: Layout, ports: Ports, tls: TlsFiles, connection_string: str) -> str:
    plain_jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'user_{EVENTHUBS_USERNAME}="{connection_string}";'
    )
    oauth_jaas = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredLoginStringClaim_sub="broker";'
    )
    listener = "listener.name.sasl_ssl."
    props = {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.voters": f"{NODE_ID}@{BIND_HOST}:{ports.controller}",
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://{BIND_HOST}:{ports.plaintext},"
        f"SASL_SSL://{BIND_HOST}:{ports.sasl_ssl},CONTROLLER://{BIND_HOST}:{ports.controller}",
        "advertised.listeners": f"PLAINTEXT://{BIND_HOST}:{ports.plaintext},"
        f"SASL_SSL://{SASL_SSL_HOST}:{ports.sasl_ssl}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,"
        "CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(layout.kraft_dir),
        f"{listener}sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
        f"{listener}plain.sasl.jaas.config": plain_jaas,
        f"{listener}oauthbearer.sasl.jaas.config": oauth_jaas,
        f"{listener}oauthbearer.sasl.server.callback.handler.class": "org.apache.kafka.common."
        "security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler",
        f"{listener}ssl.keystore.type": "PEM",
        f"{listener}ssl.keystore.location": str(tls.keystore),
        f"{listener}ssl.client.auth": "none",
        "auto.create.topics.enable": "false",
        "num.partitions": "3",
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "3",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    header = "# Written by infra/broker.py on every start; edits are overwritten. Holds a secret.\n"
    return header + "".join(f"{k}={_escape_property(v)}\n" for k, v in props.items())


def _escape_property(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically with mode 0600."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    tmp.replace(path)
