"""The notifier's side of the delivery ledger (``common.deliveries``): its writes.

Before a message is POSTed it goes into the outbox, with its members marked
``sending``; once the destination took it (or it was dead-lettered) the members are
marked and the outbox row goes, in one transaction. A notifier killed between the two
finds the row at its next start and sends that same body with the same key again; an
alert marked ``delivered`` or ``failed`` is never sent to that destination again.

The file is in WAL mode with ``synchronous=NORMAL``: a committed transaction survives
the process being killed (it is in the operating system's hands); a power cut may lose
the last ones, which the uncommitted Kafka offsets then redeliver.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from common.contract import format_time
from common.deliveries import DELIVERED, FAILED, FILTERED, SCHEMA, SENDING


@dataclass(frozen=True)
class Pending:
    """A message in the outbox: sent, or about to be, when the notifier stopped.

    Attributes:
        destination: Its destination's name.
        key: Its ``Idempotency-Key``.
        body: The exact body.
        records: The alert records in it (for a dead letter).
        alert_ids: Their ids.
    """

    destination: str
    key: str
    body: bytes
    records: list[dict[str, Any]]
    alert_ids: list[str]


def _now() -> str:
    return format_time(datetime.now(UTC))


class Ledger:
    """The ledger file, open for writing by one notifier."""

    def __init__(self, path: Path) -> None:
        """Open (creating) the ledger at ``path``.

        Raises:
            OSError: The folder cannot be created.
            sqlite3.Error: The file cannot be opened as a database.
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, timeout=10.0, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        """Close the file."""
        self._db.close()

    def set_destinations(self, names: Sequence[str]) -> None:
        """Record the destinations this notifier delivers to (the dashboard counts them)."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM destinations")
            self._db.executemany(
                "INSERT INTO destinations (name, position) VALUES (?, ?)",
                [(n, i) for i, n in enumerate(names)],
            )

    def finished(self, destination: str, alert_ids: Iterable[str]) -> set[str]:
        """Which of the alerts the destination has finished (delivered, failed or filtered)."""
        ids = list(alert_ids)
        if not ids:
            return set()
        marks = ",".join("?" * len(ids))
        rows = self._db.execute(
            "SELECT alert_id FROM deliveries WHERE destination = ? AND status IN (?, ?, ?) "
            f"AND alert_id IN ({marks})",
            [destination, DELIVERED, FAILED, FILTERED, *ids],
        )
        return {r[0] for r in rows}

    def filtered(self, destination: str, alert_ids: Sequence[str]) -> None:
        """Record that the destination's filters leave these alerts out."""
        now = _now()
        self._db.executemany(
            "INSERT OR IGNORE INTO deliveries (destination, alert_id, status, updated) "
            "VALUES (?, ?, ?, ?)",
            [(destination, a, FILTERED, now) for a in alert_ids],
        )

    def begin(
        self,
        destination: str,
        key: str,
        body: bytes,
        records: Sequence[dict[str, Any]],
        ids: Sequence[str],
    ) -> None:
        """Put a message in the outbox before it is POSTed."""
        now = _now()
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute(
                "INSERT OR REPLACE INTO outbox VALUES (?, ?, ?, ?, ?, ?)",
                (destination, key, body, orjson.dumps(list(records)), orjson.dumps(list(ids)),
                 now),
            )  # fmt: skip
            self._db.executemany(
                "INSERT OR REPLACE INTO deliveries "
                "(destination, alert_id, status, request_key, updated) VALUES (?, ?, ?, ?, ?)",
                [(destination, a, SENDING, key, now) for a in ids],
            )

    def finish(
        self,
        destination: str,
        key: str,
        ids: Sequence[str],
        *,
        delivered: bool,
        attempts: int,
        error: str = "",
    ) -> None:
        """Mark a message's alerts delivered (or failed) and take it out of the outbox."""
        now = _now()
        status = DELIVERED if delivered else FAILED
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR REPLACE INTO deliveries VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(destination, a, status, attempts, error, key, now) for a in ids],
            )
            self._db.execute(
                "DELETE FROM outbox WHERE destination = ? AND request_key = ?", (destination, key)
            )

    def outbox(self) -> list[Pending]:
        """The messages left in the outbox, oldest first."""
        rows = self._db.execute(
            "SELECT destination, request_key, body, records, alert_ids FROM outbox "
            "ORDER BY created, rowid"
        )
        return [Pending(d, k, bytes(b), orjson.loads(r), orjson.loads(a)) for d, k, b, r, a in rows]

    def drop(self, pending: Pending) -> None:
        """Take a message out of the outbox without sending it (its destination is gone)."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute(
                "DELETE FROM outbox WHERE destination = ? AND request_key = ?",
                (pending.destination, pending.key),
            )
            self._db.execute(
                "DELETE FROM deliveries WHERE destination = ? AND request_key = ? AND status = ?",
                (pending.destination, pending.key, SENDING),
            )

    def prune(self, retention: timedelta, now: datetime | None = None) -> int:
        """Forget finished deliveries older than ``retention``; returns how many."""
        cutoff = format_time((now or datetime.now(UTC)) - retention)
        cursor = self._db.execute(
            "DELETE FROM deliveries WHERE updated < ? AND status != ?", (cutoff, SENDING)
        )
        return cursor.rowcount
