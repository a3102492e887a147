"""A classic session's JVM stderr, through a pipe the processor copies: a stop can quiet it.

The driver JVM of a classic session is a child of the processor and writes to the
stderr it inherits: log4j's console events (one line each, ``LOG4J2_CONFIG``) and what
Java and Scala print there themselves, such as the traces of failed futures that
Spark's block manager prints in bursts when it stops while block removals run. The
processor starts the JVM with a pipe as its stderr (``JvmStderr.capture``), and a
thread copies the pipe to the terminal. From ``quiet`` on (a deliberate stop) the
terminal gets only FATAL events; the other events are left out (the log file has them
already, with their traces) and everything else the JVM prints goes to the log file.
The processor's own output keeps the terminal. No call into the JVM: through Spark
Connect there is no JVM here, and nothing to capture.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from common.cli import console

# A log4j console event (LOG4J2_CONFIG's console pattern): time, level, logger.
_EVENT = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ")


class JvmStderr:
    """Where the JVM's stderr goes: the terminal, then (``quiet``) the log file."""

    def __init__(self, log_file: Path | None) -> None:
        """Copy to the terminal until ``quiet``; then to ``log_file`` (None: nowhere)."""
        self._log_file = log_file
        self._log: BinaryIO | None = None
        self._quiet = False
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        """Give the processes started in this block (the JVM) a pipe as their stderr."""
        read_fd, write_fd = os.pipe()
        sys.stderr.flush()
        terminal = os.dup(2)
        os.dup2(write_fd, 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(terminal, 2)
            os.close(terminal)
            os.close(write_fd)  # the JVM holds its copy; the pipe ends when the JVM does
            threading.Thread(
                target=self._copy, args=(read_fd,), name="jvm-stderr", daemon=True
            ).start()

    def quiet(self) -> None:
        """From now on: FATAL events to the terminal, the JVM's own prints to the log file.

        A log file that cannot be opened (its folder removed under the run) leaves the
        JVM's prints on the terminal, and says so.
        """
        with self._lock:
            if self._quiet:
                return
            if self._log_file is not None:
                try:
                    self._log = self._log_file.open("ab")
                except OSError as exc:
                    console.warning("[processor] the JVM's stderr stays the console: %s", exc)
                    return
            self._quiet = True

    def _copy(self, read_fd: int) -> None:
        with os.fdopen(read_fd, "rb") as pipe:
            for line in pipe:
                self._route(line)

    def _route(self, line: bytes) -> None:
        with self._lock:
            event = _EVENT.match(line)
            if not self._quiet or (event is not None and event.group(1) == b"FATAL"):
                _write_all(2, line)
            elif event is None and self._log is not None:
                self._log.write(line)
                self._log.flush()


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]
