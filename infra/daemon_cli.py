"""The command line every local daemon shares: ``start``, ``stop`` and ``status`` on a folder.

``python -m infra.broker``, ``infra.spark_cluster``, ``infra.mqtt_broker`` and
``infra.schema_registry`` each run one daemon whose state lives in a folder
(``--data-dir``, default under the state dir). Each says how it starts (its own
``start`` subcommand and options) and may add commands; the rest is here, the same for
all four:

* ``status [--json]`` prints the daemon's description, or ``stopped (data dir ...)``,
  and exits 0 when it runs and 3 when it does not (as an init script's status does);
* ``stop`` prints ``stopped`` or ``not running`` and exits 0;
* a failure is one line, ``error: ...``, and exit 1.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from common import cli

Info = TypeVar("Info")
Handler = Callable[[argparse.Namespace], int]
NOT_RUNNING = 3  # ``status``'s exit code for a daemon that is not running


@dataclass(frozen=True)
class Daemon(Generic[Info]):
    """What the shared commands need to know of one daemon.

    Attributes:
        prog: The command, e.g. ``python -m infra.broker``.
        description: One line for ``--help``.
        default_dir: Its state folder when ``--data-dir`` is not given.
        dir_help: ``--data-dir``'s help.
        name: What it is in the help, e.g. ``the broker``.
        status: The daemon running on a folder (None: the default), else None.
        stop: Stop the daemon of a folder; True if one was running.
        describe: Lines that say where a running daemon listens (no secrets).
        errors: The exceptions that are one line for the user.
    """

    prog: str
    description: str
    default_dir: Callable[[], Path]
    dir_help: str
    name: str
    status: Callable[[Path | None], Info | None]
    stop: Callable[[Path | None], bool]
    describe: Callable[[Info], str]
    errors: tuple[type[Exception], ...]


@dataclass(frozen=True)
class Parsers:
    """The parsers a daemon adds its own commands and options to.

    Attributes:
        root: The command's parser.
        commands: Its subcommands (a daemon's own are added here).
        folder: A parent parser holding ``--data-dir``, for each subcommand.
        start: ``start``'s parser, for the daemon's options.
        stop: ``stop``'s parser.
    """

    root: argparse.ArgumentParser
    commands: argparse._SubParsersAction[cli.ArgumentParser]
    folder: cli.ArgumentParser
    start: cli.ArgumentParser
    stop: cli.ArgumentParser


def export_line(env: Mapping[str, str]) -> str:
    """``  export NAME=value ...``: the line of ``start``'s output a shell takes.

    ``eval "$(python -m infra.<daemon> start | grep '^  export ')"`` sets the variables
    that point the services at the daemon.
    """
    return "  export " + " ".join(f"{k}={v}" for k, v in env.items())


def parsers(daemon: Daemon[Any]) -> Parsers:
    """The command's parser with ``start``, ``stop`` and ``status``.

    The daemon adds ``start``'s options, and its own subcommands, and handles ``start``.
    """
    root = cli.ArgumentParser(prog=daemon.prog, description=daemon.description)
    commands = root.add_subparsers(dest="command", required=True)
    folder = cli.ArgumentParser(add_help=False)
    folder.add_argument(
        "--data-dir",
        "--dir",
        dest="data_dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=daemon.dir_help,
    )
    start = commands.add_parser("start", parents=[folder], help=f"start {daemon.name}")
    stop = commands.add_parser("stop", parents=[folder], help=f"stop {daemon.name}")
    status = commands.add_parser("status", parents=[folder], help=f"is {daemon.name} running?")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    return Parsers(root, commands, folder, start, stop)


def run(daemon: Daemon[Info], args: argparse.Namespace, handlers: Mapping[str, Handler]) -> int:
    """Run the parsed command: the daemon's own handler, else the shared one.

    Returns:
        The exit code: 0; 1 for an error of ``daemon.errors`` (printed as one line); 3
        for ``status`` of a daemon that is not running.
    """
    shared: dict[str, Handler] = {
        "status": lambda a: _status(daemon, a),
        "stop": lambda a: _stop(daemon, a),
    }
    try:
        return {**shared, **handlers}[args.command](args)
    except daemon.errors as exc:
        return cli.error(str(exc))


def _status(daemon: Daemon[Info], args: argparse.Namespace) -> int:
    info = daemon.status(args.data_dir)
    if args.json:
        payload: dict[str, Any] = {"running": info is not None}
        if info is not None and is_dataclass(info) and not isinstance(info, type):
            payload |= json.loads(json.dumps(asdict(info), default=str))
        print(json.dumps(payload, indent=2))
    elif info is None:
        print(
            f"stopped (data dir {(args.data_dir or daemon.default_dir()).expanduser().resolve()})"
        )
    else:
        print(daemon.describe(info))
    return 0 if info is not None else NOT_RUNNING


def _stop(daemon: Daemon[Any], args: argparse.Namespace) -> int:
    print("stopped" if daemon.stop(args.data_dir) else "not running")
    return 0
