"""Commits that lose to a concurrent one: recognised by Delta's error condition, written again.

``python -m processor maintain`` compacts tables while the streams write them, and Delta
refuses a MERGE or an overwrite whose files an OPTIMIZE rewrote meanwhile. Every write
here is idempotent (``processor.writes``), so the refused write runs again from scratch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from pyspark.errors import PySparkException
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from processor.lifecycle import say

T = TypeVar("T")

# Delta's errors for a commit that lost to a concurrent one (an OPTIMIZE that compacted
# files a MERGE read, two overwrites, ...): the losing commit wrote nothing.
CONFLICTS = frozenset({
    "DELTA_CONCURRENT_APPEND", "DELTA_CONCURRENT_DELETE_READ", "DELTA_CONCURRENT_DELETE_DELETE",
    "DELTA_CONCURRENT_TRANSACTION", "DELTA_CONCURRENT_WRITE",
})  # fmt: skip
CONFLICT_ATTEMPTS = 5
# An error condition in brackets: ``[CLASS.SUBCLASS] ...``.
_CONDITION = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\]")


def error_condition(exc: BaseException) -> str | None:
    """The Spark error condition (class) of an error, e.g. ``DELTA_CONCURRENT_APPEND``.

    PySpark's errors (classic or Spark Connect) carry it (``getCondition``). delta-spark
    converts its commit conflicts into errors of its own from the Java exception's text
    alone: their condition leads the message (``[DELTA_CONCURRENT_APPEND.WITHOUT_HINT]
    Transaction conflict ...``); any other error that names one in brackets is read the
    same way.
    """
    condition = exc.getCondition() if isinstance(exc, PySparkException) else None
    if condition is None:
        named = _CONDITION.search(str(exc))
        condition = named.group(1) if named else None
    return condition


def is_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is Delta refusing a commit for a concurrent one."""
    return (error_condition(exc) or "").split(".")[0] in CONFLICTS


def retry_conflicts(
    write: Callable[[], T],
    what: str,
    attempts: int = CONFLICT_ATTEMPTS,
    backoff_s: float = 0.5,
    on_conflict: Callable[[BaseException], None] | None = None,
) -> T:
    """Run ``write`` again (from scratch) while Delta refuses its commit for a concurrent one.

    Safe only for idempotent writes, which every writer here is: what an attempt
    committed before its conflict is skipped by the next.

    Args:
        write: The write.
        what: What it writes, for the log line.
        attempts: Tries in all; the last conflict is raised.
        backoff_s: Wait before the second try, doubled for each next one.
        on_conflict: Called with each conflict that is retried.

    Returns:
        What the successful try of ``write`` returned.
    """

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        if exc is None:
            return
        if on_conflict is not None:
            on_conflict(exc)
        say(
            f"{what}: a concurrent commit won ({error_condition(exc)}); "
            f"writing again (try {state.attempt_number + 1} of {attempts})"
        )

    retrying = Retrying(
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=backoff_s, min=backoff_s),
        retry=retry_if_exception(is_conflict),
        before_sleep=before_sleep,
        reraise=True,
    )
    return retrying(write)
