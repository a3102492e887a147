"""The delivery ledger: what the notifier sent to which destination, in one SQLite file.

``notifier.ledger`` writes it (``<state dir>/notifier/deliveries.sqlite`` by default);
the dashboard's Alerts page reads it to say, per live alert, how many destinations
have it. SQLite needs no server and no JVM, and readers never block the writer (WAL).

Tables:

- ``destinations(name, position)``: the notifier's destinations, as of its last start.
- ``deliveries(destination, alert_id, status, attempts, error, request_key, updated)``:
  one row per destination and alert, ``status`` one of ``STATUSES``.
- ``outbox(destination, request_key, body, records, alert_ids, created)``: a message
  about to be POSTed; a restart sends it again, byte for byte, before reading on.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from common.paths import state_dir

SENDING: Final = "sending"  # in the outbox: POSTed, or about to be
DELIVERED: Final = "delivered"
FAILED: Final = "failed"  # dead-lettered after the attempts ran out, or refused for good
FILTERED: Final = "filtered"  # the destination's filters leave it out
STATUSES: Final = (SENDING, DELIVERED, FAILED, FILTERED)

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS destinations (name TEXT PRIMARY KEY, position INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS deliveries (
    destination TEXT NOT NULL, alert_id TEXT NOT NULL, status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0, error TEXT NOT NULL DEFAULT '',
    request_key TEXT NOT NULL DEFAULT '', updated TEXT NOT NULL,
    PRIMARY KEY (destination, alert_id)
);
CREATE INDEX IF NOT EXISTS deliveries_alert ON deliveries (alert_id);
CREATE INDEX IF NOT EXISTS deliveries_updated ON deliveries (updated);
CREATE TABLE IF NOT EXISTS outbox (
    destination TEXT NOT NULL, request_key TEXT NOT NULL, body BLOB NOT NULL,
    records BLOB NOT NULL, alert_ids TEXT NOT NULL, created TEXT NOT NULL,
    PRIMARY KEY (destination, request_key)
);
"""


def default_ledger_path() -> Path:
    """``<state dir>/notifier/deliveries.sqlite``: the notifier writes it, the dashboard reads."""
    return state_dir() / "notifier" / "deliveries.sqlite"


@dataclass(frozen=True)
class DeliveryState:
    """One alert's deliveries across the notifier's destinations.

    Attributes:
        delivered: Destinations that took it.
        failed: Destinations that did not (it went to the dead-letter topic).
        pending: Destinations still to take it (held by the rate limit, being sent, or
            not read yet).
    """

    delivered: int
    failed: int
    pending: int

    @property
    def text(self) -> str:
        """``2 of 2``, ``1 of 2 · 1 failed``, ``0 of 2 · 2 pending``; ``—`` for no destination."""
        total = self.delivered + self.failed + self.pending
        if total == 0:
            return "—"
        parts = [f"{self.delivered} of {total}"]
        if self.failed:
            parts.append(f"{self.failed} failed")
        if self.pending:
            parts.append(f"{self.pending} pending")
        return " · ".join(parts)


def delivery_states(path: Path, alert_ids: Sequence[str]) -> dict[str, DeliveryState] | None:
    """Each alert's ``DeliveryState``, read from the ledger without writing to it.

    Args:
        path: The ledger file (the notifier's ``ledger_path``).
        alert_ids: The alerts asked about.

    Returns:
        A state for every alert id asked about (a destination that filters the alert
        out counts in none of its numbers); None when there is no ledger (no notifier
        has run) or it cannot be read.
    """
    if not path.is_file():
        return None
    ids = list(dict.fromkeys(alert_ids))
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0) as db:
            names = [r[0] for r in db.execute("SELECT name FROM destinations")]
            rows: list[tuple[str, str, str]] = []
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows += db.execute(
                    "SELECT alert_id, destination, status FROM deliveries "
                    f"WHERE alert_id IN ({marks})",
                    chunk,
                ).fetchall()
    except sqlite3.Error:
        return None
    current = set(names)
    status: dict[str, dict[str, str]] = {}
    for alert_id, destination, state in rows:
        if destination in current:
            status.setdefault(alert_id, {})[destination] = state
    out = {}
    for alert_id in ids:
        known = status.get(alert_id, {})
        delivered = sum(s == DELIVERED for s in known.values())
        failed = sum(s == FAILED for s in known.values())
        filtered = sum(s == FILTERED for s in known.values())
        out[alert_id] = DeliveryState(
            delivered, failed, len(current) - delivered - failed - filtered
        )
    return out
