"""The processor's Spark session (``processor.session.build_session``)."""

from __future__ import annotations

import pytest

from processor.session import CALL_SITE_CAPTURE


def test_dataframe_calls_do_not_capture_their_call_site(spark):
    """No call site is recorded around a Column method, so it is one round trip to the JVM.

    With PySpark's DataFrame debugging on (Spark's default), ``alias`` takes 11: the
    active session, the setting, and the call site set and cleared in the JVM.
    ``bench/silver_writes.py`` counts the round trips (``py4j_calls_column_alias``).
    """
    assert [spark.conf.get(key) for key in CALL_SITE_CAPTURE] == ["false", "false"]


def test_an_unreachable_spark_connect_server_is_one_line_at_once():
    """PySpark's client would retry for minutes; the processor says so within seconds."""
    import socket
    import time

    from common.cli import CliError
    from infra.daemons import free_ports
    from processor.connect_server import check_connect_server, remote_server

    port = free_ports("127.0.0.1")[0]
    began = time.monotonic()
    with pytest.raises(CliError) as refused:
        check_connect_server(f"sc://127.0.0.1:{port}/;user_id=me")
    assert time.monotonic() - began < 5
    assert str(refused.value) == (
        f"the Spark Connect server 127.0.0.1:{port} did not answer (Connection refused): check "
        "IOT_PROCESSOR_REMOTE (--remote) or SPARK_REMOTE, and that the server is up"
    )
    # A token in the URL (Databricks') is in no line.
    with pytest.raises(CliError) as refused:
        check_connect_server(f"sc://127.0.0.1:{port}/;token=dapi-secret-token")
    assert "dapi" not in str(refused.value) and f"127.0.0.1:{port} did" in str(refused.value)
    assert remote_server("sc://db.example.net:443/;token=dapi-secret-token") == (
        "db.example.net:443"
    )
    # A listener that takes the connection and says nothing (not a gRPC server).
    with socket.create_server(("127.0.0.1", 0)) as listening:
        silent = listening.getsockname()[1]
        began = time.monotonic()
        with pytest.raises(CliError) as unanswered:
            check_connect_server(f"sc://127.0.0.1:{silent}/;token=dapi-secret-token", 2.0)
        assert time.monotonic() - began < 5
    assert str(unanswered.value) == (
        f"the Spark Connect server 127.0.0.1:{silent} took the connection but did not answer as "
        "a Spark Connect (gRPC) server within 2 s: check IOT_PROCESSOR_REMOTE (--remote) or "
        "SPARK_REMOTE, and that the server is up"
    )
    # A gRPC server answers: no error.
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    server = grpc.server(ThreadPoolExecutor(1))
    bound = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        check_connect_server(f"sc://127.0.0.1:{bound}/;user_id=me")
    finally:
        server.stop(None)
