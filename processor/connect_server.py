"""A Spark Connect server: where it is, whether it answers, and a run that loses it.

PySpark's client retries a server that does not answer for ten minutes and more, and
waits for ever on one that hangs. The processor checks the server at start-up
(``check_connect_server``), bounds the retries once it has answered
(``bound_connect_retries``), and says in one line that it stopped answering
(``server_lost``).
"""

from __future__ import annotations

import os
import socket
from typing import cast
from urllib.parse import urlparse

from pyspark.sql import SparkSession

from common.cli import CliError
from processor.settings import ProcessorSettings


def remote_url(settings: ProcessorSettings) -> str:
    """The Spark Connect server to run through (``sc://host:port``); empty: a classic session."""
    remote = settings.remote.get_secret_value() if settings.remote is not None else ""
    return remote or os.environ.get("SPARK_REMOTE", "")


def remote_server(url: str) -> str:
    """The ``host:port`` of a Spark Connect URL, without its parameters (a token among them)."""
    where = urlparse(url)
    try:
        port = where.port or CONNECT_DEFAULT_PORT
    except ValueError:  # not a number: the client refuses it with its own message
        port = CONNECT_DEFAULT_PORT
    return f"{where.hostname or 'localhost'}:{port}"


# How long the Spark Connect server has to accept a connection at start-up.
CONNECT_TIMEOUT_S = 10.0
# Spark Connect's port when the URL names none.
CONNECT_DEFAULT_PORT = 15002


def check_connect_server(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Check that a Spark Connect server answers at ``url`` (``sc://host:port``).

    PySpark's client retries a server that does not answer for about ten minutes; this
    says so within ``timeout_s``: nothing listens there, or what listens does not speak
    gRPC (the channel never becomes ready).

    Raises:
        CliError: Nothing answers there, in one line with what to check.
    """
    import grpc

    server = remote_server(url)
    host, port = server.rsplit(":", 1)
    check = (
        f"check {ProcessorSettings.env_name('remote')} (--remote) or SPARK_REMOTE, and that the "
        "server is up"
    )
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise CliError(
            f"the Spark Connect server {server} did not answer ({exc.strerror or exc}): {check}"
        ) from None
    from pyspark.sql.connect.client import DefaultChannelBuilder

    channel = DefaultChannelBuilder(url).toChannel()  # as the client builds it: TLS, token
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout_s)
    except grpc.FutureTimeoutError:
        raise CliError(
            f"the Spark Connect server {server} took the connection but did not answer as a "
            f"Spark Connect (gRPC) server within {timeout_s:g} s: {check}"
        ) from None
    finally:
        channel.close()


# PySpark's retries of a call that a running run's Spark Connect server does not answer:
# waits of 0.05, 0.2, 0.8, 3.2 and 5 s (the last two with up to 0.5 s more), about 10 s
# in all; a delay the server asks for is cut to the last wait. Closing the channel then
# waits up to 10 s more for calls in flight.
RUNNING_MAX_RETRIES, RUNNING_MAX_BACKOFF_MS = 5, 5_000
# How long a running processor waits for a Spark Connect server's answer about its
# queries (a look that takes milliseconds) before it gives up a server that hangs: its
# process stopped, or its host gone with the packets to it dropped.
ANSWER_WITHIN_S = 10.0


def bound_connect_retries(spark: SparkSession) -> None:
    """Give up a Spark Connect server (``--remote``) that stops answering within about 10 s.

    PySpark's client retries a call to a server that does not answer for ten minutes and
    more, long enough for a cluster to start, which a session's first calls may need.
    Once the server has answered, a run's queries run on it and end with it, and a run or
    command that waited ten minutes would say nothing all that time. From this call on,
    every call of the session (the queries' starts and polls, the listener's events, the
    writes) fails after ``RUNNING_MAX_RETRIES`` retries: an error comes back at once when
    the server's process or port is gone. Calls to a server that hangs wait (gRPC's calls
    have no deadline): the run's look at its queries is bounded (``ANSWER_WITHIN_S``).
    """
    from pyspark.sql.connect.client.retries import DefaultPolicy
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    client = cast(ConnectSession, spark).client
    policy = DefaultPolicy(
        max_retries=RUNNING_MAX_RETRIES,
        max_backoff=RUNNING_MAX_BACKOFF_MS,
        max_server_retry_delay=RUNNING_MAX_BACKOFF_MS,
    )
    client.set_retry_policies([policy])


class NotAnsweringError(RuntimeError):
    """A call to Spark (a Spark Connect server) had not returned within its time."""


def server_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it came from) is a Spark Connect call's ``UNAVAILABLE``."""
    import grpc

    seen: BaseException | None = exc
    while seen is not None:
        code = getattr(seen, "getGrpcStatusCode", None) or getattr(seen, "code", None)
        if callable(code) and code() == grpc.StatusCode.UNAVAILABLE:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def close_channel(spark: SparkSession) -> None:
    """Close a Spark Connect session's channel without a call to its server (it is gone).

    Unclosed, PySpark's exit handler calls the server twice more, each call waiting out
    its retries.
    """
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    cast(ConnectSession, spark).client.close()


def server_lost(url: str, command: str = "run") -> str:
    """The one line for a ``command`` whose Spark Connect server at ``url`` stopped answering."""
    server = f"the Spark Connect server at {remote_server(url)} stopped answering"
    if command != "run":
        return (
            f"{server} before {command} finished: start it again if it stopped, then run "
            f"{command} again"
        )
    return (
        f"{server}: start it again if it stopped, then the processor (it carries on from its "
        "checkpoints)"
    )
