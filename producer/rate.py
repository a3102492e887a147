"""Rate profiles: pure functions from seconds-since-start to a target events/s.

A profile is piecewise linear: a list of ``(t, rate)`` breakpoints, linear in
between, constant after the last one. Steps are two breakpoints at the same time.
``cumulative(t)`` is the exact integral, which the send loop uses as its set
point: by time ``t`` it should have sent ``cumulative(t)`` events.

Spec strings (``--rate-profile``):

* ``constant`` — the ``--rate`` all along;
* ``ramp:FROM:TO:SECONDS`` — linear from ``FROM`` to ``TO`` events/s over ``SECONDS``,
  then ``TO``;
* ``step:RATE@T,RATE@T,...`` — ``RATE`` from second ``T`` on (the first ``T`` is 0);
* ``spike:BASE:PEAK:AT:SECONDS`` — ``BASE``, then ``PEAK`` from ``AT`` for ``SECONDS``,
  then ``BASE`` again.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RateProfile:
    """A piecewise-linear target rate.

    Attributes:
        points: ``(t, rate)`` breakpoints, ``t`` non-decreasing from 0, rates >= 0.
        name: The spec it was parsed from (for reports).

    """

    points: tuple[tuple[float, float], ...]
    name: str = "constant"

    def __post_init__(self) -> None:
        """Check the breakpoints."""
        if not self.points or self.points[0][0] != 0.0:
            raise ValueError("a rate profile starts at t=0")
        for (t0, _), (t1, _) in zip(self.points, self.points[1:], strict=False):
            if t1 < t0:
                raise ValueError("rate profile times must not decrease")
        if any(r < 0 or not math.isfinite(r) for _, r in self.points):
            raise ValueError("rates must be finite and >= 0")

    @property
    def unlimited(self) -> bool:
        """True for the constant rate 0, which means as fast as possible."""
        return all(r == 0.0 for _, r in self.points)

    @property
    def peak(self) -> float:
        """The highest target rate of the profile."""
        return max(r for _, r in self.points)

    def rate_at(self, t: float) -> float:
        """Target events/s at ``t`` seconds (right-continuous at steps)."""
        pts = self.points
        idx = bisect.bisect_right([p[0] for p in pts], t) - 1
        if idx < 0:
            return pts[0][1]
        if idx == len(pts) - 1:
            return pts[-1][1]
        (t0, r0), (t1, r1) = pts[idx], pts[idx + 1]
        if t1 == t0:
            return r1
        return r0 + (r1 - r0) * (t - t0) / (t1 - t0)

    def cumulative(self, t: float) -> float:
        """Events due by ``t`` seconds: the integral of the rate from 0 to ``t``."""
        if t <= 0:
            return 0.0
        total = 0.0
        pts = self.points
        for (t0, r0), (t1, r1) in zip(pts, pts[1:], strict=False):
            if t <= t0:
                return total
            if t1 == t0:
                continue
            end = min(t, t1)
            r_end = r0 + (r1 - r0) * (end - t0) / (t1 - t0)
            total += (r0 + r_end) / 2.0 * (end - t0)
            if t <= t1:
                return total
        last_t, last_r = pts[-1]
        return total + last_r * (t - max(last_t, 0.0))

    def scaled(self, factor: float) -> RateProfile:
        """The same shape with every rate multiplied by ``factor`` (one worker's share)."""
        return RateProfile(tuple((t, r * factor) for t, r in self.points), self.name)


def _numbers(parts: list[str], spec: str, count: int) -> list[float]:
    if len(parts) != count:
        raise ValueError(f"rate profile {spec!r}: expected {count} numbers after the kind")
    try:
        return [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"rate profile {spec!r}: {':'.join(parts)!r} are not numbers") from None


def parse_profile(spec: str, rate: float) -> RateProfile:
    """Parse a ``--rate-profile`` spec (see the module docstring).

    Args:
        spec: e.g. ``constant``, ``ramp:100:5000:60``, ``step:1000@0,5000@30``,
            ``spike:1000:10000:30:5``.
        rate: The ``--rate`` setting, used by ``constant``.

    Returns:
        The profile.

    Raises:
        ValueError: The spec is malformed; the message shows the expected form.

    """
    kind, _, rest = spec.strip().partition(":")
    parts = rest.split(":") if rest else []
    try:
        if kind == "constant" and not parts:
            return RateProfile(((0.0, float(rate)),), spec)
        if kind == "ramp":
            r0, r1, secs = _numbers(parts, spec, 3)
            if secs <= 0:
                raise ValueError(f"rate profile {spec!r}: the ramp needs a positive duration")
            return RateProfile(((0.0, r0), (secs, r1)), spec)
        if kind == "step" and len(parts) == 1:
            points: list[tuple[float, float]] = []
            for item in parts[0].split(","):
                r, sep, t = item.partition("@")
                if not sep:
                    raise ValueError(f"rate profile {spec!r}: each step is RATE@SECONDS")
                at, value = float(t), float(r)
                if points:
                    points.append((at, points[-1][1]))
                points.append((at, value))
            return RateProfile(tuple(points), spec)
        if kind == "spike":
            base, peak, at, secs = _numbers(parts, spec, 4)
            if at < 0 or secs <= 0:
                raise ValueError(f"rate profile {spec!r}: AT must be >= 0 and SECONDS > 0")
            pts = ((0.0, base), (at, base), (at, peak), (at + secs, peak), (at + secs, base))
            return RateProfile(pts, spec)
    except ValueError as exc:
        if str(exc).startswith("rate profile"):
            raise
        raise ValueError(f"rate profile {spec!r}: {exc}") from None
    raise ValueError(
        f"unknown rate profile {spec!r}: use constant, ramp:FROM:TO:SECONDS, "
        "step:RATE@T,RATE@T,... or spike:BASE:PEAK:AT:SECONDS"
    )
