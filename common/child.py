"""A service run as a child process: in its own process group, its output in a log file.

The demo, the load test and the benchmarks start the processor and the producer this
way. Stopping one sends SIGTERM to the child alone (it stops what it started: PySpark
shuts its JVM down), waits, then kills whatever is left of its group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from common.paths import PROJECT_ROOT


class Child:
    """``python <args>`` from the project root, in a process group of its own.

    Attributes:
        name: What it is, for messages ("processor").
        log: The file its stdout and stderr go to (appended).
        proc: The process.
    """

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path) -> None:
        """Start it.

        Args:
            name: What it is, for messages.
            args: The arguments after ``python``, e.g. ``["-m", "producer"]``.
            env: Its whole environment.
            log: Its output file, appended to.
        """
        self.name, self.log = name, log
        self._asked = False
        self._handle = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, *args], cwd=PROJECT_ROOT, env=env, stdout=self._handle,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def tail(self, chars: int = 3000) -> str:
        """The end of its log."""
        return self.log.read_text(errors="replace")[-chars:]

    def ask_to_stop(self) -> None:
        """Send the child its SIGTERM without waiting; once, as a second one aborts a service."""
        if not self._asked and not self._handle.closed and self.proc.poll() is None:
            self._asked = True
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout_s: float, say: Callable[[str], None] | None = None) -> int:
        """SIGTERM the child, wait up to ``timeout_s``, then SIGKILL what is left of its group.

        Stopping it again returns the same exit code (its pid may be another's by then).

        Args:
            timeout_s: How long it may take to stop.
            say: Told when it did not stop in time.

        Returns:
            Its exit code (negative: the signal that ended it).
        """
        if self._handle.closed:
            return int(self.proc.returncode)
        if self.proc.poll() is None:
            self.ask_to_stop()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                if say is not None:
                    say(f"{self.name} did not stop in {timeout_s:.0f} s; killing it")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        code = self.proc.wait()
        self._handle.close()
        return code
