"""Latency distributions that add up across processes and hosts (HdrHistogram).

A sender records its acknowledgement latencies into a ``LatencyHistogram``; its report
carries the histogram's compact text (``encode``), so that the reports of many workers
or shards merge into exact percentiles of all their samples together, which percentiles
of percentiles are not. Values keep 3 significant digits (each is reported as the low end of its
bucket, at most 0.1 % below it), from 1 µs to
an hour, in a few kilobytes whatever the count.
"""

from __future__ import annotations

from collections.abc import Iterable

from hdrh.histogram import HdrHistogram

_LOWEST_US, _HIGHEST_US, _DIGITS = 1, 3_600_000_000, 3


class LatencyHistogram:
    """Latencies in seconds, held as an HdrHistogram of microseconds."""

    def __init__(self) -> None:
        """Start empty."""
        self._h = HdrHistogram(_LOWEST_US, _HIGHEST_US, _DIGITS)

    def record(self, seconds: float) -> None:
        """Add one latency (clamped to 1 µs .. 1 h)."""
        self._h.record_value(min(max(round(seconds * 1e6), _LOWEST_US), _HIGHEST_US))

    @property
    def count(self) -> int:
        """Latencies recorded."""
        return int(self._h.get_total_count())

    @property
    def max_s(self) -> float:
        """The largest latency (0 when empty), in seconds."""
        return self._low(self._h.get_max_value()) / 1e6 if self.count else 0.0

    def percentiles_ms(self, qs: Iterable[float] = (50, 95, 99)) -> dict[str, float]:
        """Percentiles in milliseconds, keyed ``p50``, ``p95`` ... (empty when none)."""
        if not self.count:
            return {}
        at = self._h.get_value_at_percentile
        return {f"p{q:g}": round(self._low(at(q)) / 1000, 3) for q in qs}

    def _low(self, us: int) -> int:
        """The lowest of the values counted as ``us`` (the start of its bucket)."""
        return int(self._h.get_lowest_equivalent_value(us))

    def add(self, other: LatencyHistogram) -> None:
        """Add another histogram's latencies to this one."""
        self._h.add(other._h)

    def encode(self) -> str:
        """The histogram as compact text (HdrHistogram's compressed, base64 form)."""
        encoded: bytes = self._h.encode()  # hdrh ships no types
        return encoded.decode("ascii")

    @classmethod
    def decode(cls, text: str) -> LatencyHistogram:
        """The histogram ``encode`` wrote.

        Raises:
            ValueError: The text is not an encoded histogram.
        """
        out = cls()
        try:
            out._h.decode_and_add(text.encode("ascii"))
        except Exception as exc:  # hdrh raises several kinds on a damaged text
            raise ValueError("not an encoded latency histogram") from exc
        return out
