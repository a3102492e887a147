"""The event contract: the one place that says what a telemetry event is.

The contract itself is data, in ``common/contract.toml`` (or the file that the
``IOT_CONTRACT`` environment variable names, e.g. a test's contract with one more
field); this module reads it once, at import, and gives it typed. The producer
builds events from it, the processor parses and types them with it (silver's and
gold's columns follow), and the dashboard takes its labels and units from it.

Wire format: one UTF-8 JSON object per Kafka message (or per line in a JSON-lines
file), keyed by ``device_id``. Times are ISO-8601 UTC with a ``Z`` suffix and
millisecond precision, e.g. ``2026-11-21T14:05:09.123Z``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from common.paths import package_file

CONTRACT_ENV: Final = "IOT_CONTRACT"
DEFAULT_CONTRACT: Final = package_file("common", "contract.toml")
TYPES: Final = ("string", "long", "double", "timestamp")


@dataclass(frozen=True)
class Field:
    """One field of the event (or of the device dimension).

    Attributes:
        name: JSON key.
        type: One of ``string``, ``long``, ``double``, ``timestamp`` (an ISO-8601 UTC string
            on the wire).
        required: A record without it is quarantined.
        unit: Physical unit, or ``""`` where there is none.
        min: Smallest physically possible value (numbers only).
        max: Largest physically possible value (numbers only).
        doc: What the field means.
        label: How the dashboard names it (default: the name).
        example: A typical value; the simulator sends it for a field it has no model of.

    """

    name: str
    type: str
    required: bool = False
    unit: str = ""
    min: float | None = None
    max: float | None = None
    doc: str = ""
    label: str = ""
    example: str | float | int | None = None

    @property
    def title(self) -> str:
        """``Temperature (°C)``: the label, and the unit where there is one."""
        name = self.label or self.name
        return f"{name} ({self.unit})" if self.unit else name


@dataclass(frozen=True)
class Version:
    """One schema version of the payload: the fields it sends, and under which JSON keys.

    Versions are cumulative: each is the one before it plus the fields it adds, with
    the fields it renames sent under their new keys from then on.

    Attributes:
        number: The payload's ``schema_version``.
        doc: What changed in it (a firmware release, say).
        keys: Contract field name -> the JSON key this version sends it under, for
            every field the version declares, in the contract's order.

    """

    number: int
    doc: str
    keys: Mapping[str, str]

    def declares(self, name: str) -> bool:
        """Whether this version sends the contract field ``name``."""
        return name in self.keys


def _fields(path: Path, section: str, rows: Any) -> tuple[Field, ...]:
    """Typed fields of one section of the contract file; a bad entry stops the import."""
    known = {f.name for f in fields(Field)}
    if not isinstance(rows, list) or not rows:
        raise SystemExit(f"error: contract {path}: [[{section}]] must list at least one field")
    out = []
    for i, row in enumerate(rows, 1):
        where = f"contract {path}: [[{section}]] #{i}"
        if not isinstance(row.get("name"), str) or not row["name"]:
            raise SystemExit(f"error: {where} has no name")
        if unknown := sorted(set(row) - known):
            raise SystemExit(f"error: {where} ({row['name']}): unknown keys {unknown}")
        if row.get("type") not in TYPES:
            raise SystemExit(
                f"error: {where} ({row['name']}): type must be one of {', '.join(TYPES)}"
            )
        out.append(Field(**row))
    return tuple(out)


def _load(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SystemExit(
            f"error: cannot read the contract {path}: {exc} (see {CONTRACT_ENV})"
        ) from None
    return data


def _versions(path: Path, rows: Any, names: Sequence[str]) -> tuple[Version, ...]:
    """The typed ``[[versions]]`` of the contract; a bad entry stops the import.

    Args:
        path: The contract file (for messages).
        rows: The ``versions`` array (absent: one version, 1, with every field).
        names: The event's field names, in the contract's order.
    """
    where = f"contract {path}: [[versions]]"
    rows = [{"version": 1}] if rows is None else rows
    if not isinstance(rows, list) or not rows:
        raise SystemExit(f"error: {where} must list at least one version")
    # Identity, order and version are how every version is read, deduplicated and checked.
    fixed = ("event_id", "device_id", "seq", "event_time", "schema_version")
    added_later = {n for row in rows[1:] for n in row.get("added", ())}
    keys = {n: n for n in names if n not in added_later}
    owner: dict[str, str] = {n: n for n in names}  # JSON key -> the one field it names
    out: list[Version] = []
    for i, row in enumerate(rows, 1):
        number = row.get("version")
        if unknown := sorted(set(row) - {"version", "doc", "added", "renamed"}):
            raise SystemExit(f"error: {where} #{i}: unknown keys {unknown}")
        if not isinstance(number, int) or isinstance(number, bool) or number < 1:
            raise SystemExit(f"error: {where} #{i}: version must be a whole number from 1")
        if out and number <= out[-1].number:
            raise SystemExit(f"error: {where} #{i}: versions must go up ({number})")
        added, renamed = row.get("added", []), row.get("renamed", {})
        if i == 1 and (added or renamed):
            raise SystemExit(f"error: {where} #1: the first version can neither add nor rename")
        for name in added:
            if name not in owner or name in keys or name in fixed:
                raise SystemExit(
                    f"error: {where} #{i}: cannot add {name!r} (unknown or sent already)"
                )
            keys[name] = name
        for name, key in renamed.items():
            if name not in keys or name in fixed or not isinstance(key, str) or not key:
                raise SystemExit(f"error: {where} #{i}: cannot rename {name!r}")
            if owner.setdefault(key, name) != name:
                raise SystemExit(f"error: {where} #{i}: key {key!r} already names {owner[key]}")
            keys[name] = key
        ordered = {n: keys[n] for n in names if n in keys}
        out.append(Version(number, str(row.get("doc", "")), ordered))
    return tuple(out)


CONTRACT_FILE: Final = Path(os.environ.get(CONTRACT_ENV) or DEFAULT_CONTRACT)
_DATA: Final = _load(CONTRACT_FILE)

if _unknown := sorted(set(_DATA) - {"statuses", "versions", "envelope", "metrics", "device"}):
    raise SystemExit(f"error: contract {CONTRACT_FILE}: unknown keys {_unknown}")
STATUSES: Final[tuple[str, ...]] = tuple(_DATA.get("statuses", ()))
_ENVELOPE = _fields(CONTRACT_FILE, "envelope", _DATA.get("envelope"))
# Measurements. A device reports the subset its type models; the rest are absent.
METRICS: Final[tuple[Field, ...]] = _fields(CONTRACT_FILE, "metrics", _DATA.get("metrics"))
# The device dimension: one row per device, written by the processor from the fleet.
DEVICE_FIELDS: Final[tuple[Field, ...]] = _fields(CONTRACT_FILE, "device", _DATA.get("device"))
# The payload versions accepted, oldest first; producers send one of them.
VERSIONS: Final[tuple[Version, ...]] = _versions(
    CONTRACT_FILE, _DATA.get("versions"), [f.name for f in _ENVELOPE + METRICS]
)
VERSION_BY_NUMBER: Final[dict[int, Version]] = {v.number: v for v in VERSIONS}
SCHEMA_VERSION: Final[int] = VERSIONS[-1].number  # the newest
# Envelope: identity, ordering and time. ``schema_version`` spans the versions above.
ENVELOPE: Final[tuple[Field, ...]] = tuple(
    Field(**{**vars(f), "min": VERSIONS[0].number, "max": SCHEMA_VERSION})
    if f.name == "schema_version"
    else f
    for f in _ENVELOPE
)

FIELDS: Final[tuple[Field, ...]] = ENVELOPE + METRICS
# Every JSON key that some version sends -> the contract field it carries.
KEY_FIELDS: Final[dict[str, str]] = {k: n for v in VERSIONS for n, k in v.keys.items()}
FIELD_BY_NAME: Final[dict[str, Field]] = {f.name: f for f in FIELDS}
METRIC_NAMES: Final[tuple[str, ...]] = tuple(f.name for f in METRICS)
REQUIRED: Final[tuple[str, ...]] = tuple(f.name for f in FIELDS if f.required)

_SIMULATED = ("event_id", "device_id", "seq", "event_time", "schema_version", "status")
if missing := [n for n in _SIMULATED if n not in FIELD_BY_NAME]:
    raise SystemExit(f"error: contract {CONTRACT_FILE}: the envelope lacks {missing}")
if len(FIELD_BY_NAME) != len(FIELDS):
    raise SystemExit(f"error: contract {CONTRACT_FILE}: a field name is used twice")
if not STATUSES:
    raise SystemExit(f"error: contract {CONTRACT_FILE}: statuses is empty")


def format_time(ts: datetime) -> str:
    """Format a timezone-aware datetime as the contract's ISO-8601 UTC string.

    Args:
        ts: An aware datetime (any zone); naive datetimes are rejected.

    Returns:
        e.g. ``2026-11-21T14:05:09.123Z``.

    """
    if ts.tzinfo is None:
        raise ValueError("event times must be timezone-aware")
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def parse_time(text: str) -> datetime:
    """Parse a contract time string into an aware UTC datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
