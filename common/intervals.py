"""Durations written as Spark writes intervals: ``"2 minutes"``, ``"1 minute 30 seconds"``."""

from __future__ import annotations

import re

# The units of Spark's interval strings (a trigger's interval, a watermark's delay).
SPARK_UNITS = {
    "microsecond": 1e-6, "microseconds": 1e-6,
    "millisecond": 0.001, "milliseconds": 0.001,
    "second": 1.0, "seconds": 1.0,
    "minute": 60.0, "minutes": 60.0,
    "hour": 3600.0, "hours": 3600.0,
    "day": 86400.0, "days": 86400.0,
    "week": 604800.0, "weeks": 604800.0,
}  # fmt: skip
# Short forms a command of this project also takes (``loadtest verify --watermark 2m``).
SHORT_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_PAIR = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")


def interval_seconds(text: str, *, spark_only: bool = False) -> float:
    """Seconds in an interval string such as ``"2 minutes"`` or ``"1 minute 30 seconds"``.

    Args:
        text: ``<number> <unit>`` pairs, optionally after ``interval``.
        spark_only: Take only Spark's own unit words, for a value Spark reads.

    Raises:
        ValueError: The text is not such pairs, or names another unit.
    """
    units = SPARK_UNITS if spark_only else SPARK_UNITS | SHORT_UNITS
    body = text.strip().lower().removeprefix("interval").strip()
    pairs = _PAIR.findall(body)
    if not pairs or _PAIR.sub("", body).strip():
        raise ValueError(f"cannot read the interval {text!r}: use e.g. '2 minutes' or '30 seconds'")
    total = 0.0
    for number, unit in pairs:
        if unit not in units:
            raise ValueError(
                f"unknown unit {unit!r} in the interval {text!r}: use "
                f"{', '.join(k for k in units if not k.endswith('s') or k in SHORT_UNITS)}"
            )
        total += float(number) * units[unit]
    return total
