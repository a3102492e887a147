"""What the send loop sends: a simulated fleet (with anomalies and faults) or a replayed file.

A source hands out batches of ``producer.faults.Message``; generation stays pure
and seeded, and the loop in ``producer.run`` does the timing and the I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO, Protocol, TypeVar

import numpy as np
import orjson

from common.fleet import Fleet
from producer.anomalies import AnomalyConfig, AnomalyInjector
from producer.faults import FaultConfig, FaultInjector, Message
from producer.simulation import (
    Clock,
    EventBuilder,
    FleetSimulation,
    StridedClock,
    firmware_rollout,
)
from producer.wire_format import JsonFormat, WireFormat

S = TypeVar("S", Fleet, np.ndarray, list[Any])


class Source(Protocol):
    """Batches of messages to send."""

    generated: int

    @property
    def device_ids(self) -> Sequence[str]:
        """The devices whose readings it sends."""

    def prepare(self) -> None:
        """Load what making the first batch needs, before the send loop's clock starts."""

    def next_batch(self, n: int) -> list[Message] | None:
        """Up to ``n`` more readings' messages (None: nothing left)."""

    def drain(self) -> list[Message]:
        """Messages still held back, to send before stopping."""

    def ground_truth(self) -> dict[str, Any]:
        """Fault and anomaly records and the last seq per device, for the manifest."""


def worker_seed(seed: int, worker: int, workers: int) -> int:
    """The seed of one worker: the run's own seed when there is a single worker."""
    if workers == 1:
        return seed
    digest = hashlib.sha256(f"iot-pulse:{seed}:{worker}/{workers}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def worker_slice(fleet: S, worker: int, workers: int) -> S:
    """The devices one worker owns (or their values): every ``workers``-th from ``worker``."""
    return fleet[worker::workers]


def worker_count(count: int | None, worker: int, workers: int) -> int | None:
    """One worker's share of a reading count (the first workers take the remainder)."""
    if count is None:
        return None
    return count // workers + (1 if worker < count % workers else 0)


class SimulationSource:
    """Readings of (a slice of) the fleet, with anomalies and faults injected."""

    def __init__(
        self,
        fleet: Fleet,
        seed: int,
        clock: Clock,
        anomalies: AnomalyConfig,
        faults: FaultConfig,
        *,
        worker: int = 0,
        workers: int = 1,
        deterministic_ids: bool = False,
        rollout_share: float = 0.0,
        wire: WireFormat | None = None,
        jitter_s: float = 0.0,
    ) -> None:
        """Set up one worker's simulation and injectors.

        Args:
            fleet: The whole fleet.
            seed: The run's seed.
            clock: The run's clock (event ``k`` of the whole stream).
            anomalies: Anomaly rates.
            faults: Fault rates.
            worker: This worker's number, 0-based.
            workers: Number of workers.
            deterministic_ids: Event ids from the seed instead of ``os.urandom``.
            rollout_share: Share of the whole fleet that sends the contract's newest
                schema version (``firmware_rollout``).
            wire: The payloads' format (default: JSON).
            jitter_s: Each reading is made up to this many seconds before its turn.

        """
        devices = worker_slice(fleet, worker, workers)
        own_seed = worker_seed(seed, worker, workers)
        own_clock: Clock = clock if workers == 1 else StridedClock(clock, workers, worker)
        versions = firmware_rollout(len(fleet), seed, rollout_share)
        self.sim = FleetSimulation(
            devices,
            own_seed,
            own_clock,
            deterministic_ids=deterministic_ids,
            versions=worker_slice(versions, worker, workers),
            jitter_us=round(jitter_s * 1_000_000),
        )
        self.events = EventBuilder(self.sim)
        self.anomalies = (
            AnomalyInjector(devices, own_seed, anomalies, self.sim.metrics)
            if anomalies.active
            else None
        )
        self.wire: WireFormat = wire or JsonFormat()
        self.faults = FaultInjector(devices, own_seed, faults, own_clock, self.wire)
        self.device_ids = devices.ids
        self.generated = 0

    def prepare(self) -> None:
        """Nothing to load."""

    def next_batch(self, n: int) -> list[Message]:
        """The messages of the next ``n`` readings (plus held-back ones now due)."""
        readings = self.sim.next(n)
        # Skewed first: an anomaly's record carries the event time its reading is sent with.
        self.faults.skew(readings)
        if self.anomalies is not None:
            readings = self.anomalies.apply(readings)
        self.generated += n
        return self.faults.process(readings, self.wire.encode(self.events.event_dicts(readings)))

    def drain(self) -> list[Message]:
        """Every held-back message; also closes open anomaly episodes."""
        if self.anomalies is not None:
            self.anomalies.close()
        return self.faults.drain()

    def ground_truth(self) -> dict[str, Any]:
        """Fault and anomaly records, and each device's last seq."""
        return {
            "faults": self.faults.records,
            "anomalies": self.anomalies.records if self.anomalies is not None else [],
            "max_seqs": self.sim.last_seqs(),
        }


class ReplaySource:
    """Lines of a JSON-lines file, sent verbatim, keyed by their ``device_id`` when they have one.

    Lines that are not a JSON object with ``event_id``, ``device_id`` and ``seq`` are
    still sent as they are, and counted in the manifest as unidentified.
    """

    def __init__(self, path: Path) -> None:
        """Open the file.

        Raises:
            FileNotFoundError: The file does not exist.

        """
        if not path.is_file():
            raise FileNotFoundError(f"replay file {path} does not exist")
        self.path = path
        self._fh: BinaryIO = path.open("rb")
        self.device_ids: list[str] = []
        self._index: dict[str, int] = {}
        self.generated = 0

    def _message(self, line: bytes) -> Message:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            event = None
        if isinstance(event, dict):
            device, eid, seq = event.get("device_id"), event.get("event_id"), event.get("seq")
            if isinstance(device, str) and isinstance(eid, str) and isinstance(seq, int):
                i = self._index.get(device)
                if i is None:
                    i = self._index[device] = len(self.device_ids)
                    self.device_ids.append(device)
                return (device.encode(), line, i, seq, eid, None)
            if isinstance(device, str):
                return (device.encode(), line, -1, 0, "", "raw")
        return (b"", line, -1, 0, "", "raw")

    def prepare(self) -> None:
        """Nothing to load."""

    def next_batch(self, n: int) -> list[Message] | None:
        """The next ``n`` non-empty lines (None at the end of the file)."""
        out: list[Message] = []
        while len(out) < n:
            raw = self._fh.readline()
            if not raw:
                break
            line = raw.rstrip(b"\r\n")
            if line:
                out.append(self._message(line))
        self.generated += len(out)
        if not out:
            self._fh.close()
            return None
        return out

    def drain(self) -> list[Message]:
        """Nothing is held back in a replay."""
        return []

    def ground_truth(self) -> dict[str, Any]:
        """A replay injects nothing."""
        return {"faults": [], "anomalies": [], "max_seqs": None}
