"""The producer's manifest (``docs/manifest.md``) as frames: what should be in the tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

# Fault kinds that hold a reading back, so that its ``event_time`` is older than its send.
DELAYED_KINDS = ("late", "out_of_order")
# The quarantine reason of a payload that never reaches the broker (too large).
NOT_DELIVERABLE_REASON = "rejected_too_large"

EVENTS_SCHEMA = {"event_id": pl.String, "device_id": pl.String, "seq": pl.Int64, "pos": pl.Int64}


@dataclass(frozen=True)
class Truth:
    """What a producer run sent and the broker acknowledged.

    Attributes:
        events: One row per acknowledged valid reading: ``event_id``, ``device_id``,
            ``seq`` and ``pos`` (its position in the device's send order, from 0).
        faults: The manifest's ``fault`` lines.
        failed: The manifest's ``failed`` lines.
        header: The manifest's header (``run`` and ``totals``).
    """

    events: pl.DataFrame
    faults: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    header: dict[str, Any] = field(default_factory=dict)

    @property
    def wall_clock(self) -> bool:
        """True when event times are the wall clock (no simulated ``start_time``, no replay).

        Latencies measured from ``event_time`` mean something only then.
        """
        run = self.header.get("run") or {}
        return run.get("start_time") is None and run.get("replay") is None

    @property
    def skewed_devices(self) -> set[str]:
        """Devices whose clock was skewed on purpose (their event times are off)."""
        return {f["device_id"] for f in self.faults if f.get("kind") == "clock_skew"}

    def fault_ids(self, *kinds: str) -> set[str]:
        """Event ids hit by any of the given fault kinds."""
        return {f["event_id"] for f in self.faults if f.get("kind") in kinds and "event_id" in f}

    def malformed(self) -> list[dict[str, Any]]:
        """Fault lines of malformed payloads (they carry the processor's expected reason)."""
        return [f for f in self.faults if "expected_reason" in f]

    def expected_copies(self) -> dict[str, int]:
        """Copies the broker holds of each duplicated event (``copies_acked``), by event id."""
        return {
            f["event_id"]: int(f.get("copies_acked", 2))
            for f in self.faults
            if f.get("kind") == "duplicate"
        }


def truth_from_manifest(manifest: dict[str, Any]) -> Truth:
    """Build the truth from ``producer.manifest.read_manifest``'s dict.

    Raises:
        ValueError: The manifest has no header, or a device line's ``seqs`` and
            ``event_ids`` differ in length.
    """
    if manifest.get("header") is None:
        raise ValueError("the manifest has no header line: is it a producer manifest?")
    ids: list[str] = []
    devices: list[str] = []
    seqs: list[int] = []
    pos: list[int] = []
    for device_id, line in manifest["devices"].items():
        line_ids, line_seqs = line["event_ids"], line["seqs"]
        if len(line_ids) != len(line_seqs):
            raise ValueError(
                f"manifest device line {device_id}: {len(line_ids)} event_ids but "
                f"{len(line_seqs)} seqs"
            )
        ids += line_ids
        seqs += line_seqs
        devices += [device_id] * len(line_ids)
        pos += range(len(line_ids))
    events = pl.DataFrame(
        {"event_id": ids, "device_id": devices, "seq": seqs, "pos": pos}, schema=EVENTS_SCHEMA
    )
    return Truth(
        events=events,
        faults=list(manifest.get("faults") or []),
        failed=list(manifest.get("failed") or []),
        header=dict(manifest["header"]),
    )
