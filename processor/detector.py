"""Alert detection, as plain Python over one device's readings (no Spark here).

Per device and metric it keeps an exponentially weighted mean and variance
(the rolling baseline) and which alerts are open. A reading

* above the device's ``<metric>_high`` or below ``<metric>_low`` opens a
  ``threshold_high`` / ``threshold_low`` alert, and a later in-range reading clears it;
* more than ``z_threshold`` rolling standard deviations from the rolling mean,
  once ``warmup`` readings are in, opens a ``zscore`` alert, cleared by the next
  reading back within it.

Only transitions are emitted: ``raised`` with a new alert id, ``cleared`` with the
id of the alert it closes. ``processor.transforms.detect_alerts`` runs this inside
``applyInPandasWithState`` with the state serialised as JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from common.contract import METRIC_NAMES

KINDS = ("threshold_high", "threshold_low", "zscore")


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


def _transition(
    reading: Mapping[str, Any], metric: str, kind: str, transition: str, aid: str, **extra: Any
) -> dict[str, Any]:
    return {
        "transition": transition,
        "alert_id": aid,
        "device_id": reading["device_id"],
        "device_type": reading.get("device_type"),
        "site": reading.get("site"),
        "metric": metric,
        "kind": kind,
        "value": float(reading[metric]),
        "threshold": extra.get("threshold"),
        "zscore": extra.get("zscore"),
        "event_time": reading["event_time"],
        "event_id": reading["event_id"],
    }


def _finite(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


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
    out: list[dict[str, Any]] = []
    alpha = config.alpha
    for r in readings:
        for metric in METRIC_NAMES:
            value = r.get(metric)
            if not _finite(value):
                continue
            s = state.setdefault(metric, MetricState())
            checks: dict[str, tuple[bool, dict[str, Any]]] = {}
            high, low = r.get(f"{metric}_high"), r.get(f"{metric}_low")
            if _finite(high):
                checks["threshold_high"] = (value > high, {"threshold": float(high)})
            if _finite(low):
                checks["threshold_low"] = (value < low, {"threshold": float(low)})
            if s.n >= config.warmup and s.var > 0:
                z = (value - s.mean) / math.sqrt(s.var)
                checks["zscore"] = (abs(z) > config.z_threshold, {"zscore": z})
            for kind, (breached, extra) in checks.items():
                if breached and kind not in s.open:
                    aid = alert_id(str(r["event_id"]), metric, kind)
                    s.open[kind] = aid
                    out.append(_transition(r, metric, kind, "raised", aid, **extra))
                elif not breached and kind in s.open:
                    aid = s.open.pop(kind)
                    out.append(_transition(r, metric, kind, "cleared", aid, **extra))
            if s.n == 0:
                s.mean = float(value)
            else:
                delta = value - s.mean
                s.mean += alpha * delta
                s.var = (1.0 - alpha) * (s.var + alpha * delta * delta)
            s.n += 1
    return out
