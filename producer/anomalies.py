"""Anomalies on purpose: spikes, stuck sensors, drift and dropout, each at its own rate.

The injector is pure and seeded: it edits (or drops) readings made by
``producer.simulation.FleetSimulation`` and draws its own random numbers, so the
underlying signals are the same with or without anomalies, and the same seed
gives the same anomalies. Every anomaly it injects becomes a record for the
ground-truth manifest.

Rates are shares of readings:

* ``spike``: a reading's metric jumps beyond the type's high alert threshold;
* ``stuck``: a sensor repeats one value for ``stuck_readings`` readings;
* ``drift``: a sensor's readings drift away linearly for ``drift_readings`` readings,
  reaching 1.5 times the distance from baseline to the high threshold;
* ``dropout``: a device goes silent for ``dropout_readings`` readings (its sequence
  numbers keep counting, so the silence is a gap in ``seq``).

Episodes (stuck, drift, dropout) are laid out in the stream's event index ``k``:
the device of event ``k`` is ``k % len(fleet)``, so an episode of ``L`` readings
starting at ``k`` covers ``k, k + n, ..., k + (L - 1) n``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.contract import FIELD_BY_NAME, METRIC_NAMES
from common.fleet import Fleet
from producer.sampling import Hits, episode_start_probability, sub_rng
from producer.simulation import Readings, format_micros

KINDS = ("spike", "stuck", "drift", "dropout")
DRIFT_REACH = 1.5  # drift ends at baseline + 1.5 x (high threshold - baseline)


@dataclass(frozen=True)
class AnomalyConfig:
    """What anomalies to inject and how often.

    Attributes:
        spike: Share of readings with one spiked metric.
        stuck: Share of readings inside stuck-sensor episodes.
        drift: Share of readings inside drift episodes.
        dropout: Share of readings lost to silent devices.
        stuck_readings: Readings per stuck episode.
        drift_readings: Readings per drift episode.
        dropout_readings: Readings per dropout episode.

    """

    spike: float = 0.0
    stuck: float = 0.0
    drift: float = 0.0
    dropout: float = 0.0
    stuck_readings: int = 30
    drift_readings: int = 60
    dropout_readings: int = 20

    @property
    def active(self) -> bool:
        """True if any anomaly has a non-zero rate."""
        return any((self.spike, self.stuck, self.drift, self.dropout))


def _clamp(metric: str, value: float) -> float:
    f = FIELD_BY_NAME[metric]
    if f.min is not None and value < f.min:
        value = f.min
    if f.max is not None and value > f.max:
        value = f.max
    return round(value, 3)


class _Episode:
    """One stuck, drift or dropout episode on one device."""

    __slots__ = ("kind", "device", "metric", "k_start", "k_end", "param", "record", "readings")

    def __init__(
        self, kind: str, device: int, metric: str | None, k_start: int, k_end: int, param: float
    ) -> None:
        self.kind = kind
        self.device = device
        self.metric = metric
        self.k_start = k_start
        self.k_end = k_end
        self.param = param
        self.record: dict[str, Any] = {}
        self.readings = 0


class AnomalyInjector:
    """Injects anomalies into batches of readings from one ``FleetSimulation``.

    Attributes:
        records: Finished anomaly records for the manifest, in the order they ended.

    """

    def __init__(
        self,
        fleet: Fleet,
        seed: int,
        config: AnomalyConfig,
        metrics: Sequence[str] = METRIC_NAMES,
    ) -> None:
        """Prepare the seeded draws.

        Args:
            fleet: The simulation's devices, in its order.
            seed: The run's seed (each anomaly kind derives its own generator).
            config: Rates and episode lengths.
            metrics: The columns of ``Readings.values`` (``FleetSimulation.metrics``).

        """
        self.fleet = fleet
        self._col = {name: j for j, name in enumerate(metrics)}
        self.config = config
        self.records: list[dict[str, Any]] = []
        self._n = len(self.fleet)
        self._lengths = {
            "stuck": config.stuck_readings,
            "drift": config.drift_readings,
            "dropout": config.dropout_readings,
        }
        for kind, length in self._lengths.items():
            if length < 1:
                raise ValueError(f"{kind}_readings must be at least 1")
        self._hits = {
            "spike": Hits(config.spike, sub_rng(seed, "anomaly:spike")),
            **{
                kind: Hits(
                    episode_start_probability(getattr(config, kind), self._lengths[kind]),
                    sub_rng(seed, f"anomaly:{kind}"),
                )
                for kind in self._lengths
            },
        }
        self._detail = {kind: sub_rng(seed, f"anomaly:{kind}:detail") for kind in KINDS}
        self._busy_until = {kind: np.full(self._n, -1, dtype=np.int64) for kind in self._lengths}
        self._open: list[_Episode] = []

    def _metric(self, kind: str, device: int) -> str:
        return self._detail[kind].choice(tuple(self.fleet[device].kind.metrics))

    def _start(self, kind: str, k: int) -> None:
        device = k % self._n
        if k <= self._busy_until[kind][device]:
            return  # the device is already inside an episode of this kind
        length = self._lengths[kind]
        k_end = k + (length - 1) * self._n
        self._busy_until[kind][device] = k_end
        metric = None if kind == "dropout" else self._metric(kind, device)
        param = 0.0
        if kind == "drift":
            assert metric is not None
            profile = self.fleet[device].kind.metrics[metric]
            reach = (
                profile.high - profile.baseline
                if profile.high is not None
                else 10 * profile.daily_amplitude
            )
            param = DRIFT_REACH * reach
        self._open.append(_Episode(kind, device, metric, k, k_end, param))

    def _touch(self, ep: _Episode, r: Readings, pos: int) -> None:
        """Bookkeeping of one covered reading."""
        ep.readings += 1
        rec = ep.record
        seq, when = int(r.seq[pos]), format_micros(int(r.us[pos]))
        if not rec:
            rec.update(
                kind=ep.kind,
                device_id=self.fleet[ep.device].device_id,
                **({"metric": ep.metric} if ep.metric else {}),
                start_seq=seq,
                start_time=when,
            )
        rec["end_seq"] = seq
        rec["end_time"] = when

    def _finish(self, ep: _Episode, *, truncated: bool) -> None:
        rec = ep.record
        if not rec:
            return  # started but no reading made yet: nothing happened
        rec["readings"] = ep.readings
        if ep.kind == "stuck":
            rec["value"] = ep.param
        elif ep.kind == "drift":
            rec["magnitude"] = round(ep.param, 3)
        rec["truncated"] = truncated
        self.records.append(rec)

    def apply(self, r: Readings) -> Readings:
        """Inject the anomalies due in one batch of consecutive readings.

        Args:
            r: The next readings from the simulation (stream indexes ``k0, k0 + 1, ...``);
                their values are edited in place.

        Returns:
            The readings that survive dropout.

        """
        n = len(r)
        if n == 0:
            return r
        k0 = int(r.k[0])
        stop = k0 + n
        for kind in ("dropout", "drift", "stuck"):
            for k in self._hits[kind].take_until(stop, k0):
                self._start(kind, k)
        keep = np.ones(n, dtype=bool)
        still_open = []
        # Dropout first, then drift, then stuck (a stuck sensor hides drift).
        order = {"dropout": 0, "drift": 1, "stuck": 2}
        for ep in sorted(self._open, key=lambda e: order[e.kind]):
            nd = self._n
            first = ep.k_start
            if first < k0:
                first += -(-(k0 - first) // nd) * nd
            last = min(ep.k_end, stop - 1)
            col = self._col[ep.metric] if ep.metric else -1
            for k in range(first, last + 1, nd):
                pos = k - k0
                self._touch(ep, r, pos)
                if ep.kind == "dropout":
                    keep[pos] = False
                elif ep.kind == "drift":
                    step = (k - ep.k_start) // nd + 1
                    shift = ep.param * step / self._lengths["drift"]
                    r.values[pos, col] = _clamp(str(ep.metric), r.values[pos, col] + shift)
                else:
                    if k == ep.k_start:
                        ep.param = float(r.values[pos, col])
                    r.values[pos, col] = ep.param
            if ep.k_end < stop:
                self._finish(ep, truncated=False)
            else:
                still_open.append(ep)
        self._open = still_open
        for k in self._hits["spike"].take_until(stop, k0):
            if keep[k - k0]:
                self._spike(r, k - k0)
        return r if keep.all() else r.select(keep)

    def _spike(self, r: Readings, pos: int) -> None:
        device = int(r.dev[pos])
        metric = self._metric("spike", device)
        col = self._col[metric]
        profile = self.fleet[device].kind.metrics[metric]
        rng = self._detail["spike"]
        if profile.high is not None:
            value = profile.high + (profile.high - profile.baseline) * rng.uniform(0.5, 1.5)
        else:
            value = profile.baseline + 10 * profile.daily_amplitude * rng.uniform(0.5, 1.5)
        normal = float(r.values[pos, col])
        r.values[pos, col] = _clamp(metric, value)
        self.records.append(
            {
                "kind": "spike",
                "device_id": self.fleet[device].device_id,
                "event_id": r.event_id[pos],
                "seq": int(r.seq[pos]),
                "event_time": format_micros(int(r.us[pos])),
                "metric": metric,
                "value": float(r.values[pos, col]),
                "normal_value": normal,
            }
        )

    def close(self) -> None:
        """Record the episodes still running when the stream stops (``truncated``)."""
        for ep in self._open:
            self._finish(ep, truncated=True)
        self._open = []
