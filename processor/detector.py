"""Alert detection, as plain Python over one device's readings (no Spark here).

Per device and metric it keeps an exponentially weighted mean and variance
(the rolling baseline) and which alerts are open. A reading

* above the device's ``<metric>_high`` or below ``<metric>_low`` opens a
  ``threshold_high`` / ``threshold_low`` alert, and a later in-range reading clears it;
* more than ``z_threshold`` rolling standard deviations from the rolling mean,
  once ``warmup`` readings are in, opens a ``zscore`` alert, cleared by the next
  reading back within it.

Only transitions are emitted: ``raised`` with a new alert id, ``cleared`` with the
id of the alert it closes. ``processor.alerts.detect_alerts`` runs this over a
micro-batch's devices, their states stored as JSON in ``state/alert_detector``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.alerts import ALERT_KINDS as KINDS
from common.contract import METRIC_NAMES


@dataclass(frozen=True)
class DetectorConfig:
    """Tuning of the detector.

    Attributes:
        span: EWMA span in readings (alpha = 2 / (span + 1)).
        warmup: Readings before z-scores are trusted.
        z_threshold: |z| above which a reading is anomalous.
    """

    span: int = 60
    warmup: int = 30
    z_threshold: float = 4.0

    @property
    def alpha(self) -> float:
        """EWMA smoothing factor."""
        return 2.0 / (self.span + 1.0)


@dataclass
class MetricState:
    """Rolling statistics and open alerts of one metric on one device."""

    n: int = 0
    mean: float = 0.0
    var: float = 0.0
    open: dict[str, str] = field(default_factory=dict)  # kind -> alert_id


def alert_id(event_id: str, metric: str, kind: str) -> str:
    """A deterministic id, so that a replayed batch raises the same alert."""
    return hashlib.sha1(f"{event_id}|{metric}|{kind}".encode()).hexdigest()[:20]


def load_state(text: str | None) -> dict[str, MetricState]:
    """Decode the JSON state of one device."""
    if not text:
        return {}
    return {m: MetricState(**v) for m, v in json.loads(text).items()}


def dump_state(state: Mapping[str, MetricState]) -> str:
    """Encode the state of one device as JSON."""
    return json.dumps({m: vars(s) for m, s in state.items()}, separators=(",", ":"))


def _finite(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def detect_columns(
    columns: Mapping[str, Sequence[Any]],
    state: dict[str, MetricState],
    config: DetectorConfig = DetectorConfig(),  # noqa: B008 - frozen, immutable default
) -> list[dict[str, Any]]:
    """Run one device's readings, given column-wise in event-time order, through the detector.

    Args:
        columns: Equal-length sequences: ``event_id``, ``device_id``, ``event_time``,
            optionally ``device_type`` and ``site``, and per metric ``<metric>``,
            ``<metric>_low`` and ``<metric>_high`` (missing or None/NaN where absent).
        state: The device's state; updated in place.
        config: Detector tuning.

    Returns:
        The ``raised`` and ``cleared`` transitions, in reading order (then metric order).
    """
    found: list[tuple[int, int, int, dict[str, Any]]] = []
    n_rows = len(columns["event_id"])
    nothing = [None] * n_rows

    def emit(i: int, m: int, k: int, transition: str, aid: str, value: float, **extra: Any) -> None:
        metric = METRIC_NAMES[m]
        found.append(
            (i, m, k, {
                "transition": transition,
                "alert_id": aid,
                "device_id": columns["device_id"][i],
                "device_type": columns.get("device_type", nothing)[i],
                "site": columns.get("site", nothing)[i],
                "metric": metric,
                "kind": KINDS[k],
                "value": float(value),
                "threshold": extra.get("threshold"),
                "zscore": extra.get("zscore"),
                "event_time": columns["event_time"][i],
                "event_id": columns["event_id"][i],
            })
        )  # fmt: skip

    alpha, warmup, z_max = config.alpha, config.warmup, config.z_threshold
    for m, metric in enumerate(METRIC_NAMES):
        values = columns.get(metric)
        if values is None or not any(_finite(v) for v in values):
            continue
        highs = columns.get(f"{metric}_high", nothing)
        lows = columns.get(f"{metric}_low", nothing)
        s = state.setdefault(metric, MetricState())
        for i, (value, high, low) in enumerate(zip(values, highs, lows, strict=True)):
            if not _finite(value):
                continue
            checks: list[tuple[int, bool, dict[str, float]]] = []
            if _finite(high):
                checks.append((0, value > high, {"threshold": float(high)}))
            if _finite(low):
                checks.append((1, value < low, {"threshold": float(low)}))
            if s.n >= warmup and s.var > 0:
                z = (value - s.mean) / math.sqrt(s.var)
                checks.append((2, abs(z) > z_max, {"zscore": z}))
            for k, breached, extra in checks:
                kind = KINDS[k]
                if breached and kind not in s.open:
                    aid = alert_id(str(columns["event_id"][i]), metric, kind)
                    s.open[kind] = aid
                    emit(i, m, k, "raised", aid, value, **extra)
                elif not breached and kind in s.open:
                    emit(i, m, k, "cleared", s.open.pop(kind), value, **extra)
            if s.n == 0:
                s.mean = float(value)
            else:
                delta = value - s.mean
                s.mean += alpha * delta
                s.var = (1.0 - alpha) * (s.var + alpha * delta * delta)
            s.n += 1
    found.sort(key=lambda t: t[:3])
    return [t[3] for t in found]


def detect(
    readings: Iterable[Mapping[str, Any]],
    state: dict[str, MetricState],
    config: DetectorConfig = DetectorConfig(),  # noqa: B008 - frozen, immutable default
) -> list[dict[str, Any]]:
    """Run one device's readings, in event-time order, through the detector.

    Args:
        readings: Silver rows of one device (contract fields plus ``<metric>_low/_high``).
        state: The device's state; updated in place.
        config: Detector tuning.

    Returns:
        The ``raised`` and ``cleared`` transitions, in order.
    """
    rows = list(readings)
    if not rows:
        return []
    names = {k for r in rows for k in r}
    return detect_columns({k: [r.get(k) for r in rows] for k in names}, state, config)
