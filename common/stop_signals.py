"""How a run is asked to stop: SIGINT/SIGTERM or code, checked between steps of its loop.

Every service, the demo and the processor hold one ``StopFlag``. A signal sets it;
the run's loop checks it (``is_set``, ``wait``) and ends its work cleanly. Two things
a run may add:

- **A start-up that a signal cuts short.** Inside ``starting()`` there is nothing to
  stop cleanly yet (the broker check, the JVM's start, a child being launched): a
  signal raises ``StartInterrupted`` at once, wherever the start-up waits.
  ``unbroken()`` marks a step inside it that a signal must not cut in two (a child
  process launched and put on the list of those to stop).
- **A second signal that aborts** (``announce_as``): the first says
  ``[<name>] stopping (SIGTERM); again to abort``, the second raises
  ``KeyboardInterrupt``. Not in a ``supervised`` child, which its parent stops (and
  kills, if need be): a SIGTERM to the whole process group, then its parent's, is one
  stop.

How the processor's Spark queries stop once asked is ``processor.stopping``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any


class StartInterrupted(BaseException):  # noqa: N818 (like KeyboardInterrupt, not an error)
    """A stop asked for while the run was starting: the start-up is given up at once.

    A BaseException, so that no ``except Exception`` on the way (py4j's, PySpark's)
    turns it into an error of its own.
    """


class StopFlag:
    """Set by SIGINT/SIGTERM (or by code); the loop checks it between steps.

    The flag is a plain attribute, not a ``threading.Event``: the signal handler sets
    it, and an event's lock taken in a handler can deadlock the thread it interrupted.

    Attributes:
        reason: Name of the signal (or reason) that asked to stop, else None.
        count: How many times stop was asked; a second Ctrl-C hurries the stop.
        announce_as: With a name, a signal says so on stderr and a second one aborts.
        supervised: Stopped by its parent: SIGINT ignored, a second signal no abort.
    """

    def __init__(
        self,
        announce_as: str | None = None,
        supervised: bool = False,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        """Not set.

        Args:
            announce_as: The run's name in the line a signal prints (e.g. ``processor``);
                with it, a second signal raises ``KeyboardInterrupt``. None: signals
                only set the flag.
            supervised: For a child process its parent stops with SIGTERM: SIGINT is
                ignored (a terminal's Ctrl-C reaches the whole process group), and a
                second signal does not abort (a SIGTERM to the group, then the parent's).
            on_stop: Called in the handler of the first signal after start-up (the
                processor quiets its JVM's console); its errors are ignored. It runs in
                the interrupted thread: it must take no lock that thread may hold.
        """
        self.reason: str | None = None
        self.count = 0
        self.announce_as = announce_as
        self.supervised = supervised
        self._on_stop = on_stop
        self._starting = False

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        """Signal handler."""
        name = signal.Signals(signum).name
        again = self.is_set()
        if again and self.announce_as is not None and not self.supervised:
            raise KeyboardInterrupt
        self.set(name)
        if self._on_stop is not None and not again and not self._starting:
            # Not while starting: the start is given up, and what the handler writes may
            # still go where the starting JVM's output goes. A failure must not lose the stop.
            with contextlib.suppress(Exception):
                self._on_stop()
        if self.announce_as is not None and not again:
            # Straight to the file descriptor: the signal may arrive while the main
            # thread is writing to sys.stderr, whose buffer a second writer would break.
            abort = "" if self.supervised else "; again to abort"
            os.write(2, f"[{self.announce_as}] stopping ({name}){abort}\n".encode())
        if self._starting:
            self._starting = False  # raised once: the handlers on the way out may run freely
            raise StartInterrupted

    def set(self, reason: str) -> None:
        """Ask the loop to stop."""
        self.reason = self.reason or reason
        self.count += 1

    def is_set(self) -> bool:
        """True once stop was asked."""
        return self.reason is not None

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s`` seconds, waking within 50 ms once stop is asked.

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
    def starting(self) -> Iterator[None]:
        """Within this block a signal raises ``StartInterrupted`` (at once if asked already).

        Raises:
            StartInterrupted: A stop was asked for before or during the block.
        """
        if self.is_set():
            raise StartInterrupted
        self._starting = True
        try:
            yield
        finally:
            self._starting = False

    @contextlib.contextmanager
    def unbroken(self) -> Iterator[None]:
        """A step of ``starting()`` that a signal does not cut: its stop comes at the end.

        Raises:
            StartInterrupted: A stop was asked for during the step.
        """
        was, self._starting = self._starting, False
        try:
            yield
        finally:
            self._starting = was
        if was and self.is_set():
            self._starting = False
            raise StartInterrupted

    def install(self) -> None:
        """Handle SIGTERM, and SIGINT unless ``supervised``, from now on (main thread).

        Call it again once a SparkContext exists: PySpark installs its own SIGINT
        handler (cancel every job, raise KeyboardInterrupt anywhere).
        """
        signal.signal(signal.SIGINT, signal.SIG_IGN if self.supervised else self)
        signal.signal(signal.SIGTERM, self)


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
