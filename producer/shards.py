"""How one fleet is sent from many hosts: shards, their slots, and a start they share.

A run may be split twice: across hosts into ``N`` *shards* (``--shard K/N``), and
inside a host into ``W`` worker processes (``--workers``). Both splits are one: worker
``w`` of shard ``K`` owns *slot* ``K + N * w`` of ``N * W``, i.e. the devices
``slot, slot + N * W, ...``, with the slot's own seed, clock stride and share of the
rate and count (``producer.sources``). So four shards of one worker each send exactly
what one process with four workers sends, and a seed gives the same whole fleet
whatever ``N`` is.

Shards started by hand or by a scheduler start apart; ``wait_until`` holds each one
until a wall-clock time given to all, so that their combined rate is the target from
the first second.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from common.stop_signals import StopFlag

# Kubernetes sets this in each pod of an Indexed Job: the pod's index, 0 to completions - 1.
JOB_INDEX_ENV = "JOB_COMPLETION_INDEX"
_SHARD_RE = re.compile(r"^\s*(?:(\d+)\s*/\s*)?(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (0-based) of a fleet split ``count`` ways."""

    index: int = 0
    count: int = 1

    @classmethod
    def parse(cls, text: str | None, environ: Mapping[str, str] | None = None) -> Shard:
        """Read ``K/N``, or ``N`` alone with ``K`` from ``JOB_COMPLETION_INDEX``.

        Raises:
            ValueError: Not ``K/N`` or ``N``, ``K`` not below ``N``, or ``N`` alone
                without a usable ``JOB_COMPLETION_INDEX``.
        """
        if text is None:
            return cls()
        match = _SHARD_RE.match(text)
        if match is None:
            raise ValueError(f"shard {text!r}: use K/N (e.g. 0/4), or N with {JOB_INDEX_ENV} set")
        index_text, count = match.group(1), int(match.group(2))
        if index_text is None:
            env = os.environ if environ is None else environ
            index_text = env.get(JOB_INDEX_ENV, "").strip()
            if not index_text.isdigit():
                raise ValueError(
                    f"shard {text!r} takes its index from {JOB_INDEX_ENV}, which is "
                    f"{'not set' if not index_text else repr(index_text)}: give K/N instead"
                )
        index = int(index_text)
        if count < 1 or index >= count:
            raise ValueError(f"shard {index}/{count}: the index must be 0 to {count - 1}")
        return cls(index, count)

    def slot(self, worker: int, workers: int) -> tuple[int, int]:
        """The slot that worker ``worker`` of ``workers`` owns, and the number of slots."""
        return self.index + self.count * worker, self.count * workers

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def wait_until(
    at: datetime | None,
    stop: StopFlag,
    *,
    say: Callable[[str], None] | None = None,
    now: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Block until the wall clock reaches ``at`` (or a stop); return the seconds waited.

    A time already past starts at once, with a line that says how late this start is.
    """
    if at is None:
        return 0.0
    left = at.timestamp() - now()
    stamp = at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
    if left <= 0:
        if say is not None:
            say(f"[producer] the start time {stamp} passed {-left:.1f} s ago: starting now")
        return 0.0
    if say is not None:
        say(f"[producer] waiting {left:.1f} s for the start time {stamp}")
    began = now()
    while not stop.is_set():
        left = at.timestamp() - now()
        if left <= 0:
            break
        sleep(min(left, 0.1))
    return now() - began
