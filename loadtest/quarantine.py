"""The malformed payloads the producer sent on purpose, against the quarantine's reasons."""

from __future__ import annotations

from typing import Any

import polars as pl

from loadtest.frames import EVENT_ID_RE, EXAMPLES, as_text
from loadtest.truth import NOT_DELIVERABLE_REASON, Truth


def check_quarantine(
    truth: Truth, quarantine: pl.DataFrame, silver_ids: set[str]
) -> dict[str, Any]:
    """Malformed payloads the broker acknowledged against the quarantine's reasons.

    Every malformed record must be there, however late: the processor keys invalid
    records (an unknown device's included) by where they came from, with no event
    time, so the watermark drops none of them.

    Args:
        truth: The manifest.
        quarantine: ``silver/quarantine`` rows (``reason``, ``raw``, ``event_id``).
        silver_ids: Event ids in silver (at least those of the malformed payloads: one
            there was accepted).
    """
    q = quarantine.select(
        "reason",
        pl.coalesce(pl.col("event_id"), as_text("raw").str.extract(EVENT_ID_RE, 1)).alias("qid"),
    )
    by_id: dict[str, str] = {}
    anonymous: dict[str, int] = {}
    for qid, reason in zip(q["qid"].to_list(), q["reason"].to_list(), strict=True):
        if qid is None:
            anonymous[reason] = anonymous.get(reason, 0) + 1
        else:
            by_id.setdefault(qid, reason)
    by_reason: dict[str, dict[str, int]] = {}
    missing: list[dict[str, Any]] = []
    misclassified: list[dict[str, Any]] = []
    accepted: list[dict[str, Any]] = []
    expected = quarantined = undelivered = 0
    for f in truth.malformed():
        reason = f["expected_reason"]
        if reason == NOT_DELIVERABLE_REASON or f.get("delivered") is False:
            undelivered += 1
            continue
        expected += 1
        row = by_reason.setdefault(reason, {"injected": 0, "quarantined": 0})
        row["injected"] += 1
        eid = f.get("event_id")
        got = by_id.get(eid) if eid is not None else None
        if got is None and anonymous.get(reason, 0) > 0:
            anonymous[reason] -= 1
            got = reason
        info = {"event_id": eid, "device_id": f.get("device_id"), "kind": f["kind"],
                "expected_reason": reason}  # fmt: skip
        if got == reason:
            row["quarantined"] += 1
            quarantined += 1
        elif got is not None:
            misclassified.append(info | {"reason": got})
        elif eid in silver_ids:
            accepted.append(info)
        else:
            missing.append(info)
    return {
        "ok": not missing and not misclassified and not accepted,
        "expected": expected,
        "quarantined": quarantined,
        "missing": len(missing),
        "misclassified": len(misclassified),
        "accepted_into_silver": len(accepted),
        "not_delivered": undelivered,
        "by_reason": by_reason,
        "rows_by_reason": dict(
            sorted(q.group_by("reason").len().iter_rows(), key=lambda r: str(r[0]))
        ),
        "examples": (missing + misclassified + accepted)[:EXAMPLES],
    }
