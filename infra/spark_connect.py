"""A local Spark Connect server with the processor's connectors and settings.

What Databricks serverless (or a standard access mode cluster) is to the processor,
on this machine: a Spark application that runs the queries a Connect client sends
(``python -m processor run --remote sc://127.0.0.1:PORT``). PySpark's package holds
the server (``SparkConnectServer``); this module submits it with the Kafka and Delta
jars, Delta's SQL extension and the processor's application settings
(``processor.session.application_conf``, with the local profile for a local master).
Its Python workers (``foreachBatch`` functions, the alert detector) import this
project's packages, so they run with this interpreter and the project on their path.

Command line (in the foreground; Ctrl-C stops it)::

    python -m infra.spark_connect [--port 15002] [--master local[2]]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from common import cli
from common.cli import console
from common.jars import connector_jars
from common.settings import load_settings
from infra import daemons
from infra.jars import ensure_jar_dir
from infra.paths import PROJECT_ROOT
from infra.spark_cluster import spark_home
from processor.settings import ProcessorSettings

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
HOST = "127.0.0.1"
DEFAULT_PORT = 15002
READY_TIMEOUT_S = 180.0


def server_command(port: int, settings: ProcessorSettings) -> list[str]:
    """The ``spark-submit`` command line of a Connect server on ``HOST:port``.

    Args:
        port: The gRPC port clients connect to (``sc://127.0.0.1:<port>``).
        settings: The server's master, memory, JVM options and connector jars (its
            ``jars_dir``; resolved with ``python -m infra.jars spark`` if empty).
    """
    from processor.session import LOCAL_PROFILE, application_conf, is_local

    jars_dir = settings.jars_dir or str(ensure_jar_dir("spark", quiet=True))
    conf = application_conf(settings) | (LOCAL_PROFILE if is_local(settings) else {})
    conf |= {
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(port),
    }
    submit = spark_home() / "bin" / "spark-submit"
    args = [str(submit), "--master", settings.master, "--class", SERVER_CLASS]
    args += ["--jars", ",".join(connector_jars(jars_dir))]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return [*args, "spark-internal"]


def server_env() -> dict[str, str]:
    """The server's environment: its Python workers run this interpreter, on this project."""
    path = os.environ.get("PYTHONPATH", "")
    return os.environ | {
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": f"{PROJECT_ROOT}{os.pathsep}{path}" if path else str(PROJECT_ROOT),
        "SPARK_HOME": str(spark_home()),
    }


def wait_until_ready(port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Wait until the server accepts connections on ``port``.

    Raises:
        RuntimeError: The server exited, or did not listen within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the Spark Connect server exited with code {proc.returncode}")
        if daemons.accepts_connections(HOST, port):
            return
        time.sleep(0.5)
    raise RuntimeError(f"the Spark Connect server did not listen on {port} in {timeout_s:.0f} s")


def main(argv: list[str] | None = None) -> int:
    """Run a local Spark Connect server in the foreground."""
    parser = argparse.ArgumentParser(
        prog="python -m infra.spark_connect",
        description="A local Spark Connect server with the processor's connectors.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="gRPC port")
    parser.add_argument("--master", default="local[2]", help="the server's Spark master")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(ProcessorSettings, master=args.master)
    except (ValueError, FileNotFoundError) as exc:
        return cli.settings_error(exc)
    console.info("Spark Connect on sc://%s:%s (Ctrl-C stops it)", HOST, args.port)
    try:
        return subprocess.call(server_command(args.port, settings), env=server_env())
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
