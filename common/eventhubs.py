"""An Azure Event Hubs connection string: checked, and its public parts read.

The key is a secret: no message here quotes any of the string's text, only which part
is wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CONNECTION_STRING_SHAPE = (
    "Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<policy>;"
    "SharedAccessKey=<key>[;EntityPath=<event hub>]"
)
_WHERE_TO_COPY = (
    "copy it whole from the portal (the namespace's or event hub's 'Shared access policies') "
    "or from 'terraform output -raw kafka_connection_string'"
)
_PARTS = ("Endpoint", "SharedAccessKeyName", "SharedAccessKey", "EntityPath")
_REQUIRED_PARTS = _PARTS[:3]
_HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
EVENTHUBS_KAFKA_PORT = 9093


@dataclass(frozen=True)
class ConnectionString:
    """The public parts of an Event Hubs connection string (the key is not kept).

    Attributes:
        host: The namespace host, e.g. ``pulse-ns.servicebus.windows.net``.
        port: The Kafka port: the Endpoint's, else 9093.
        key_name: The shared access policy's name.
        entity_path: The event hub of a hub-level string, else None.
    """

    host: str
    port: int
    key_name: str
    entity_path: str | None

    @property
    def bootstrap_server(self) -> str:
        """``host:port`` of the Kafka endpoint."""
        return f"{self.host}:{self.port}"


def _refuse(what: str) -> ValueError:
    return ValueError(f"the Event Hubs connection string {what}; {_WHERE_TO_COPY}")


def _endpoint(value: str) -> tuple[str, int]:
    """Host and port of ``sb://HOST[:PORT][/]``; errors name the part, never its value."""
    scheme, sep, rest = value.strip().partition("://")
    if not sep or scheme.lower() != "sb":
        raise _refuse("has an Endpoint that does not start with sb://")
    authority, _, path = rest.partition("/")
    if path:
        raise _refuse("has an Endpoint with a path after the host (expected sb://HOST[:PORT]/)")
    host, colon, port_text = authority.partition(":")
    if not host:
        raise _refuse("has an Endpoint with no host (expected sb://HOST[:PORT]/)")
    if not _HOST_RE.match(host):
        raise _refuse("has an Endpoint whose host is not a host name")
    if not colon:
        return host, EVENTHUBS_KAFKA_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise _refuse("has an Endpoint whose port is not a number from 1 to 65535")
    return host, int(port_text)


def parse_connection_string(text: str) -> ConnectionString:
    """Check an Event Hubs connection string and return its public parts.

    The string is ``Endpoint=sb://HOST[:PORT]/;SharedAccessKeyName=...;SharedAccessKey=...``
    with an optional ``EntityPath=...``, parts in any order, names in any case.

    Args:
        text: The connection string (a secret).

    Returns:
        Host, port, policy name and event hub.

    Raises:
        ValueError: A part is unknown, repeated, missing or empty, or the Endpoint is not
            ``sb://HOST[:PORT]/``. The message names the part, never any of the text.

    """
    values: dict[str, str] = {}
    segments = [seg for seg in text.split(";") if seg.strip()]
    if not segments:
        raise _refuse(f"is empty (expected {CONNECTION_STRING_SHAPE})")
    canonical = {name.lower(): name for name in _PARTS}
    for position, segment in enumerate(segments, start=1):
        key, sep, value = segment.partition("=")
        name = canonical.get(key.strip().lower())
        if not sep:
            raise _refuse(f"has a part (number {position}) without '=' ({CONNECTION_STRING_SHAPE})")
        if name is None:
            if key.strip().lower() == "sharedaccesssignature":
                raise _refuse(
                    "holds a SharedAccessSignature (a SAS token), which the Kafka endpoint "
                    "does not accept: use a shared access policy's connection string"
                )
            raise _refuse(f"has a part (number {position}) that is not one of {', '.join(_PARTS)}")
        if name in values:
            raise _refuse(f"has {name} twice")
        if not value.strip():
            raise _refuse(f"has an empty {name}")
        values[name] = value
    missing = [name for name in _REQUIRED_PARTS if name not in values]
    if missing:
        raise _refuse(f"has no {' and no '.join(missing)} part ({CONNECTION_STRING_SHAPE})")
    host, port = _endpoint(values["Endpoint"])
    return ConnectionString(
        host=host,
        port=port,
        key_name=values["SharedAccessKeyName"].strip(),
        entity_path=values["EntityPath"].strip() if "EntityPath" in values else None,
    )
