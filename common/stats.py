"""Summary statistics shared by the services' reports."""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentiles(samples: Iterable[float], qs: Iterable[float] = (50, 95, 99)) -> dict[str, float]:
    """Nearest-rank percentiles of ``samples``, keyed ``p50``, ``p95`` ... (empty when none).

    The ``q``-th percentile is the smallest sample with at least ``q`` % of the samples at
    or below it, so it is always one of the samples. (numpy's ``inverted_cdf`` is meant to
    be this, but computes the rank in floating point: it gives 8 for the 7th percentile
    of 1..100, where 7 % of 100 samples is exactly 7.)
    """
    ordered = sorted(samples)
    n = len(ordered)
    if n == 0:
        return {}
    return {f"p{q:g}": ordered[max(1, min(n, math.ceil(q * n / 100))) - 1] for q in qs}
