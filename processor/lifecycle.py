"""A processor run's watch: its failed queries, the child app beside it, the wait for a stop.

How the run is asked to stop is ``common.stop_signals``; how its queries stop is
``processor.stopping``.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

from pyspark.sql.streaming import StreamingQuery

from common import cli
from common.deadline import NoAnswerInTime, within
from common.stop_signals import StopFlag
from processor.connect_server import NotAnsweringError

log = logging.getLogger("iot_pulse.processor")
T = TypeVar("T")
CHILD_STOP_TIMEOUT_S = 30.0


def say(msg: str, who: str = "processor") -> None:
    """Say one progress line on the console, e.g. ``[processor] running ...``."""
    cli.console.info("[%s] %s", who, msg)


def first_stopped(queries: Sequence[StreamingQuery]) -> str | None:
    """The first query that stopped, in one line (its full error goes to the log)."""
    for q in queries:
        if q.isActive:
            continue
        exc = q.exception()
        if exc is None:
            return f"query {q.name} stopped by itself"
        log.error("query %s failed:\n%s", q.name, exc)
        return f"query {q.name} failed: {cli.first_line(exc)} ({cli.full_trace_hint()})"
    return None


# What a held child app reads on its stdin before it starts its work (``wait_for_release``).
RELEASE_LINE = b"start\n"


class ChildApp:
    """A Spark application that the run starts beside its own, as a child process.

    Its output goes to this process's stderr; it stops with this process (SIGTERM,
    then SIGKILL after ``CHILD_STOP_TIMEOUT_S``). The child is started first (before
    the run lowers its own priority, which a child would inherit) but held: it starts
    its work when ``release`` is called, so that two JVMs do not start on the same
    cores at once.
    """

    def __init__(self, name: str, argv: Sequence[str]) -> None:
        """Start ``python <argv>`` with this process's environment, in its process group.

        Args:
            name: What to call it in messages.
            argv: The interpreter's arguments, e.g. ``["-m", "processor", "realtime"]``;
                the child must stop on SIGTERM, ignore SIGINT (``StopFlag.install``) and
                call ``wait_for_release`` before its work.
        """
        self.name = name
        self.proc = subprocess.Popen([sys.executable, *argv], stdin=subprocess.PIPE)
        self._asked = False
        log.info("started %s (pid %d), held until released", name, self.proc.pid)

    def release(self) -> None:
        """Let the child start its work (once; nothing if it has ended)."""
        stdin = self.proc.stdin
        if stdin is None or stdin.closed:
            return
        with contextlib.suppress(OSError):  # the child ended: its own failure says why
            stdin.write(RELEASE_LINE)
            stdin.flush()
        with contextlib.suppress(OSError):
            stdin.close()

    def failure(self) -> str | None:
        """Why the child ended, in one line, if it did."""
        code = self.proc.poll()
        if code is None:
            return None
        return f"{self.name} exited with code {code} (its error is above)"

    def ask_to_stop(self) -> None:
        """Send the child its SIGTERM (once: a second one would abort it), not waiting."""
        if not self._asked and self.proc.poll() is None:
            self._asked = True
            self.proc.terminate()

    def stop(self) -> None:
        """Ask the child to stop, and wait for it."""
        if self.proc.poll() is None:
            self._stop_running()
        if self.proc.stdin is not None:
            self.proc.stdin.close()

    def _stop_running(self) -> None:
        self.ask_to_stop()
        try:
            self.proc.wait(CHILD_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop in %.0f s: killed", self.name, CHILD_STOP_TIMEOUT_S)
            self.proc.kill()
            self.proc.wait()


def wait_for_release() -> bool:
    """In a ``ChildApp``: wait until the parent releases it; False if the parent never will.

    Call inside ``StopFlag.starting``: the parent's SIGTERM ends the wait at once.
    """
    return sys.stdin.buffer.readline() == RELEASE_LINE


def wait_for_stop(
    queries: Sequence[StreamingQuery],
    stop: StopFlag,
    child: ChildApp | None = None,
    answer_within_s: float | None = None,
) -> str | None:
    """Block until a stop is asked for, or a query (or ``child``) stops by itself or fails.

    Args:
        queries: The running queries.
        stop: Set by Ctrl-C or SIGTERM.
        child: An application run beside this one, if any.
        answer_within_s: How long one look at the queries may take (a Spark Connect
            server's answers); None: no limit.

    Returns:
        What stopped, in one line; None when the stop was asked for.

    Raises:
        NotAnsweringError: A look at the queries took longer than ``answer_within_s``.
    """
    failure = None
    # A stop asked for wins: a query that ends while the run is being stopped (a signal
    # may reach more than this process) is no failure of the run.
    while failure is None and not stop.wait(1.0):
        failure = answered_within(answer_within_s, lambda: first_stopped(queries)) or (
            child.failure() if child else None
        )
    return failure


def answered_within(seconds: float | None, ask: Callable[[], T]) -> T:
    """What ``ask()`` returns or raises, if it returns within ``seconds`` (None: no limit).

    A call to a Spark Connect server that hangs (its process stopped, its host gone with
    its packets dropped) waits for ever: gRPC's calls have no deadline, and PySpark's
    client sets none. Here the call goes on in a daemon thread, until its channel closes.

    Raises:
        NotAnsweringError: ``ask()`` had not returned after ``seconds``.
    """
    if seconds is None:
        return ask()
    try:
        return within(seconds, ask, "ask-spark")
    except NoAnswerInTime:
        raise NotAnsweringError(f"Spark did not answer within {seconds:g} s") from None
