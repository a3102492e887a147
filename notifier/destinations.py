"""Where alerts go: each destination's name, format, URL (a secret) and filters.

Destinations come from the notifier's settings as a JSON list (or a TOML/JSON file of
the same list). Nothing here does I/O but reading that file; ``matches`` is the filter.
A destination's URL is a ``SecretStr`` and no message of this module quotes it.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from common.alerts import LiveAlert

Format = Literal["webhook", "teams", "slack"]
FORMATS: tuple[str, ...] = ("webhook", "teams", "slack")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class Destination(BaseModel):
    """One place alerts are delivered to.

    Attributes:
        name: Names it in logs, dead letters and the dashboard (never the URL).
        format: ``webhook`` (the alert record as JSON), ``teams`` or ``slack``.
        url: The incoming webhook's URL; a secret.
        sites: Only alerts of these sites (empty: every site).
        device_types: Only alerts of these device types (empty: every type).
        metrics: Only alerts on these metrics (empty: every metric).
        kinds: Only alerts of these kinds (empty: every kind).
        rate_limit_s: A device's alerts within this many seconds of a message to this
            destination are grouped into one message; None: the notifier's setting.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    format: Format
    url: SecretStr
    sites: tuple[str, ...] = ()
    device_types: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    rate_limit_s: float | None = Field(None, ge=0)

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(
                "must be 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit"
            )
        return value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: SecretStr) -> SecretStr:
        parts = urlsplit(value.get_secret_value())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host (not shown: secret)")
        return value


def matches(destination: Destination, alert: LiveAlert) -> bool:
    """Whether ``alert`` passes the destination's filters (an empty filter passes all)."""
    checks = (
        (destination.sites, alert.site),
        (destination.device_types, alert.device_type),
        (destination.metrics, alert.metric),
        (destination.kinds, alert.kind),
    )
    return all(not allowed or value in allowed for allowed, value in checks)


class DestinationsError(ValueError):
    """The destinations could not be read; one line, never holding a URL."""


def _field_errors(exc: ValidationError) -> str:
    """Each error's place and message, without its input (which may hold the URL)."""
    said = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False):
        where = ".".join(str(p) for p in err["loc"]) or "destination"
        said.append(f"{where}: {err['msg'].removeprefix('Value error, ')}")
    return "; ".join(said)


def parse_destinations(doc: Any, where: str) -> tuple[Destination, ...]:
    """Validate a list of destination tables.

    Args:
        doc: A list of mappings (``{"name", "format", "url", ...}``), or a mapping with
            such a list under ``destination`` (a TOML file's ``[[destination]]``).
        where: Names the source in errors (a setting or a file).

    Returns:
        The destinations, in order.

    Raises:
        DestinationsError: Not a list of valid destinations, or two share a name.
    """
    if isinstance(doc, dict) and set(doc) == {"destination"}:
        doc = doc["destination"]
    if not isinstance(doc, list):
        raise DestinationsError(f"{where}: must be a list of destinations")
    out: list[Destination] = []
    for i, item in enumerate(doc, 1):
        name = item.get("name") if isinstance(item, dict) else None
        # A name that is not a plain one is not quoted: it may be the URL, put in its place.
        plain = isinstance(name, str) and _NAME.match(name)
        label = f"destination {i}" + (f" ('{name}')" if plain else "")
        if not isinstance(item, dict):
            raise DestinationsError(f"{where}: {label} must be a table of settings")
        try:
            out.append(Destination(**item))
        except ValidationError as exc:
            raise DestinationsError(f"{where}: {label}: {_field_errors(exc)}") from None
    names = [d.name for d in out]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        raise DestinationsError(f"{where}: destination names must differ ({', '.join(dupes)})")
    return tuple(out)


def read_destinations_text(text: str, where: str) -> tuple[Destination, ...]:
    """Destinations from a JSON list's text (an environment variable's value).

    Raises:
        DestinationsError: Not JSON (the text is not quoted: it holds URLs), or invalid.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DestinationsError(
            f"{where}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    return parse_destinations(doc, where)


def read_destinations_file(path: Path) -> tuple[Destination, ...]:
    """Destinations from a TOML file (``[[destination]]`` tables) or a JSON file (a list).

    Raises:
        DestinationsError: It cannot be read or parsed, or it is invalid.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DestinationsError(
            f"cannot read the destinations file {path} ({exc.strerror or type(exc).__name__})"
        ) from None
    if path.suffix.lower() == ".json":
        return read_destinations_text(text, f"destinations file {path}")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # TOML's messages say where, never what: no URL in them.
        raise DestinationsError(f"destinations file {path}: not TOML ({exc})") from None
    return parse_destinations(doc, f"destinations file {path}")


def url_fragments(destinations: Sequence[Destination]) -> list[str]:
    """The parts of every URL that must never appear in output: host, path and query parts."""
    found: set[str] = set()
    for d in destinations:
        url = d.url.get_secret_value()
        parts = urlsplit(url)
        found.add(url)
        if parts.hostname:
            found.add(parts.hostname)
        for piece in re.split(r"[/?&=#]", f"{parts.path}?{parts.query}"):
            if len(piece) >= 4:
                found.add(piece)
    return sorted(found, key=len, reverse=True)
