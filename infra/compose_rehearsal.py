"""``python -m infra.compose_rehearsal``: compose's ``eventhubs`` profile on the stack's own Kafka.

Event Hubs' Kafka endpoint is ``SASL_SSL``: TLS, then ``PLAIN`` with user
``$ConnectionString`` and the connection string as the password. This writes what the
compose stack's ``kafka`` service needs to speak the same way on a listener
``kafka:9094``, and an env file for the ``eh-*`` services, into one folder (default
``<state dir>/compose-rehearsal``; throwaway secrets, never in the repository):

* ``kafka/``: the broker's PKCS#12 keystore (a certificate for ``kafka`` signed by a CA
  made here), its password file, and the JAAS file with the connection string; mounted
  as the official image's ``/etc/kafka/secrets``;
* ``ca.pem``: the CA the clients trust (Event Hubs' own certificate has a public CA);
* ``rehearsal.env``: ``IOT_KAFKA_AUTH=connection_string`` and the connection string,
  whose ``Endpoint`` is ``sb://kafka:9094/``, for ``docker compose --env-file``.

``infra/docker/eventhubs-rehearsal.yml`` adds the listener and mounts these files.
"""

from __future__ import annotations

import argparse
import base64
import secrets
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from common.kafka import EVENTHUBS_USERNAME
from common.kafka_settings import KafkaSettings
from infra.paths import PROJECT_ROOT, state_dir
from infra.tls import ensure_tls

OVERRIDE = PROJECT_ROOT / "infra" / "docker" / "eventhubs-rehearsal.yml"
BROKER_HOST, SASL_SSL_PORT = "kafka", 9094
# The services' default topics, which kafka-init creates by default too.
TOPIC = str(KafkaSettings.model_fields["topic"].default)
ALERTS_TOPIC = str(KafkaSettings.model_fields["alerts_topic"].default)
SERVICES = ("eh-producer", "eh-processor", "eh-dashboard")
CONNECTION_STRING_VAR = "IOT_KAFKA_CONNECTION_STRING"


def default_dir() -> Path:
    """``<state dir>/compose-rehearsal``."""
    return state_dir() / "compose-rehearsal"


def connection_string(key: str) -> str:
    """An Event-Hubs-shaped connection string for the stack's ``SASL_SSL`` listener."""
    return (
        f"Endpoint=sb://{BROKER_HOST}:{SASL_SSL_PORT}/;"
        f"SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={key}"
    )


def write(folder: Path) -> Path:
    """Write the rehearsal's files into ``folder`` (a new key each time); return the env file.

    The files are readable by every user: the broker runs as the image's own user, and
    they hold only this rehearsal's throwaway key.
    """
    tls = ensure_tls(folder / "tls", dns_names=(BROKER_HOST, "localhost"))
    kafka = folder / "kafka"
    kafka.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(24)
    key = serialization.load_pem_private_key(tls.server_key.read_bytes(), password=None)
    chain = x509.load_pem_x509_certificates(tls.server_cert.read_bytes())
    keystore = pkcs12.serialize_key_and_certificates(
        b"kafka", key, chain[0], chain[1:],  # type: ignore[arg-type]  # the server key ensure_tls writes is an RSA key, which PKCS#12 takes; load_pem_private_key types any key
        serialization.BestAvailableEncryption(password.encode()),
    )  # fmt: skip
    value = connection_string(base64.b64encode(secrets.token_bytes(32)).decode("ascii"))
    jaas = (
        "KafkaServer {\n  org.apache.kafka.common.security.plain.PlainLoginModule required\n"
        f'  user_{EVENTHUBS_USERNAME}="{value}";\n}};\n'
    )
    files = {
        kafka / "server.p12": keystore,
        kafka / "keystore-password": password.encode(),
        kafka / "kafka_server_jaas.conf": jaas.encode(),
        folder / "ca.pem": tls.ca_cert.read_bytes(),
        folder / "rehearsal.env": (
            "IOT_KAFKA_AUTH=connection_string\n"
            f"{CONNECTION_STRING_VAR}='{value}'\n"
            f"IOT_KAFKA_TOPIC={TOPIC}\nIOT_KAFKA_ALERTS_TOPIC={ALERTS_TOPIC}\n"
            f"IOT_REHEARSAL_DIR={folder.resolve()}\n"
        ).encode(),
    }
    for path, data in files.items():
        path.write_bytes(data)
        path.chmod(0o644)
    kafka.chmod(0o755)
    return folder / "rehearsal.env"


def main(argv: list[str] | None = None) -> int:
    """Write the files and print the compose command that uses them."""
    parser = argparse.ArgumentParser(prog="python -m infra.compose_rehearsal", description=__doc__)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where (default: <state dir>/compose-rehearsal)"
    )
    args = parser.parse_args(argv)
    env_file = write(args.dir or default_dir())
    print(f"wrote {env_file.parent}; run:")
    print(
        f"  docker compose --env-file {env_file} -f docker-compose.yml "
        f"-f {OVERRIDE.relative_to(PROJECT_ROOT)} --profile eventhubs up -d --build "
        + " ".join(SERVICES)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
