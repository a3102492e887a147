"""Seeded sampling helpers shared by the anomaly and fault injectors.

Rates are per event, but drawing one random number per event per kind would
cost more than making the event. ``Hits`` draws the gap to the next hit instead
(a geometric variable), so the cost is per hit, and the hit pattern is exactly a
Bernoulli(p) process over the event indexes.
"""

from __future__ import annotations

import math
import random

NEVER = 1 << 62  # an index no stream reaches


def sub_rng(seed: int, label: str) -> random.Random:
    """An independent, reproducible generator for one purpose of a seeded run."""
    return random.Random(f"iot-pulse:{seed}:{label}")


class Hits:
    """The indexes hit by a Bernoulli(``p``) process, drawn gap by gap.

    Attributes:
        next: The next index that is hit (``NEVER`` for p = 0).

    """

    __slots__ = ("p", "rng", "next", "_log_q")

    def __init__(self, p: float, rng: random.Random, start: int = 0) -> None:
        """Start the process at index ``start``.

        Args:
            p: Probability that an index is hit, 0..1.
            rng: Generator of the gaps.
            start: First index considered.

        """
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"a rate must be between 0 and 1, got {p}")
        self.p = p
        self.rng = rng
        self._log_q = math.log1p(-p) if 0.0 < p < 1.0 else 0.0
        self.next = NEVER
        self.next = self._after(start - 1)

    def _after(self, index: int) -> int:
        """The first hit strictly after ``index``."""
        if self.p <= 0.0:
            return NEVER
        if self.p >= 1.0:
            return index + 1
        u = self.rng.random()
        return index + 1 + int(math.log1p(-u) / self._log_q)

    def advance(self) -> int:
        """Consume the current hit and return it."""
        hit = self.next
        self.next = self._after(hit)
        return hit

    def take_until(self, stop: int, start: int = 0) -> list[int]:
        """Consume every hit below ``stop``; return those at or above ``start``."""
        hits = []
        while self.next < stop:
            hit = self.advance()
            if hit >= start:
                hits.append(hit)
        return hits


def episode_start_probability(fraction: float, length: int) -> float:
    """Per-event start probability that puts ``fraction`` of events inside episodes.

    A device outside an episode starts one of ``length`` events with probability
    ``p`` at each event; in the long run the share of its events inside episodes is
    ``p * length / (p * length + 1 - p)``. This inverts that.

    Args:
        fraction: Wanted share of events inside episodes, 0..1 (exclusive of 1).
        length: Events per episode.

    Returns:
        The per-event start probability.

    """
    if fraction <= 0.0:
        return 0.0
    if fraction >= 1.0:
        raise ValueError("an episode rate must be below 1")
    return fraction / (length * (1.0 - fraction) + fraction)
