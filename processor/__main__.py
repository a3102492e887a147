"""Command line: ``python -m processor [run|realtime|devices|maintain|rebuild Q...] [flags]``."""

from __future__ import annotations

import argparse
import logging
import os

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from common import cli
from common.jars import ConnectorJarsMissingError
from common.lake import Query, Table
from common.settings import load_settings, service_parser
from common.stop_signals import StartInterrupted, StopFlag
from processor import driver_jvm, health, realtime_app
from processor.checkpoints import CheckpointSourcesError
from processor.connect_server import (
    ANSWER_WITHIN_S,
    NotAnsweringError,
    close_channel,
    remote_server,
    remote_url,
    server_lost,
    server_unavailable,
)
from processor.driver_jvm import end_cut_short_jvm, stop_session, went_away
from processor.evolution import REBUILDABLE
from processor.lake_setup import prepare_lake, write_devices
from processor.library_logs import quiet_libraries
from processor.lifecycle import (
    ChildApp,
    say,
    wait_for_release,
    wait_for_stop,
)
from processor.maintenance import maintain
from processor.metrics import DRAIN_TIMEOUT_S, MetricsListener
from processor.pipeline import (
    rebuild,
    restarted_for_new_schemas,
    run_available_now,
    stages,
    start_all,
)
from processor.preflight import preflight
from processor.queries import tier_interval, tier_of
from processor.readers import TableUnreadableError
from processor.session import build_session, is_remote, quiet_console
from processor.settings import ProcessorSettings
from processor.stopping import abandon, stop_queries
from processor.tables import TableSchemaError

log = logging.getLogger("iot_pulse.processor")
EPILOG = (
    "Exit codes: 0 done (or stopped by Ctrl-C / SIGTERM), 1 failed (the broker, the lake, "
    "a query), 2 invalid settings, 130 an available-now run, a rebuild, devices or maintain "
    "stopped before the end. "
    "Spark's and Kafka's warnings and every full trace go to <state dir>/logs/processor.log."
)


def _session(settings: ProcessorSettings) -> SparkSession:
    spark = build_session(settings, log_file=cli.log_file())
    where = (
        f"Spark Connect {remote_server(remote_url(settings))}"
        if is_remote(spark)
        else (f"master {spark.sparkContext.master}")
    )
    say(f"Spark {spark.version}, {where}")
    if cli.log_file():
        say(f"warnings and full traces: {cli.log_file()}")
    return spark


def _run(settings: ProcessorSettings, stop: StopFlag, child: list[str], partitions: int) -> int:
    """Run the main application, and the real-time alerts beside it if wanted.

    Args:
        settings: Processor settings.
        stop: Set by Ctrl-C or SIGTERM.
        child: The real-time app's command line (``python -m processor realtime ...``).
        partitions: The events topic's partitions.
    """
    if not stages(settings):  # nothing but the real-time alerts: run them here
        return realtime_app.run(settings, partitions, stop)
    realtime = None
    if realtime_app.wanted(settings):
        realtime = ChildApp("the real-time alerts app", child)
        # Before the JVM starts, which inherits it: the alerts' latency comes first.
        os.nice(settings.realtime_yield_niceness)
    try:
        return _run_main(settings, stop, realtime)
    finally:
        if realtime is not None:  # stopped already, unless the run failed to start
            realtime.stop()


def _run_main(settings: ProcessorSettings, stop: StopFlag, realtime: ChildApp | None) -> int:
    with stop.starting():  # nothing runs yet: a stop gives the JVM's start and the tables up
        spark = _session(settings)
        stop.install()  # again: the SparkContext replaced the SIGINT handler
        try:
            prepare_lake(spark, settings)
        except Exception as exc:
            if is_remote(spark):  # a server keeps a session; a classic one ends with us
                _give_up(spark, settings, exc)
            raise
    listener = MetricsListener(
        spark,
        settings.lake.table(Table.OPS_PIPELINE_METRICS),
        settings.metrics_flush_s,
        log=settings.log_progress,
    )
    try:
        spark.streams.addListener(listener)
        return _run_queries(spark, settings, stop, realtime, listener)
    except BaseException as exc:
        _give_up(spark, settings, exc, listener=listener)
        raise


def _give_up(
    spark: SparkSession,
    settings: ProcessorSettings,
    exc: BaseException,
    command: str = "run",
    listener: MetricsListener | None = None,
) -> None:
    """After ``exc``: give Spark up (``abandon``); a lost Spark Connect server is one line.

    Raises:
        CliError: ``exc`` is a Spark Connect call's ``UNAVAILABLE`` and the server does
            not answer, or the server did not answer in time (``server_lost``).
    """
    remote = remote_url(settings)
    hung = isinstance(exc, NotAnsweringError)
    if hung:  # its calls wait for ever: closing the channel ends them, the listener's too
        close_channel(spark)
    if listener is not None:
        listener.close(write_rest=False)  # first: no flush of its own while Spark stops
    if hung:
        raise cli.CliError(server_lost(remote, command)) from exc
    answered = abandon(spark, remote, listener, hurry=isinstance(exc, KeyboardInterrupt))
    if not answered and server_unavailable(exc):
        raise cli.CliError(server_lost(remote, command)) from exc


def _run_queries(
    spark: SparkSession,
    settings: ProcessorSettings,
    stop: StopFlag,
    realtime: ChildApp | None,
    listener: MetricsListener,
) -> int:
    """Run the queries ``available_now``, or until a stop or a failure; then close Spark."""
    if settings.trigger == "available_now":
        finished = run_available_now(spark, settings, should_stop=stop.is_set)
        _close(spark, [], listener)
        if not finished:
            say("stopped before all available data was processed")
            return cli.INTERRUPTED
        say("all available data processed")
        return 0
    queries = start_all(spark, settings, should_stop=stop.is_set, prepare=False)
    if realtime is not None:
        realtime.release()
    if not stop.is_set():
        bronze_every = tier_interval(settings, tier_of(Query.BRONZE, settings))
        say(
            f"running {', '.join(q.name for q in queries)}: hot path every "
            f"{settings.trigger_interval}, bronze every {bronze_every}, background every "
            f"{settings.background_trigger_interval}; lake at {settings.lake.root}"
        )
    # A server that hangs is given up (``ANSWER_WITHIN_S``); a platform's own is left be.
    within = ANSWER_WITHIN_S if remote_url(settings) else None
    failure = wait_for_stop(queries, stop, realtime, within)
    while failure is not None and _restart_for_new_schemas(spark, queries, settings):
        failure = wait_for_stop(queries, stop, realtime, within)
    if realtime is not None:
        realtime.ask_to_stop()  # it stops while this app does, not after
    _close(spark, queries, listener)
    if realtime is not None:
        realtime.stop()
    if failure is not None:
        return cli.error(failure)
    say("stopped")
    return 0


def _restart_for_new_schemas(
    spark: SparkSession, queries: list[StreamingQuery], settings: ProcessorSettings
) -> bool:
    """Start silver again in ``queries`` if it stopped on newly registered schemas."""
    for i, query in enumerate(queries):
        again = restarted_for_new_schemas(spark, query, settings)
        if again is not None:
            queries[i] = again
            return True
    return False


def _started_session(settings: ProcessorSettings, stop: StopFlag) -> SparkSession:
    """The session of a command that runs once; a stop while the JVM starts gives it up."""
    with stop.starting():
        spark = _session(settings)
        stop.install()  # again: the SparkContext replaced the SIGINT handler
    return spark


# What a command a stop ends between its steps says (``devices`` is one write).
_UNFINISHED = {
    "maintain": "stopped before every table was maintained: run it again for the rest",
    "rebuild": "stopped before the rebuild finished: run it again",
}


def _once(settings: ProcessorSettings, command: str, queries: list[str], stop: StopFlag) -> int:
    """Run ``devices``, ``maintain`` or ``rebuild`` (``queries``) once, then stop Spark.

    A stop ends ``maintain`` between tables and ``rebuild`` between queries. A signal
    sent to every process of the run stops the driver's JVM under the running command:
    that ends it too, with the same advice.
    """
    spark = _started_session(settings, stop)
    try:
        if command == "devices":
            write_devices(spark, settings)
            finished = True
        elif command == "maintain":
            finished = maintain(spark, settings, should_stop=stop.is_set)
        else:
            finished = rebuild(spark, settings, queries, should_stop=stop.is_set)
    except BaseException as exc:
        # Ctrl-C does not reach the JVM (PySpark starts it with SIGINT ignored): after
        # it, a failure is the command's own, said at once.
        if (
            isinstance(exc, Exception)
            and stop.reason not in (None, "SIGINT")
            and went_away(exc, f"while {command} ran")
        ):
            say(
                f"Spark's driver stopped with the same signal before {command} finished: "
                "run it again"
            )
            return cli.INTERRUPTED
        _give_up(spark, settings, exc, command)
        raise
    quiet_console(spark)  # the work is done: what Spark's stop prints goes to the log
    stop_session(spark)
    if not finished:
        say(_UNFINISHED[command])
        return cli.INTERRUPTED
    if command == "rebuild":
        say(f"rebuilt {', '.join(queries)}")
    return 0


def _close(spark: SparkSession, queries: list[StreamingQuery], listener: MetricsListener) -> None:
    """Stop the queries, then the listener (no callbacks during shutdown), then Spark.

    The listener is removed once it has every stopped query's last progress
    (``MetricsListener.drain``): removed at once, it lost the last micro-batches' rows.
    """
    quiet_console(spark)
    here = stop_queries(spark, queries)
    if here and not listener.drain():
        say(
            f"the last micro-batches' metrics had not arrived {DRAIN_TIMEOUT_S:.0f} s after "
            "the queries stopped: ops/pipeline_metrics lacks them"
        )
    if here:
        try:
            spark.streams.removeListener(listener)
        except Exception as exc:
            if not went_away(exc, "while the run stopped"):
                raise
            here = False
    listener.close(write_rest=here)
    if here:
        stop_session(spark)
    else:
        say(
            "Spark's driver stopped with the same signal: the micro-batches it had not "
            "finished run again at the next start, and ops/pipeline_metrics lacks the last ones"
        )


def main(argv: list[str] | None = None) -> int:
    """Parse flags, check what the run needs, and run the pipeline or a maintenance command."""
    parser = service_parser(
        ProcessorSettings,
        "python -m processor",
        "Kafka -> bronze -> silver -> gold on Delta.",
        epilog=EPILOG,
    )
    parser.add_argument(
        "command", nargs="?", default="run",
        choices=("run", "realtime", "devices", "maintain", "rebuild"),
        help=(
            "run the pipeline (default; with the real-time alerts as a second Spark app), "
            "run the real-time alerts alone, rewrite the device dimension, OPTIMIZE+VACUUM, "
            "or rebuild QUERY... from its input with a new checkpoint"
        ),
    )  # fmt: skip
    parser.add_argument(
        "targets", nargs="*", metavar="QUERY",
        help=f"with rebuild: the queries to rebuild ({', '.join(REBUILDABLE)})",
    )  # fmt: skip
    # Started by a run as its real-time app: stopped by the run's SIGTERM, not by Ctrl-C.
    parser.add_argument("--supervised", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if (args.command == "rebuild") != bool(args.targets):
        parser.error("name the queries to rebuild after rebuild, and only then")
    if unknown := sorted(set(args.targets) - set(REBUILDABLE)):
        parser.error(f"cannot rebuild {', '.join(unknown)}; choose from {', '.join(REBUILDABLE)}")
    who = realtime_app.WHO if args.command == "realtime" else "processor"
    # A signal quiets the JVM's console at once: a JVM stopped by the same signal logs errors.
    stop = StopFlag(announce_as=who, supervised=args.supervised, on_stop=driver_jvm.quiet)
    try:
        settings = load_settings(ProcessorSettings, args)
    except (ValueError, FileNotFoundError) as exc:
        return cli.settings_error(exc)
    stop.install()  # before anything starts: a signal during start-up stops it at once
    quiet_libraries()
    try:
        if args.supervised:  # a run's child app: it starts once the run's queries have
            with stop.starting():
                if not wait_for_release():
                    return 0  # the run ended before it released its child
        with stop.starting():
            partitions, settings = preflight(settings, args.command)
        if args.command == "run":
            health.mark_started()
            child = ["-m", "processor", "realtime", "--supervised", *cli.given_flags(parser, args)]
            return _run(settings, stop, child, partitions)
        if args.command == "realtime":
            return realtime_app.run(settings, partitions, stop)
        return _once(settings, args.command, args.targets, stop)
    except StartInterrupted:
        end_cut_short_jvm()  # nothing had started
        say("stopped before the start-up finished", who)
        return 0
    except cli.CliError as exc:
        return cli.fail(exc)
    except (
        ConnectorJarsMissingError,
        TableSchemaError,
        TableUnreadableError,
        CheckpointSourcesError,
    ) as exc:
        return cli.error(str(exc))


if __name__ == "__main__":
    cli.run(main, "processor")
