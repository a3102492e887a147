"""``python -m processor.health``: exit 0 once the processor has committed a micro-batch.

A container healthcheck (docker-compose.yml), so it starts no JVM and reads no table:
it looks for a batch in the commit log of the silver query's checkpoint (the hot path
from Kafka to silver and the 1-minute gold windows), under the lake root of the
``IOT_LAKE_*`` settings, committed since ``processor run`` last started (which marks its
start in the local state folder with ``mark_started``): a processor restarted on an old
checkpoint is healthy again only once it commits. It reads a lake on local disk only;
for a lake on object storage it says so and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common.cli import console, local_path
from common.lake import Query, checkpoint_location
from common.lake_settings import LakeSettings
from common.paths import state_dir

HEALTHY, UNHEALTHY, UNSUPPORTED = 0, 1, 2
HOT_QUERY = Query.SILVER


def started_marker() -> Path:
    """The file whose modification time is when ``processor run`` last started."""
    return state_dir() / "processor" / "started"


def mark_started() -> None:
    """Record that the processor starts now (nothing if the state folder is read-only)."""
    marker = started_marker()
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:
        pass


def committed_batches(lake_root: Path, since: float | None, query: Query = HOT_QUERY) -> int:
    """How many micro-batches ``query`` has committed (files in its checkpoint's ``commits``).

    Args:
        lake_root: The lake's folder.
        since: Count only commits written at or after this time (seconds since the epoch).
        query: The streaming query.
    """
    commits = Path(checkpoint_location(str(lake_root), query)) / "commits"
    if not commits.is_dir():
        return 0
    return sum(
        1
        for path in commits.iterdir()
        if path.name.isdigit() and (since is None or path.stat().st_mtime >= since)
    )


def main(argv: list[str] | None = None) -> int:
    """Print one line on the processor's health; return 0 if healthy."""
    parser = argparse.ArgumentParser(prog="python -m processor.health", description=__doc__)
    parser.parse_args(argv)
    root = LakeSettings().root
    folder = local_path(root)
    if folder is None:
        console.info("unsupported: the lake at %s is not on local disk", root)
        return UNSUPPORTED
    marker = started_marker()
    since = marker.stat().st_mtime if marker.is_file() else None
    batches = committed_batches(folder, since)
    if batches == 0:
        print(f"starting: no {HOT_QUERY} micro-batch committed yet under {folder}")
        return UNHEALTHY
    print(f"healthy: {batches} {HOT_QUERY} micro-batches committed since the start")
    return HEALTHY


if __name__ == "__main__":
    sys.exit(main())
