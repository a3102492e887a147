"""A local Delta table's commits as its log records them (``_delta_log/*.json``).

delta-rs's and Spark's history APIs leave out the ``txn`` actions (each writer's
newest micro-batch) that the exactly-once tests check, so the tests read the log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Commit:
    """One commit: its version, Delta ``txn`` actions, and ``commitInfo``."""

    version: int
    txns: tuple[tuple[str, int], ...]
    info: dict

    @property
    def engine(self) -> str:
        """Which Delta implementation wrote it, e.g. ``Apache-Spark/4.2.0``."""
        return str(self.info.get("engineInfo", "")).split(" ")[0]


def commits(path: str | Path) -> list[Commit]:
    """Every commit of the table at ``path`` (a local folder), oldest first."""
    out = []
    for log in sorted(Path(path, "_delta_log").glob("[0-9]" * 20 + ".json")):
        actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        txns = tuple((a["txn"]["appId"], a["txn"]["version"]) for a in actions if "txn" in a)
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        out.append(Commit(int(log.stem), txns, info))
    return out
