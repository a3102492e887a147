"""Why a record is not in silver: the reason codes of ``silver/quarantine``, in one place.

Silver writes them (``processor.parsing``, ``processor.avro_decoding``,
``processor.silver``); the producer's fault records name the reason each malformed
payload should get (``expected_reason``), and ``loadtest verify`` compares the two. A
reason about one field carries the field's name after a colon (``missing_field:seq``).
"""

from __future__ import annotations

from typing import Final

# Not a record of the payload's format: JSON that does not parse, bytes neither JSON nor
# framed Avro, or a JSON record Spark flagged though every field check passed.
UNPARSABLE: Final = "unparsable"
# A valid reading of a device that the device dimension does not hold.
UNKNOWN_DEVICE: Final = "unknown_device"
# Framed Avro whose schema id is not registered under the topic's subject.
UNKNOWN_SCHEMA_ID: Final = "unknown_schema_id"
# Framed Avro that its writer schema cannot read (a header or body cut short).
UNDECODABLE_AVRO: Final = "undecodable_avro"
# Not a quarantine reason: the broker refused the record as too large, so it never
# reached bronze (a fault record's ``expected_reason`` for an oversized payload).
REJECTED_TOO_LARGE: Final = "rejected_too_large"


def missing_field(name: str) -> str:
    """A field that the record's contract version requires is absent."""
    return f"missing_field:{name}"


def wrong_type(name: str) -> str:
    """A field is present with a value of the wrong type."""
    return f"wrong_type:{name}"


def out_of_range(name: str) -> str:
    """A value outside its field's physical range (``schema_version``: not a version)."""
    return f"out_of_range:{name}"
