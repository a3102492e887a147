"""A query's checkpoint: checked before Spark resumes it, and repaired where a kill left debris."""

from __future__ import annotations

import json
import logging
import re

from common.cli import local_path
from processor.lake_files import LakeFiles

log = logging.getLogger("iot_pulse.processor")


class CheckpointSourcesError(RuntimeError):
    """A query's checkpoint was written by a plan with another number of sources."""


def checkpoint_sources(checkpoint: str) -> int | None:
    """How many sources the latest offsets of a local checkpoint record.

    None when the checkpoint has no offsets yet, or is not on the local file system
    (e.g. cloud storage under spark-submit: not checked).
    """
    local = local_path(checkpoint)
    if local is None:
        return None
    offsets = local / "offsets"
    batches = [p for p in offsets.glob("*") if p.name.isdigit()] if offsets.is_dir() else []
    if not batches:
        return None
    latest = max(batches, key=lambda p: int(p.name))
    # "v1", the batch's metadata, then one line per source.
    lines = [line for line in latest.read_text().splitlines() if line.strip()]
    return max(0, len(lines) - 2)


def check_checkpoint_sources(checkpoint: str, name: str, expected: int) -> None:
    """Stop before Spark does, with what to do, when a checkpoint has other sources.

    Raises:
        CheckpointSourcesError: The checkpoint records another number of sources.
    """
    found = checkpoint_sources(checkpoint)
    if found is not None and found != expected:
        raise CheckpointSourcesError(
            f"the {name} query's checkpoint at {checkpoint} was written by another version "
            f"of the processor (it read {found} sources; this version reads {expected}), and "
            "Spark cannot resume it. Point IOT_LAKE_ROOT at a new folder (replay the topic "
            "from its earliest offsets), or delete the lake (tables and _checkpoints)."
        )


def clear_unlogged_first_batch(files: LakeFiles, checkpoint: str) -> int:
    """Delete what a process killed while logging a query's first batch left behind.

    Spark writes each offsets file to a hidden temporary file (``.0.<uuid>.tmp``), then
    renames it. A kill between the two leaves only the temporary file; Spark then has no
    batch to resume, and refuses to start a new query in a folder that is not empty
    (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``), as if it belonged to another query.
    With no batch logged those files hold nothing, so they go. Any other file is left
    for Spark's check.

    Args:
        files: The lake's files.
        checkpoint: The query's checkpoint folder.

    Returns:
        How many files were deleted.
    """
    offsets = f"{checkpoint.rstrip('/')}/offsets"
    names = files.names(offsets)
    if any(name.isdigit() for name in names):
        return 0  # a batch is logged: Spark resumes from it and ignores the rest
    unfinished = [n for n in names if re.fullmatch(r"\.+\d+\..+\.tmp(\.crc)?", n)]
    for name in unfinished:
        files.delete_file(f"{offsets}/{name}")
    if unfinished:
        log.info("%s: deleted %d unfinished offsets files", checkpoint, len(unfinished))
    return len(unfinished)


def checkpoint_query_id(files: LakeFiles, checkpoint: str) -> str:
    """The query id in a checkpoint's ``metadata`` file (``{"id": "..."}``).

    Spark writes the file when a query first starts on the checkpoint, and keeps it:
    the id is the query's across restarts, and a new checkpoint gives a new one.

    Raises:
        RuntimeError: The checkpoint has no metadata file yet.
    """
    text = files.read_text(f"{checkpoint.rstrip('/')}/metadata")
    if text is None:
        raise RuntimeError(f"{checkpoint} has no metadata file: the query has not started")
    return str(json.loads(text.splitlines()[0])["id"])
