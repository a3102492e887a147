"""How events go on the wire: JSON text, or Avro framed for a schema registry.

``--format json`` (the default) sends each event as one UTF-8 JSON object. ``--format
avro`` sends it in Confluent's framing (a zero byte, the writer schema's 4-byte id, the
Avro body), encoded by confluent-kafka's ``AvroSerializer`` with the Avro schema of the
event's own ``schema_version`` (``common.avro_schema``), registered under the subject
``<topic>-value`` in version order, so that the registry checks each against the one
before it.

Each format also says how its malformed payloads are made (``producer.faults`` picks
which readings, at the rates the settings give): under Avro, ``broken_json`` sends a
record that is not Avro (JSON cut short), ``wrong_type`` an Avro body cut short,
``missing_field`` a header with a schema id the registry does not hold; an unknown
device and an oversized payload are as under JSON.
"""

from __future__ import annotations

import io
import random
import struct
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Literal, Protocol

import orjson

from common import reasons
from common.contract import (
    FIELD_BY_NAME,
    KEY_FIELDS,
    METRIC_NAMES,
    REQUIRED,
    VERSION_BY_NUMBER,
    format_time,
)
from common.registry_settings import RegistrySettings, subject_of

FORMATS: Final = ("json", "avro")
Format = Literal["json", "avro"]
MAGIC_BYTE: Final = 0
# Payload fields a wrong_type fault may send as text ("n/a").
WRONG_TYPE_FIELDS: Final = ("seq", "schema_version", "event_time", "battery_pct", *METRIC_NAMES)
# An id no registry hands out: Confluent's and Apicurio's ids count up from 1.
UNREGISTERED_ID: Final = 2**31 - 1


class WireFormatError(RuntimeError):
    """The format cannot be used: the registry refused or is unreachable."""


class WireFormat(Protocol):
    """Encodes events, and makes the malformed payloads of this format."""

    name: Format

    def encode(self, events: Iterable[dict[str, Any]]) -> list[bytes]:
        """One payload per event (a dict under the JSON keys of its version), in order."""
        ...

    def decode(self, payload: bytes) -> dict[str, Any]:
        """The event held by a payload that ``encode`` made, as its JSON dict."""
        ...

    def malformed(
        self, kind: str, event: dict[str, Any], rng: random.Random, padding: int
    ) -> tuple[bytes, dict[str, Any]]:
        """A malformed payload of ``kind`` made from ``event``, and its fault record's fields.

        ``unknown_device`` is the caller's: ``event`` already holds the unknown id.
        """
        ...


class JsonFormat:
    """One UTF-8 JSON object per event (``orjson``)."""

    name: Format = "json"

    def encode(self, events: Iterable[dict[str, Any]]) -> list[bytes]:
        """One JSON payload per event."""
        return list(map(orjson.dumps, events))

    def decode(self, payload: bytes) -> dict[str, Any]:
        """The JSON object of a payload."""
        event: dict[str, Any] = orjson.loads(payload)
        return event

    def malformed(
        self, kind: str, event: dict[str, Any], rng: random.Random, padding: int
    ) -> tuple[bytes, dict[str, Any]]:
        """Cut-short JSON, a value of the wrong type, a missing field, or padding."""
        bad = dict(event)
        if kind == "broken_json":
            full = orjson.dumps(event)
            return full[: rng.randint(len(full) // 4, len(full) - 2)], {
                "expected_reason": reasons.UNPARSABLE
            }
        if kind == "wrong_type":
            field = rng.choice([f for f in WRONG_TYPE_FIELDS if f in event])
            bad[field] = "n/a"
            return orjson.dumps(bad), {"field": field, "expected_reason": reasons.wrong_type(field)}
        if kind == "missing_field":
            field = rng.choice(REQUIRED)
            del bad[field]
            return orjson.dumps(bad), {
                "field": field,
                "expected_reason": reasons.missing_field(field),
            }
        if kind == "unknown_device":
            return orjson.dumps(bad), {"expected_reason": reasons.UNKNOWN_DEVICE}
        bad["padding"] = "x" * padding
        return orjson.dumps(bad), {"expected_reason": reasons.REJECTED_TOO_LARGE}


def _to_avro(event: dict[str, Any], _ctx: object = None) -> dict[str, Any]:
    """An event's JSON dict with its times as aware datetimes (Avro's timestamp-millis)."""
    out = dict(event)
    for key, value in event.items():
        name = KEY_FIELDS.get(key)
        if name is not None and FIELD_BY_NAME[name].type == "timestamp" and value is not None:
            out[key] = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return out


def _from_avro(record: dict[str, Any]) -> dict[str, Any]:
    """A decoded Avro record as the JSON dict it was made from (nulls left out)."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if value is None:
            continue
        out[key] = format_time(value.astimezone(UTC)) if isinstance(value, datetime) else value
    return out


class AvroFormat:
    """Confluent-framed Avro, one registered schema per payload version."""

    name: Format = "avro"

    def __init__(self, registry: RegistrySettings, topic: str, versions: Sequence[int]) -> None:
        """Register (or, without auto-registration, look up) each version's schema, in order.

        Args:
            registry: Where the registry is, and whether the producer may register.
            topic: The topic: the subject is ``<topic>-value``.
            versions: The payload versions this producer sends.

        Raises:
            WireFormatError: The registry is unreachable, refused a schema (naming the
                subject and its compatibility rule), or does not hold one that must exist.
        """
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.serialization import MessageField, SerializationContext

        from common.avro_schema import avro_schema_text

        self.subject = subject_of(topic)
        self._ctx = SerializationContext(topic, MessageField.VALUE)
        client = SchemaRegistryClient(registry.client_config())
        self._serializers: dict[int, Any] = {}
        self.schema_ids: dict[int, int] = {}
        for number in sorted(set(versions)):
            schema = Schema(avro_schema_text(VERSION_BY_NUMBER[number]), "AVRO")
            try:
                if registry.auto_register:
                    self.schema_ids[number] = client.register_schema(self.subject, schema)
                else:
                    found = client.lookup_schema(self.subject, schema).schema_id
                    if found is None:
                        raise WireFormatError(
                            f"the schema registry gave no id for {self.subject} version {number}"
                        )
                    self.schema_ids[number] = found
            except SchemaRegistryError as exc:
                raise WireFormatError(_refusal(client, self.subject, number, exc)) from None
            except Exception as exc:  # the HTTP client's own errors: unreachable, TLS, timeout
                raise WireFormatError(
                    f"the schema registry at {registry.url} did not answer "
                    f"({type(exc).__name__}): check {registry.env_name('url')}"
                ) from None
            self._serializers[number] = AvroSerializer(
                client, schema.schema_str, _to_avro, {"auto.register.schemas": False}
            )
        self._parsed = {n: s._parsed_schema for n, s in self._serializers.items()}

    def encode(self, events: Iterable[dict[str, Any]]) -> list[bytes]:
        """One framed Avro payload per event, by the schema of its ``schema_version``."""
        ctx, by_version = self._ctx, self._serializers
        return [by_version[e["schema_version"]](e, ctx) for e in events]

    def decode(self, payload: bytes) -> dict[str, Any]:
        """The event of a framed payload this producer encoded."""
        import fastavro

        schema_id = struct.unpack(">I", payload[1:5])[0]
        number = next(n for n, i in self.schema_ids.items() if i == schema_id)
        record = fastavro.schemaless_reader(io.BytesIO(payload[5:]), self._parsed[number], None)
        return _from_avro(record)  # type: ignore[arg-type]  # fastavro types a record as any Avro datum; these schemas' top level is a record, a dict

    def malformed(
        self, kind: str, event: dict[str, Any], rng: random.Random, padding: int
    ) -> tuple[bytes, dict[str, Any]]:
        """Not Avro, a truncated body, an unregistered schema id, or padding."""
        full = self.encode([event])[0]
        if kind == "broken_json":  # not Avro: no magic byte, and not JSON either
            text = orjson.dumps(event)
            return text[: rng.randint(len(text) // 4, len(text) - 2)], {
                "expected_reason": reasons.UNPARSABLE
            }
        if kind == "wrong_type":  # the body cut short: its schema cannot read it
            return full[: rng.randint(6, len(full) - 1)], {
                "expected_reason": reasons.UNDECODABLE_AVRO
            }
        if kind == "missing_field":  # a schema id the registry does not hold
            return bytes([MAGIC_BYTE]) + struct.pack(">I", UNREGISTERED_ID) + full[5:], {
                "expected_reason": reasons.UNKNOWN_SCHEMA_ID
            }
        if kind == "unknown_device":
            return full, {"expected_reason": reasons.UNKNOWN_DEVICE}
        return full + b"x" * padding, {"expected_reason": reasons.REJECTED_TOO_LARGE}


def _refusal(client: Any, subject: str, version: int, exc: Exception) -> str:
    """One line for a registry's refusal: the subject, the rule, and what to do."""
    code = getattr(exc, "http_status_code", None)
    if code == 409:
        rule = _rule(client, subject)
        return (
            f"the schema registry refused schema_version {version} under {subject}: not "
            f"{rule}-compatible with the versions registered before it; register it under "
            "another subject (another topic) or change the rule"
        )
    if code == 404:
        return (
            f"schema_version {version} is not registered under {subject}, and "
            "auto-registration is off: register it first, or set "
            f"{RegistrySettings.env_name('auto_register')}=true"
        )
    message = getattr(exc, "error_message", None) or str(exc)
    return f"the schema registry refused schema_version {version} under {subject}: {message}"


def _rule(client: Any, subject: str) -> str:
    """The compatibility rule a subject is checked by: its own, else the registry's."""
    for scope in (subject, None):
        try:
            rule = client.get_compatibility(scope) if scope else client.get_compatibility()
        except Exception:  # noqa: BLE001,S112 (no rule of the subject's own: ask the next scope)
            continue
        if rule and rule != "NONE":  # Apicurio answers NONE for a subject without its own
            return str(rule)
    return "its compatibility rule"


def wire_format(
    name: Format, registry: RegistrySettings, topic: str, versions: Sequence[int]
) -> WireFormat:
    """The format named by the settings, ready to encode.

    Raises:
        WireFormatError: Avro, and the registry is missing, unreachable or refuses.
    """
    if name == "json":
        return JsonFormat()
    if not registry.url:
        raise WireFormatError(
            f"--format avro needs a schema registry: set {registry.env_name('url')} "
            "(locally: python -m infra.schema_registry start)"
        )
    return AvroFormat(registry, topic, versions)
