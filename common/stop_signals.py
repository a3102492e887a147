"""How a service is asked to stop: SIGINT/SIGTERM or code, checked between steps of its loop."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any


class StopFlag:
    """Set by SIGINT/SIGTERM (or by code); the loop checks it between batches.

    Attributes:
        reason: Name of the signal (or reason) that asked to stop, else None.
        count: How many times stop was asked; a second Ctrl-C skips the wait for acks.

    """

    def __init__(self) -> None:
        """Not set."""
        self.reason: str | None = None
        self.count = 0

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        """Signal handler."""
        self.set(signal.Signals(signum).name)

    def set(self, reason: str) -> None:
        """Ask the loop to stop."""
        self.reason = self.reason or reason
        self.count += 1

    def is_set(self) -> bool:
        """True once stop was asked."""
        return self.reason is not None

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s`` seconds, waking within 50 ms once stop is asked.

        A short sleep in a loop rather than a ``threading.Event``: the signal handler
        sets the flag, and an event's lock taken in a handler can deadlock the thread
        it interrupted.

        Args:
            timeout_s: The longest sleep.

        Returns:
            Whether stop was asked (early or by the end).
        """
        deadline = time.monotonic() + timeout_s
        while not self.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.05))
        return True


@contextlib.contextmanager
def stopped_by_signals(stop: StopFlag, install: bool = True) -> Iterator[StopFlag]:
    """SIGINT and SIGTERM set ``stop`` inside the block (main thread only when ``install``).

    The handlers in place before are restored on exit.
    """
    previous: dict[signal.Signals, Any] = {}
    if install:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, stop)
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
