"""A producer manifest (``producer.manifest``, ``docs/manifest.md``) read whole, for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson


def read_manifest(path: Path) -> dict[str, Any]:
    """Read a producer manifest into one dict, to check what a run wrote line by line.

    ``loadtest.truth`` reads manifests for ``verify``; the tests read them raw.

    Returns:
        ``{"header": {...}, "devices": {device_id: line}, "anomalies": [...],
        "faults": [...], "failed": [...]}``; a device with several lines has them
        concatenated in file order.

    """
    out: dict[str, Any] = {"header": None, "devices": {}, "anomalies": [], "faults": [],
                           "failed": []}  # fmt: skip
    with path.open("rb") as fh:
        for raw in fh:
            line = orjson.loads(raw)
            kind = line.pop("type")
            if kind == "header":
                out["header"] = line
            elif kind == "device":
                dev = out["devices"].setdefault(
                    line["device_id"],
                    {"device_id": line["device_id"], "acked": 0, "seqs": [], "event_ids": []},
                )
                dev["acked"] += line["acked"]
                dev["seqs"] += line["seqs"]
                dev["event_ids"] += line["event_ids"]
                if "last_seq" in line:
                    dev["last_seq"] = max(dev.get("last_seq", 0), line["last_seq"])
            elif kind in ("anomaly", "fault", "failed"):
                out[{"anomaly": "anomalies", "fault": "faults", "failed": "failed"}[kind]].append(
                    line
                )
    return out
