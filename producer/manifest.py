"""The ground-truth manifest: what a run sent, what the broker acknowledged, what was injected.

Format (JSON lines, documented in ``docs/manifest.md``): a ``header`` line, one
``device`` line per device with its acknowledged events in send order, then one
line per ``anomaly``, ``fault`` and ``failed`` delivery.

Memory: about 52 bytes per sent event (device index, seq and the id packed into
long strings, in send order), so a run of ten million events holds about half a
gigabyte; grouping by device happens once, when the file is written (about 12 bytes
an event more while it runs). Runs without
a manifest path keep nothing.
"""

from __future__ import annotations

import heapq
import os
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from producer.faults import Message

MANIFEST_VERSION = 1
_ID_LEN = 36  # a UUID's text


class Manifest:
    """Collects the ground truth of one run (or of one worker's slice of it).

    Attributes:
        device_ids: Device id of each device index used in messages (may grow, for replay).

    """

    def __init__(self, device_ids: Sequence[str], *, uuid_ids: bool = False) -> None:
        """Start an empty manifest.

        Args:
            device_ids: Device id of each device index used in the messages (a replay
                appends to the list as it meets new devices).
            uuid_ids: Every event id is a 36-character UUID text (the simulator's), so
                ids can be packed into long strings.

        """
        self.device_ids = device_ids
        self.uuid_ids = uuid_ids
        # Append-only, in send order; grouped by device only when written.
        self._dev = array("q")
        self._seq = array("q")
        self._id_chunks: list[str | tuple[str, ...]] = []
        self._resends: Counter[str] = Counter()
        self._resends_failed: Counter[str] = Counter()
        self._failed_first: dict[str, str] = {}
        self._failed: list[dict[str, Any]] = []
        self.messages = 0
        self.unidentified = 0

    def record(self, msgs: Sequence[Message]) -> None:
        """Note messages handed to the sink (their fate comes through ``failed``)."""
        plain = [m for m in msgs if m[5] is None]
        if len(plain) != len(msgs):
            for m in msgs:
                if m[5] == "duplicate":
                    self._resends[m[4]] += 1
                elif m[5] == "raw":
                    self.unidentified += 1
        self.messages += len(msgs)
        if not plain:
            return
        _, _, devices, seqs, event_ids, _ = zip(*plain, strict=True)
        self._dev.extend(devices)
        self._seq.extend(seqs)
        self._id_chunks.append("".join(event_ids) if self.uuid_ids else event_ids)

    def failed(self, value: bytes | None, tag: Any, error: str) -> None:
        """Note a message the sink could not deliver.

        Args:
            value: The message's payload (used to identify an untagged message).
            tag: The message's tag (None, ``"duplicate"``, ``"raw"`` or a fault record).
            error: What went wrong, e.g. ``MSG_SIZE_TOO_LARGE`` or ``_MSG_TIMED_OUT``.

        """
        if isinstance(tag, dict):
            tag["delivered"] = False
            tag["error"] = error
            return
        info: dict[str, Any] = {"error": error, "resend": tag == "duplicate"}
        try:
            event = orjson.loads(value) if value is not None else None
        except orjson.JSONDecodeError:
            event = None
        if isinstance(event, dict):
            info |= {k: event.get(k) for k in ("event_id", "device_id", "seq")}
        self._failed.append(info)
        eid = info.get("event_id")
        if tag == "duplicate":
            self._resends_failed[str(eid)] += 1
        elif eid is not None:
            self._failed_first[str(eid)] = error

    def _acked(self, eid: str) -> bool:
        if eid not in self._failed_first:
            return True
        return self._resends_failed[eid] < self._resends[eid]

    def device_lines(self, max_seqs: Sequence[int] | None = None) -> Iterator[dict[str, Any]]:
        """Per-device lines: acknowledged ``seqs`` and ``event_ids``, in send order.

        The events are grouped by device once, by a stable sort of their device indexes
        (8 bytes an event), and each id is read where ``record`` packed it.
        """
        devs = np.frombuffer(self._dev, dtype=np.int64) if self._dev else np.empty(0, np.int64)
        order = np.argsort(devs, kind="stable")
        counts = np.bincount(devs, minlength=len(self.device_ids))
        bounds = np.concatenate(([0], np.cumsum(counts))).tolist()
        seq = np.frombuffer(self._seq, dtype=np.int64) if self._seq else np.empty(0, np.int64)
        ids_at = self._id_reader()
        for i, device_id in enumerate(self.device_ids):
            at = order[bounds[i] : bounds[i + 1]]
            ids, seqs = ids_at(at), seq[at].tolist()
            if self._failed_first:
                keep = [n for n, eid in enumerate(ids) if self._acked(eid)]
                ids = [ids[n] for n in keep]
                seqs = [seqs[n] for n in keep]
            line: dict[str, Any] = {"type": "device", "device_id": device_id, "acked": len(ids)}
            if max_seqs is not None:
                line["last_seq"] = max_seqs[i]
            line |= {"seqs": seqs, "event_ids": ids}
            yield line

    def _id_reader(self) -> Callable[[np.ndarray], list[str]]:
        """What reads the ids of events by their positions (in record order) from the chunks."""
        chunks = self._id_chunks
        sizes = np.array(
            [len(c) // _ID_LEN if isinstance(c, str) else len(c) for c in chunks], dtype=np.int64
        )
        firsts = np.cumsum(sizes) - sizes  # the position of each chunk's first id

        def ids_at(positions: np.ndarray) -> list[str]:
            chunk = np.searchsorted(firsts, positions, side="right") - 1
            out = []
            for c, o in zip(chunk.tolist(), (positions - firsts[chunk]).tolist(), strict=True):
                ids = chunks[c]
                out.append(ids[o * _ID_LEN : (o + 1) * _ID_LEN] if isinstance(ids, str) else ids[o])
            return out

        return ids_at

    def finish_faults(self, faults: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Fill in the delivery outcome of the fault records (call after the final flush)."""
        out = []
        for rec in faults:
            rec = dict(rec)
            if rec["kind"] == "duplicate":
                eid = rec["event_id"]
                first = 0 if eid in self._failed_first else 1
                rec["copies_acked"] = first + self._resends[eid] - self._resends_failed[eid]
            elif rec["kind"] not in ("late", "out_of_order", "clock_skew"):
                rec.setdefault("delivered", True)
            out.append(rec)
        return out

    def totals(
        self, faults: Sequence[dict[str, Any]], anomalies: Sequence[dict[str, Any]]
    ) -> dict[str, Any]:
        """Counts for the header."""
        acked_events = len(self._seq) - sum(  # fmt: skip
            1 for eid in self._failed_first if not self._acked(eid)
        )
        return {
            "messages_sent": self.messages,
            "messages_failed": len(self._failed)
            + sum(1 for f in faults if f.get("delivered") is False),
            "events_acked": acked_events,
            "faults": dict(Counter(f["kind"] for f in faults)),
            "anomalies": dict(Counter(a["kind"] for a in anomalies)),
            "unidentified_messages": self.unidentified,
        }

    def write(
        self,
        path: Path,
        run: dict[str, Any],
        *,
        faults: Sequence[dict[str, Any]] = (),
        anomalies: Sequence[dict[str, Any]] = (),
        max_seqs: Sequence[int] | None = None,
    ) -> None:
        """Write the manifest file atomically.

        Args:
            path: Destination (a ``.tmp`` sibling is written first, then renamed).
            run: What was run (seed, fleet, settings), for the header.
            faults: Fault records from ``FaultInjector.records``.
            anomalies: Anomaly records from ``AnomalyInjector.records``.
            max_seqs: Per device index, the last sequence number generated.

        """
        faults = self.finish_faults(faults)
        header = {
            "type": "header",
            "manifest_version": MANIFEST_VERSION,
            "run": run,
            "totals": self.totals(faults, anomalies),
        }
        lines: list[Iterable[dict[str, Any]]] = [
            [header],
            self.device_lines(max_seqs),
            ({"type": "anomaly", **a} for a in anomalies),
            ({"type": "fault", **f} for f in faults),
            ({"type": "failed", **f} for f in self._failed),
        ]
        _write_lines(path, (line for group in lines for line in group))


def _write_lines(path: Path, lines: Iterable[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        for line in lines:
            fh.write(orjson.dumps(line) + b"\n")
    os.replace(tmp, path)


def sum_totals(headers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The header ``totals`` of several disjoint parts of one run, summed."""
    totals: dict[str, Any] = {}
    for h in headers:
        for key, value in h["totals"].items():
            if isinstance(value, dict):
                bucket = totals.setdefault(key, {})
                for k, v in value.items():
                    bucket[k] = bucket.get(k, 0) + v
            else:
                totals[key] = totals.get(key, 0) + value
    return totals


def merge_headers(headers: Sequence[dict[str, Any]], run: dict[str, Any]) -> dict[str, Any]:
    """One header (without its ``type``) for disjoint parts of a run: ``run``, totals summed."""
    return {"manifest_version": MANIFEST_VERSION, "run": run, "totals": sum_totals(headers)}


# What may differ between the shards of one run (the rest of ``run`` must not).
_PER_SHARD = ("shard", "started_at", "stopped_by", "worker")


def shards_run(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ``run`` of a whole fleet from its shards' headers, after checking they are all of it.

    Raises:
        ValueError: The headers are of different runs, or not each shard of a split fleet
            exactly once (a manifest missing or given twice).
    """
    first = runs[0]
    for other in runs[1:]:
        for key in sorted(set(first) | set(other)):
            if key not in _PER_SHARD and first.get(key) != other.get(key):
                raise ValueError(
                    f"the manifests are of different runs: their {key} differs "
                    f"({first.get(key)!r} against {other.get(key)!r})"
                )
    shards = [r.get("shard") or {"index": 0, "count": 1} for r in runs]
    count = shards[0]["count"]
    given = sorted(s["index"] for s in shards)
    if given != list(range(count)):
        twice = sorted({i for i in given if given.count(i) > 1})
        missing = sorted(set(range(count)) - set(given))
        problems = []
        if twice:
            problems.append(f"shard {', '.join(map(str, twice))} is given more than once")
        if missing:
            problems.append(f"the manifests of shard {', '.join(map(str, missing))} are missing")
        raise ValueError(
            f"{'; '.join(problems)}: verify gets the manifest of each of the run's {count} "
            "shards exactly once"
        )
    run = {k: v for k, v in first.items() if k != "shard"}
    if count > 1:
        run["shards"] = count
        run["started_at"] = min(r.get("started_at") or "" for r in runs) or None
        run["stopped_by"] = "+".join(sorted({str(r.get("stopped_by")) for r in runs}))
    return run


def merge_manifests(parts: Sequence[Path], path: Path, run: dict[str, Any]) -> None:
    """Merge per-worker manifests (disjoint device slices) into one file.

    Device lines come out in device-id order; totals are summed.

    Args:
        parts: Worker manifest files.
        path: Destination.
        run: Header ``run`` of the merged manifest.

    """
    headers = []
    for part in parts:
        with part.open("rb") as fh:
            headers.append(orjson.loads(fh.readline()))
    header = {"type": "header", **merge_headers(headers, run)}

    def lines_of(part: Path, kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
        with part.open("rb") as fh:
            fh.readline()
            for raw in fh:
                line = orjson.loads(raw)
                if line["type"] == kind:
                    yield (line.get("device_id") or "", line)

    def merged() -> Iterator[dict[str, Any]]:
        yield header
        for kind in ("device", "anomaly", "fault", "failed"):
            streams = [lines_of(p, kind) for p in parts]
            if kind == "device":
                for _, line in heapq.merge(*streams, key=lambda t: t[0]):
                    yield line
            else:
                for stream in streams:
                    for _, line in stream:
                        yield line

    _write_lines(path, merged())
