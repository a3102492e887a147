"""Avro records in Confluent's framing, decoded by their writer schema into the contract's columns.

A framed record is a zero byte, the writer schema's 4-byte id (big-endian) and the Avro
body. JSON never starts with a zero byte, so one topic may carry both: ``is_framed``
tells them apart. A body is decoded by Spark's ``from_avro`` with the writer schema its
id names (``processor.writer_schemas`` fetches them from the registry); each writer
field lands in the contract field whose key it is (``common.contract.KEY_FIELDS``), so a
version 2 record's ``temp_c`` is silver's ``temperature_c``, as in JSON; writer fields
the contract does not know are kept, as JSON, in ``extra_fields``.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping
from functools import reduce
from typing import Final

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.types import DataType

from common import reasons
from common.contract import FIELDS, KEY_FIELDS

HEADER_BYTES: Final = 5
_AVRO_OPTIONS: Final = {"mode": "PERMISSIVE"}  # a body that does not decode: no failed batch


def is_framed(value: Column) -> Column:
    """Whether a payload starts with Confluent's magic byte (zero)."""
    return F.hex(F.substring(value, 1, 1)) == F.lit("00")


def schema_id(value: Column) -> Column:
    """The writer schema id of a framed payload (null when the header is cut short)."""
    return F.when(
        F.length(value) >= HEADER_BYTES,
        F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long"),
    )


def _body(value: Column) -> Column:
    return F.substring(value, HEADER_BYTES + 1, 2**31 - 1)


def writer_keys(schema: str) -> list[str] | None:
    """The field names of a record schema, in order; None for any other schema."""
    parsed = json.loads(schema)
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        return None
    return [str(f["name"]) for f in parsed.get("fields", [])]


def decoded_columns(
    value: Column, schemas: Mapping[int, str], types: Mapping[str, DataType], extra: str
) -> tuple[Column, Column]:
    """The contract's typed struct of a framed payload, and its unknown writer fields as JSON.

    Args:
        value: The framed payload.
        schemas: Writer schema id -> the schema's JSON text, for the ids known.
        types: Contract field -> its silver type; the struct's fields, in order, plus
            ``extra`` (always null here: Avro has no corrupt-record column).
        extra: The name of the struct's last field (the JSON parser's corrupt record).

    Returns:
        ``(typed, extras)``: ``typed`` is null where the id is not in ``schemas``, the
        schema is not a record, or the body does not decode; ``extras`` is null where
        the writer schema has no field the contract lacks.
    """
    sid = schema_id(value)
    typed: Column | None = None
    extras: Column | None = None
    for number, text in sorted(schemas.items()):
        keys = writer_keys(text)
        if not keys:
            continue
        decoded = from_avro(_body(value), text, _AVRO_OPTIONS)
        by_field = {KEY_FIELDS[k]: k for k in keys if k in KEY_FIELDS}
        struct = F.struct(
            *[
                (decoded[by_field[f.name]] if f.name in by_field else F.lit(None))
                .cast(types[f.name])
                .alias(f.name)
                for f in FIELDS
            ],
            F.lit(None).cast("string").alias(extra),
        )
        matches = sid == F.lit(number)
        # A body that does not decode comes out as a record of nulls (PERMISSIVE): a
        # record holds at least one value (every event has its required fields).
        branch = F.when(reduce(operator.or_, [decoded[k].isNotNull() for k in keys]), struct)
        typed = F.when(matches, branch) if typed is None else typed.when(matches, branch)
        if unknown := [k for k in keys if k not in KEY_FIELDS]:
            kept = F.to_json(F.struct(*[decoded[k].alias(k) for k in unknown]))
            extras = F.when(matches, kept) if extras is None else extras.when(matches, kept)
    if typed is None:
        struct_type = ", ".join(f"`{f.name}` {types[f.name].simpleString()}" for f in FIELDS)
        typed = F.lit(None).cast(f"struct<{struct_type}, `{extra}` string>")
    return typed, extras if extras is not None else F.lit(None).cast("string")


def avro_reason(value: Column, typed: Column, schemas: Mapping[int, str]) -> Column:
    """Why a framed payload cannot be read at all, else null (the field checks follow).

    ``unknown_schema_id``: its id is not one the registry holds (or none is set);
    ``undecodable_avro``: its header is cut short, its schema is not a record, or its
    body does not decode with its schema.
    """
    sid = schema_id(value)
    known = sid.isin(*schemas) if schemas else F.lit(False)
    return (
        F.when(sid.isNull(), F.lit(reasons.UNDECODABLE_AVRO))
        .when(~known, F.lit(reasons.UNKNOWN_SCHEMA_ID))
        .when(typed.isNull(), F.lit(reasons.UNDECODABLE_AVRO))
    )
