"""What the schema registry holds: each subject's versions, for the Pipeline health page.

Read with confluent-kafka's ``SchemaRegistryClient`` (the producer's and the processor's
client), at most once a minute; a registry that does not answer is one line on the page.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from common.registry_settings import RegistrySettings

COLUMNS = {"subject": pl.String, "version": pl.Int64, "schema_id": pl.Int64,
           "fields": pl.Int64, "doc": pl.String}  # fmt: skip


class RegistryUnreachableError(RuntimeError):
    """The registry did not answer, or refused the credentials (one line)."""


def _summary(text: str) -> tuple[int | None, str]:
    """A schema's field count (records only) and its doc."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return None, ""
    if not isinstance(parsed, dict):
        return None, ""
    fields = parsed.get("fields")
    return (len(fields) if isinstance(fields, list) else None), str(parsed.get("doc", ""))


def subject_versions(registry: RegistrySettings, client: Any = None) -> pl.DataFrame:
    """One row per version of every subject: its schema id, field count and doc.

    Args:
        registry: Where the registry is.
        client: A ``SchemaRegistryClient`` (default: one for ``registry``).

    Raises:
        RegistryUnreachableError: It did not answer (one line, no secret).
    """
    if client is None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        client = SchemaRegistryClient(registry.client_config())
    rows: list[dict[str, Any]] = []
    try:
        for subject in sorted(client.get_subjects()):
            for version in client.get_versions(subject):
                found = client.get_version(subject, version)
                fields, doc = _summary(found.schema.schema_str)
                rows.append(
                    {"subject": subject, "version": version, "schema_id": found.schema_id,
                     "fields": fields, "doc": doc}
                )  # fmt: skip
    except Exception as exc:  # noqa: BLE001 (the HTTP client's errors, or the registry's refusal)
        raise RegistryUnreachableError(
            f"the schema registry at {registry.url} did not answer ({type(exc).__name__})"
        ) from None
    return pl.DataFrame(rows, schema=COLUMNS)
