"""Run a command line as ``python -m MODULE ARGS`` would: in this process, or as its own.

Starting Python again costs a test 1 to 2 s (pydantic, pandas and pyspark are imported
each time); running the same ``__main__`` in the test's process costs milliseconds. Both
give a ``CliRun``, so that a test can check the two agree (``tests/common/test_cli.py``).
"""

from __future__ import annotations

import logging
import os
import runpy
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from common import cli

ROOT = Path(__file__).resolve().parents[1]
# The handlers a CLI may install (common.stop_signals.StopFlag.install): put back after a run.
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True)
class CliRun:
    """What one run of a command line did.

    Attributes:
        code: The exit code.
        out: Everything written to stdout.
        err: Everything written to stderr.
        elapsed_s: Wall-clock seconds, from the start to the exit.
    """

    code: int
    out: str
    err: str
    elapsed_s: float


def _exit_code(exc: SystemExit) -> int:
    """The exit code Python gives ``raise SystemExit(code)``: None is 0; ints only here."""
    if exc.code is None:
        return 0
    assert isinstance(exc.code, int), f"SystemExit({exc.code!r}): not an exit code"
    return exc.code


def _environment(home: Path, env: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment without its ``IOT_*`` variables; state under ``home``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")}
    return clean | {"IOT_PULSE_HOME": str(home)} | dict(env)


def run_in_process(
    capture: pytest.CaptureFixture[str],
    command: str | Callable[[], int],
    *args: str,
    home: Path,
    cwd: Path,
    service: str = "",
    env: Mapping[str, str] | None = None,
) -> CliRun:
    """Run ``python -m command args`` (or ``cli.run(command, service)``) in this process.

    A module name runs the module's ``__main__`` with ``runpy``, as ``python -m`` does,
    with ``sys.argv`` set: so ``common.cli.run`` opens the service's log file, calls its
    ``main`` and raises ``SystemExit`` with its code, here caught. A callable runs as
    ``python -c "from common import cli; cli.run(command, service)"`` would.

    The environment is the caller's without its ``IOT_*`` variables, plus ``IOT_PULSE_HOME``
    and ``env``, as ``run_python`` gives a child process. What the run changes in this
    process is put back after it: the environment, the current directory, ``sys.argv``,
    the root logger's handlers (closed) and level, the SIGINT and SIGTERM handlers and
    ``common.cli``'s log file.

    Args:
        capture: The test's ``capfd`` (or ``capsys``); what it held before is dropped.
        command: A module (``"producer"``) or a CLI's ``main``.
        *args: The command-line arguments.
        home: ``IOT_PULSE_HOME``: the state folder, where the logs go.
        cwd: The current directory during the run (settings read ``.env`` there).
        service: With a callable: the name of its log file.
        env: More environment variables.

    Returns:
        The exit code, stdout, stderr and time of the run.
    """
    assert isinstance(command, str) or service, "a callable needs the service it runs as"
    capture.readouterr()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    signals = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    environ = dict(os.environ)
    start = time.monotonic()
    with pytest.MonkeyPatch.context() as mp:
        wanted = _environment(home, env or {})
        for key in set(os.environ) - set(wanted):
            mp.delenv(key)
        for key, value in wanted.items():
            if os.environ.get(key) != value:
                mp.setenv(key, value)
        mp.chdir(cwd)
        mp.setattr(cli, "_log_file", None)
        try:
            if isinstance(command, str):
                # runpy sets sys.argv[0] to the module's file, as python -m does.
                mp.setattr(sys, "argv", ["-m", *args])
                with warnings.catch_warnings():
                    # "'X.__main__' found in sys.modules": a test imported its main.
                    warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
                    runpy.run_module(command, run_name="__main__", alter_sys=True)
            else:
                mp.setattr(sys, "argv", ["-c", *args])
                cli.run(command, service)
        except SystemExit as exc:
            code = _exit_code(exc)
        else:
            raise AssertionError(f"{command} returned instead of exiting")
        finally:
            elapsed = time.monotonic() - start
            for handler in root.handlers:
                if handler not in handlers:
                    root.removeHandler(handler)
                    handler.close()
            root.setLevel(level)
            for sig, handler in signals.items():
                signal.signal(sig, handler)
    for key in set(os.environ) - set(environ):  # what the command itself set
        del os.environ[key]
    os.environ.update(environ)
    out, err = capture.readouterr()
    return CliRun(code, out, err, elapsed)


def run_python(
    *args: str, home: Path, cwd: Path, env: Mapping[str, str] | None = None, timeout_s: float = 120
) -> CliRun:
    """Run ``python args`` (``-m MODULE ...`` or ``-c SCRIPT``) as its own process.

    With this tree first on its path, whatever the current directory: the project is also
    installed in the virtual environment (editable, maybe from another checkout), and a
    test must run the code it was checked out with.

    Args:
        *args: Python's arguments.
        home: ``IOT_PULSE_HOME``: the state folder, where the logs go.
        cwd: The current directory of the process.
        env: More environment variables.
        timeout_s: Longest run.

    Returns:
        The exit code, stdout, stderr and time of the run.
    """
    child_env = _environment(home, env or {})
    child_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), child_env.get("PYTHONPATH")) if p
    )
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=child_env, capture_output=True, text=True,
        timeout=timeout_s, check=False,
    )  # fmt: skip
    return CliRun(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)
