"""The view's filters and how they live in the URL's query parameters.

A view is ``?range=1h&site=Austin&site=Boston&type=thermostat``: the time range as a
count of minutes, hours or days, and any number of sites and device types (none:
all). Pure functions, so the round trip is tested without Streamlit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl

RANGE_PRESETS: tuple[str, ...] = ("15m", "1h", "6h", "24h", "7d")
REFRESH_CHOICES: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
_DURATION = re.compile(r"^(\d+)([mhd])$")
_UNIT_MINUTES = {"m": 1, "h": 60, "d": 1440}
_UNIT_NAMES = {"m": "min", "h": "h", "d": "d"}


def parse_range(text: str) -> timedelta | None:
    """``"15m"``, ``"6h"``, ``"7d"`` as a duration; None if the text is not one."""
    match = _DURATION.match(text.strip())
    if match is None or int(match.group(1)) == 0:
        return None
    return timedelta(minutes=int(match.group(1)) * _UNIT_MINUTES[match.group(2)])


def range_label(text: str) -> str:
    """Human label of a range, e.g. ``"Last 6 h"``."""
    match = _DURATION.match(text)
    if match is None:
        return text
    return f"Last {match.group(1)} {_UNIT_NAMES[match.group(2)]}"


def range_from_minutes(minutes: int) -> str:
    """The shortest spelling of a whole number of minutes, e.g. 60 -> ``"1h"``."""
    if minutes % 1440 == 0:
        return f"{minutes // 1440}d"
    if minutes % 60 == 0:
        return f"{minutes // 60}h"
    return f"{minutes}m"


def range_options(default: str, current: str) -> list[str]:
    """The presets plus the default and the current range, shortest first."""
    options = set(RANGE_PRESETS) | {default, current}
    valid = [o for o in options if parse_range(o) is not None]
    return sorted(valid, key=lambda o: parse_range(o) or timedelta(0))


def floor_minute(ts: datetime) -> datetime:
    """``ts`` rounded down to the whole minute."""
    return ts.replace(second=0, microsecond=0)


@dataclass(frozen=True)
class Filters:
    """What the user looks at: a time range up to now, sites and device types."""

    range: str
    sites: tuple[str, ...] = ()
    device_types: tuple[str, ...] = ()

    @property
    def span(self) -> timedelta:
        """Length of the time range."""
        return parse_range(self.range) or timedelta(hours=1)

    def start(self, now: datetime) -> datetime:
        """Start of the range: whole minutes before ``now``'s minute.

        Rounded to the minute so that reads, and their cache keys, change once a minute.
        """
        return floor_minute(now) - self.span

    def scope(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Rows of the selected sites and device types (all when none is selected)."""
        if self.sites and "site" in frame.columns:
            frame = frame.filter(pl.col("site").is_in(self.sites))
        if self.device_types and "device_type" in frame.columns:
            frame = frame.filter(pl.col("device_type").is_in(self.device_types))
        return frame


def _all(params: Mapping[str, str | Sequence[str]], key: str) -> list[str]:
    value = params.get(key)
    if value is None:
        return []
    values = [value] if isinstance(value, str) else list(value)
    return [v for v in values if v]


def filters_from_params(params: Mapping[str, str | Sequence[str]], default_range: str) -> Filters:
    """Filters from query parameters; unknown or malformed values fall back to defaults.

    Args:
        params: Query parameters, each a string or a list of strings.
        default_range: Range used when ``range`` is absent or malformed.
    """
    ranges = _all(params, "range")
    chosen = ranges[-1] if ranges and parse_range(ranges[-1]) is not None else default_range
    return Filters(
        range=chosen,
        sites=tuple(dict.fromkeys(_all(params, "site"))),
        device_types=tuple(dict.fromkeys(_all(params, "type"))),
    )


def filters_to_params(filters: Filters, default_range: str) -> dict[str, str | list[str]]:
    """Query parameters for ``filters``, leaving out defaults so that URLs stay short."""
    params: dict[str, str | list[str]] = {}
    if filters.range != default_range:
        params["range"] = filters.range
    if filters.sites:
        params["site"] = list(filters.sites)
    if filters.device_types:
        params["type"] = list(filters.device_types)
    return params
