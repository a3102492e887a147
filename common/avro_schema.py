"""The contract's Avro schemas: one per payload version, derived from the contract.

``common/contract.toml`` is the one source: a version's Avro record has that version's
fields, in the contract's order, under the keys the version sends them by (a renamed
field carries its earlier keys as aliases, so that a newer reader still finds it in
an older record). Required fields are plain types; the rest are a union with null and
default to null, so that each version can read the one before it (BACKWARD, the
registry's rule). Timestamps are ``long`` milliseconds since the epoch, UTC
(``timestamp-millis``): the contract's ISO-8601 strings to the millisecond.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from common.contract import FIELD_BY_NAME, VERSIONS, Field, Version

NAMESPACE: Final = "io.iotpulse"
RECORD_NAME: Final = "TelemetryEvent"
_AVRO_TYPES: Final[dict[str, Any]] = {
    "string": "string",
    "long": "long",
    "double": "double",
    "timestamp": {"type": "long", "logicalType": "timestamp-millis"},
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _earlier_keys(name: str, version: Version) -> list[str]:
    """The keys that versions before ``version`` sent the field ``name`` under."""
    keys = {v.keys[name] for v in VERSIONS if v.number < version.number and v.declares(name)}
    return sorted(keys - {version.keys[name]})


def _field(f: Field, key: str, aliases: list[str]) -> dict[str, Any]:
    if not _NAME.fullmatch(key):
        raise ValueError(f"{key!r} is not an Avro field name ([A-Za-z_][A-Za-z0-9_]*)")
    avro_type = _AVRO_TYPES[f.type]
    out: dict[str, Any] = {"name": key}
    if f.required:
        out["type"] = avro_type
    else:
        out["type"] = ["null", avro_type]
        out["default"] = None
    if f.doc:
        out["doc"] = f.doc
    if aliases:
        out["aliases"] = aliases
    return out


def avro_schema(version: Version) -> dict[str, Any]:
    """The Avro record schema of one payload version.

    Args:
        version: One of ``common.contract.VERSIONS``.

    Returns:
        The schema as a JSON-ready dict (``avro_schema_text`` gives its text).

    Raises:
        ValueError: A key of the version is not a valid Avro name.
    """
    return {
        "type": "record",
        "name": RECORD_NAME,
        "namespace": NAMESPACE,
        "doc": f"IoT Pulse telemetry event, schema_version {version.number}. {version.doc}".strip(),
        "fields": [
            _field(FIELD_BY_NAME[name], key, _earlier_keys(name, version))
            for name, key in version.keys.items()
        ],
    }


def avro_schema_text(version: Version) -> str:
    """``avro_schema(version)`` as the compact JSON text a registry stores."""
    return json.dumps(avro_schema(version), separators=(",", ":"), ensure_ascii=False)
