"""The producer's manifest (``docs/manifest.md``) as frames: what should be in the tables.

A manifest's events (one row per acknowledged reading) can outgrow memory: a load test of
an hour at 30,000 events/s is 108 million. ``read_truth_files`` streams the JSON-lines
manifests once into a Parquet file, a million readings at a time, and the ``Truth``
scans it lazily; only the header and the fault, anomaly and failure lines (a small
share of the readings) are held.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from common import reasons
from producer.manifest import merge_headers, shards_run

# Fault kinds that hold a reading back, so that its ``event_time`` is older than its send.
DELAYED_KINDS = ("late", "out_of_order")
# The quarantine reason of a payload that never reaches the broker (too large).
NOT_DELIVERABLE_REASON = reasons.REJECTED_TOO_LARGE

EVENTS_SCHEMA = {"event_id": pl.String, "device_id": pl.String, "seq": pl.Int64, "pos": pl.Int64}


@dataclass(frozen=True)
class Truth:
    """What a producer run sent and the broker acknowledged.

    Attributes:
        events: One row per acknowledged valid reading: ``event_id``, ``device_id``,
            ``seq`` and ``pos`` (its position in the device's send order, from 0), as a
            lazy frame (over a Parquet file for a manifest read from files).
        faults: The manifest's ``fault`` lines.
        failed: The manifest's ``failed`` lines.
        header: The manifest's header (``run`` and ``totals``).
        anomalies: The manifest's ``anomaly`` lines.
    """

    events: pl.LazyFrame
    faults: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    header: dict[str, Any] = field(default_factory=dict)
    anomalies: list[dict[str, Any]] = field(default_factory=list)

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


CHUNK_EVENTS = 1_000_000  # readings per Parquet row group while a manifest is converted
_ARROW_TYPES: dict[str, pa.DataType] = {
    "event_id": pa.large_string(), "device_id": pa.large_string(), "seq": pa.int64(),
    "pos": pa.int64(),
}  # fmt: skip
_ARROW_SCHEMA = pa.schema(_ARROW_TYPES)


def read_truth_files(paths: Sequence[Path], folder: Path | None = None) -> Truth:
    """One run's manifests (one, or one per shard) as a ``Truth``, its events out of memory.

    The device lines stream into ``events.parquet`` (in ``folder``, else in a temporary
    folder removed when the process exits); a device's lines in several files add up,
    in file order (``docs/manifest.md``).

    Raises:
        ValueError: A file is not a manifest (no header, a device line whose ``seqs``
            and ``event_ids`` differ in length), is not whole (its device lines list
            fewer readings than its header counts; a worker wrote no part of it), or the
            manifests are not all the shards of one run (``producer.manifest.shards_run``).
    """
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="iot-truth-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    where = folder
    headers: list[dict[str, Any]] = []
    lines: dict[str, list[dict[str, Any]]] = {"fault": [], "failed": [], "anomaly": []}
    out = where / "events.parquet"
    with pq.ParquetWriter(out, _ARROW_SCHEMA) as writer:
        batch: dict[str, list[Any]] = {k: [] for k in EVENTS_SCHEMA}
        positions: dict[str, int] = {}
        for path in paths:
            for line in _lines(path, headers):
                kind = line.pop("type")
                if kind == "device":
                    _add_device(line, batch, positions)
                    if len(batch["event_id"]) >= CHUNK_EVENTS:
                        writer.write_table(pa.table(batch, schema=_ARROW_SCHEMA))
                        batch = {k: [] for k in EVENTS_SCHEMA}
                elif kind in lines:
                    lines[kind].append(line)
        writer.write_table(pa.table(batch, schema=_ARROW_SCHEMA))
    _check_whole(headers, sum(positions.values()))
    header = merge_headers(headers, shards_run([h["run"] for h in headers]))
    return Truth(
        events=pl.scan_parquet(out).cast(EVENTS_SCHEMA),  # type: ignore[arg-type]  # polars' cast takes a schema's mapping of column to dtype instance; its annotation wants dtype classes
        faults=lines["fault"],
        failed=lines["failed"],
        header=header,
        anomalies=lines["anomaly"],
    )


def _check_whole(headers: Sequence[dict[str, Any]], listed: int) -> None:
    """Refuse manifests that do not list every acknowledged reading of their run.

    Args:
        headers: The manifests' headers.
        listed: The readings their device lines list.

    Raises:
        ValueError: A worker wrote no part (``run.incomplete``), or the device lines
            list fewer readings than the headers' ``events_acked`` (a file cut short).
    """
    for header in headers:
        if incomplete := (header.get("run") or {}).get("incomplete"):
            raise ValueError(f"{incomplete}: its devices' readings are not listed, so the run "
                             "cannot be checked")  # fmt: skip
    counted = [(header.get("totals") or {}).get("events_acked") for header in headers]
    acked = sum(n for n in counted if isinstance(n, int))
    if len(counted) == sum(isinstance(n, int) for n in counted) and acked != listed:
        raise ValueError(
            f"its device lines list {listed:,} readings but its header counts {acked:,}: "
            "the file is cut short or edited; verify needs it whole"
        )


def _lines(path: Path, headers: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """A manifest's lines after its header, which goes to ``headers``."""
    with path.open("rb") as fh:
        first = orjson.loads(fh.readline() or b"{}")
        if not isinstance(first, dict) or first.get("type") != "header":
            raise ValueError(f"{path.name} has no header line: is it a producer manifest?")
        headers.append({k: v for k, v in first.items() if k != "type"})
        for number, raw in enumerate(fh, start=2):
            if not raw.strip():
                continue
            try:
                line = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"line {number} is not JSON ({exc}): a file cut short?") from None
            if not isinstance(line, dict) or not isinstance(line.get("type"), str):
                raise ValueError(
                    f"line {number} is not a manifest line (a JSON object with a type)"
                )
            yield line


def _add_device(line: dict[str, Any], batch: dict[str, list[Any]], pos: dict[str, int]) -> None:
    """One device line's readings into the batch, positions counted on from earlier lines."""
    device_id, ids, seqs = line["device_id"], line["event_ids"], line["seqs"]
    if len(ids) != len(seqs):
        raise ValueError(
            f"manifest device line {device_id}: {len(ids)} event_ids but {len(seqs)} seqs"
        )
    start = pos.get(device_id, 0)
    pos[device_id] = start + len(ids)
    batch["event_id"] += ids
    batch["device_id"] += [device_id] * len(ids)
    batch["seq"] += seqs
    batch["pos"] += range(start, start + len(ids))
