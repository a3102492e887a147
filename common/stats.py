"""Summary statistics shared by the services' reports."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Protocol


class Ordered(Protocol):
    """Samples in ascending order that can be read by position: a list, a polars Series."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> Any: ...


def percentiles(samples: Iterable[float], qs: Iterable[float] = (50, 95, 99)) -> dict[str, float]:
    """Nearest-rank percentiles of ``samples``, keyed ``p50``, ``p95`` ... (empty when none).

    The ``q``-th percentile is the smallest sample with at least ``q`` % of the samples at
    or below it, so it is always one of the samples. (numpy's ``inverted_cdf`` is meant to
    be this, but computes the rank in floating point: it gives 8 for the 7th percentile
    of 1..100, where 7 % of 100 samples is exactly 7.)
    """
    return sorted_percentiles(sorted(samples), qs)


def sorted_percentiles(ordered: Ordered, qs: Iterable[float] = (50, 95, 99)) -> dict[str, float]:
    """``percentiles`` of samples already in ascending order, read in place (no copy).

    Args:
        ordered: The samples, ascending: a list, or a column (a polars Series) of any length.
        qs: The percentiles wanted.
    """
    n = len(ordered)
    if n == 0:
        return {}
    return {f"p{q:g}": ordered[max(1, min(n, math.ceil(q * n / 100))) - 1] for q in qs}
