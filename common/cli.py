"""How every command line talks and fails: lines on stderr, the whole story in a log file.

Neither holds a secret of a shape ``common.redact`` knows, whatever quoted it.

Everything a command says goes through ``logging``. The ``console`` logger's lines
(progress, warnings, ``error: ...``) are printed on stderr as they are, and land in the
log file too; every other logger writes to the log file only, never to the terminal.

``run(main, service)`` calls a CLI's ``main`` and exits with its code. A ``CliError``
(an expected failure the user can fix) prints ``error: <its message>``; anything else
prints one line naming the log file, ``<state dir>/logs/<service>.log``, which holds
the full traceback.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlparse

from common.paths import state_dir
from common.redact import redact

log = logging.getLogger("iot_pulse")
# What a command says to its user: each record's message is one line on stderr.
console = logging.getLogger("iot_pulse.console")

LOG_DIR_ENV = "IOT_LOG_DIR"
BAD_INPUT = 2  # settings, flags or input files the user must fix
FAILED = 1  # the command ran and failed
INTERRUPTED = 130  # Ctrl-C, as a shell reports it
# A log file over this size is moved aside (to <name>.log.1) when a run starts.
MAX_LOG_BYTES = 20 * 1024 * 1024
_MAX_LINE = 500
# Colour and cursor codes (ESC [ ... letter), as delta-rs puts in its error chains.
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# The line of a gRPC error's repr that says what happened.
_GRPC_DETAILS = re.compile(r'^\s*details = "(.*)"$', re.MULTILINE)
# How a gRPC error's repr begins (``<_InactiveRpcError of RPC that terminated with:``).
_GRPC_REPR = re.compile(r"<_\w+ of RPC that terminated with:")
_log_file: Path | None = None  # set by open_log


class _ConsoleHandler(logging.Handler):
    """Writes each record's message to ``sys.stderr``, flushed at once.

    It looks ``sys.stderr`` up at each record, so that a redirect (or pytest's capture)
    made after it was set up is followed.
    """

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(redact(record.getMessage()) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging's own contract: report, never raise
            self.handleError(record)


class _RedactingFormatter(logging.Formatter):
    """A log file's lines, messages and tracebacks alike, with secrets cut out (``redact``)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def _not_console(record: logging.LogRecord) -> bool:
    """Whether a record is not the console's own (which it has printed already)."""
    return not record.name.startswith(console.name)


console.addHandler(_ConsoleHandler())
console.setLevel(logging.INFO)


class CliError(Exception):
    """An expected failure: its message is the one line the user sees.

    Args:
        message: What went wrong and what to do; no secrets.
        exit_code: ``BAD_INPUT`` or ``FAILED``.
    """

    def __init__(self, message: str, exit_code: int = FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ArgumentParser(argparse.ArgumentParser):
    """``argparse`` whose usage errors are one line (``--help`` still shows everything)."""

    def error(self, message: str) -> NoReturn:
        """Print ``error: <prog>: <message>`` and exit with ``BAD_INPUT``."""
        message = _unplaced_values_hidden(message)
        console.error("error: %s: %s (see %s --help)", self.prog, one_line(message), self.prog)
        raise SystemExit(BAD_INPUT)


_UNRECOGNIZED = "unrecognized arguments: "


def _unplaced_values_hidden(message: str) -> str:
    """Argparse's message with the values of flags it does not know left out.

    A misspelt flag's value may be a password or a connection string; the flags
    themselves are what the user needs to see.
    """
    if not message.startswith(_UNRECOGNIZED):
        return message
    shown, after_flag = [], False
    for token in message.removeprefix(_UNRECOGNIZED).split(" "):
        if token.startswith("-"):
            flag, _, value = token.partition("=")
            shown.append(f"{flag}=(value hidden)" if value else flag)
            after_flag = not value
        else:
            shown.append("(value hidden)" if after_flag else token)
            after_flag = False
    return _UNRECOGNIZED + " ".join(shown)


def port(text: str) -> int:
    """An argparse ``type``: a TCP port, 1 to 65535."""
    value = int(text)
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"{value} is not a port: give 1 to 65535")
    return value


def at_least(low: float, kind: type[int] | type[float] = float) -> Callable[[str], float]:
    """An argparse ``type``: a finite number no lower than ``low`` (of ``kind``)."""

    def parse(text: str) -> float:
        value = kind(text)
        if not math.isfinite(value) or value < low:
            raise argparse.ArgumentTypeError(f"{text} is not a number of at least {low:g}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its message
    return parse


def one_line(text: str) -> str:
    """``text`` on one line, cut to 500 chars.

    Terminal colour codes go; lines and runs of whitespace become single spaces.
    """
    flat = " ".join(_ANSI_ESCAPE.sub("", text).split())
    return flat if len(flat) <= _MAX_LINE else flat[: _MAX_LINE - 3] + "..."


def settings_error(exc: ValueError | FileNotFoundError) -> int:
    """Report settings that failed to load (``load_settings`` says what, in one line).

    Returns:
        ``BAD_INPUT``.
    """
    return error(f"invalid settings: {exc}", BAD_INPUT)


def local_path(location: str) -> Path | None:
    """The local path of a folder setting: a path or a ``file:`` URI; None for remote URIs.

    ``abfss://``, ``s3a://`` and other file systems are left to their clients to check.
    """
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return Path(parsed.path)
    if len(parsed.scheme) > 1:  # one letter is a Windows drive, not a scheme
        return None
    return Path(location).expanduser()


def make_writable_folder(folder: Path) -> None:
    """Create ``folder`` (and its parents) and check a file can be written and removed there.

    Raises:
        OSError: It is a file, lies inside one, or cannot be created or written; the
            caller says which setting to fix.
    """
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".iot-pulse-write-check-{os.getpid()}"
    probe.touch()
    probe.unlink()


def log_path(service: str) -> Path:
    """Where ``service`` (e.g. ``processor``) keeps its log: ``<log dir>/<service>.log``.

    The folder is ``$IOT_LOG_DIR`` if set (the demo's, say), else ``<state dir>/logs``.
    """
    folder = os.environ.get(LOG_DIR_ENV)
    return (Path(folder) if folder else state_dir() / "logs") / f"{service}.log"


def open_log(service: str) -> Path | None:
    """Send Python's ``logging`` (INFO and up) to the service's log file, appending.

    A file over ``MAX_LOG_BYTES`` is first moved to ``<name>.log.1``. Returns the
    file, or None when it cannot be written (e.g. a read-only container), in which
    case logging goes to stderr.
    """
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    try:
        path = log_path(service)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file() and path.stat().st_size > MAX_LOG_BYTES:
            path.replace(path.with_name(path.name + ".1"))
        handler: logging.Handler = logging.FileHandler(path, encoding="utf-8")
    except OSError:
        path, handler = None, logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)
        handler.addFilter(_not_console)
    global _log_file
    _log_file = path
    formatter = _RedactingFormatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%Y-%m-%dT%H:%M:%SZ"
    )
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root.addHandler(handler)
    return path


def log_file() -> Path | None:
    """The log file ``open_log`` opened in this process, if any."""
    return _log_file


def first_line(exc: BaseException) -> str:
    """An error's first line, for a one-line message (its class name if it has no text).

    A gRPC error (a Spark Connect call's, raw or wrapped by PySpark) reads as a many-line
    repr, on its own or at the end of a message; the ``details`` in it stand for it.
    """
    text = str(exc).strip()
    if (rpc := _GRPC_REPR.search(text)) and (details := _GRPC_DETAILS.search(text, rpc.start())):
        text = text[: rpc.start()] + details.group(1)
    return one_line(text.splitlines()[0]) if text else type(exc).__name__


def full_trace_hint() -> str:
    """Where the user finds the details: the log file, if one is open."""
    return f"the full trace is in {_log_file}" if _log_file else "the full trace is above"


def error(message: str, exit_code: int = FAILED) -> int:
    """Say ``error: <message>`` in one line on the console (so in the log); return the code."""
    console.error("error: %s", one_line(message))
    return exit_code


def fail(exc: CliError) -> int:
    """Report a ``CliError`` (``error``), its cause's trace to the log; return its exit code."""
    if exc.__cause__ is not None and _log_file is not None:
        log.error("caused by", exc_info=exc.__cause__)
    return error(str(exc), exc.exit_code)


def flag_names(argv: list[str]) -> list[str]:
    """The ``--flags`` of a command line without their values, safe to log.

    A value may be a secret (``--kafka-connection-string ...``), and a value that follows
    its flag cannot be told from a positional argument: only flag names are kept.
    """
    return [arg.split("=", 1)[0] for arg in argv if arg.startswith("--")]


def given_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The optional flags that were given on a command line, as a child process's argv.

    Flags left at their default are left out; boolean flags come back as ``--flag`` or
    ``--no-flag``. Positional arguments are not included.
    """
    out: list[str] = []
    for action in parser._actions:
        value = getattr(args, action.dest, None)
        if not action.option_strings or value == action.default or action.dest == "help":
            continue
        flag = action.option_strings[0]
        if isinstance(action, argparse.BooleanOptionalAction):
            out.append(flag if value else "--no-" + flag.removeprefix("--"))
        else:
            out += [flag, str(value)]
    return out


def run(main: Callable[[], int], service: str) -> NoReturn:
    """Run a CLI's ``main`` and exit with its code; fail in one line.

    Args:
        main: The command; returns its exit code.
        service: Names the log file (``log_path``).
    """
    open_log(service)
    log.info("start: %s %s (pid %d)", service, " ".join(flag_names(sys.argv[1:])), os.getpid())
    try:
        code = main()
    except CliError as exc:
        code = fail(exc)
    except KeyboardInterrupt:
        console.info("interrupted")
        code = INTERRUPTED
    except Exception as exc:
        log.exception("unexpected error")
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        console.error("error: %s: %s (%s)", type(exc).__name__, one_line(first), full_trace_hint())
        code = FAILED
    log.info("exit %d", code)
    logging.shutdown()
    raise SystemExit(code)
