"""A driver JVM that exits while it starts: one line saying why, its output in the log file."""

from __future__ import annotations

import subprocess
import time

import pytest
from pyspark.errors import PySparkRuntimeError

from processor.driver_stderr import JvmStartError, JvmStderr, start_failure

IVY_OUTPUT = b"""\
:: loading settings :: url = jar:file:/x/ivy-2.5.3.jar!/org/apache/ivy/core/settings/ivysettings.xml
\tfound io.delta#delta-spark_2.13;4.4.0 in local-m2-cache
:: problems summary ::
\t\t[NOT FOUND  ] org.slf4j#slf4j-api;2.0.17!slf4j-api.jar (1ms)
Exception in thread "main" java.lang.RuntimeException: [download failed: org.slf4j#slf4j-api;2.0.17!slf4j-api.jar]
\tat org.apache.spark.util.MavenUtils$.resolveMavenCoordinates(MavenUtils.scala:539)
\tat org.apache.spark.deploy.SparkSubmit.main(SparkSubmit.scala)
"""


def test_a_download_that_failed_says_where_the_jars_come_from(tmp_path):
    log = tmp_path / "processor.log"
    assert start_failure(IVY_OUTPUT, log) == (
        "Spark could not fetch the connector jars (java.lang.RuntimeException: [download "
        f"failed: org.slf4j#slf4j-api;2.0.17!slf4j-api.jar]) (its output is in {log}): check "
        "that Maven Central can be reached (or a local ~/.m2 that holds those jars whole), or "
        "run 'python -m infra.jars spark' and set IOT_PROCESSOR_JARS_DIR to the folder it "
        "fills (<state dir>/jars/spark)"
    )
    assert log.read_text() == (
        f"the driver JVM exited while it started; it printed:\n{IVY_OUTPUT.decode()}\n"
    )


def test_another_failure_is_its_exception_or_last_line(tmp_path, capfd):
    log = tmp_path / "processor.log"
    other = b'Exception in thread "main" java.lang.IllegalArgumentException: bad option\n\tat X\n'
    assert start_failure(other, log) == (
        "the Spark driver's JVM exited while it started: "
        f"java.lang.IllegalArgumentException: bad option (its output is in {log})"
    )
    no_java = b"/usr/bin/env: 'java': No such file or directory\n\n"
    assert start_failure(no_java, log) == (
        "the Spark driver's JVM exited while it started: "
        f"/usr/bin/env: 'java': No such file or directory (its output is in {log})"
    )
    refused = (
        b"Error: Not allowed to specify max heap(Xmx) memory settings through java options\n\n"
        b"Usage: spark-submit [options] <app jar | python file | R file> [app arguments]\n"
        b'  --queue QUEUE_NAME          The YARN queue to submit to (Default: "default").\n'
    )
    assert start_failure(refused, log) == (
        "the Spark driver's JVM exited while it started: Not allowed to specify max heap(Xmx) "
        f"memory settings through java options (its output is in {log})"
    )
    assert capfd.readouterr().err == ""
    # Without a log file (a read-only container), the output goes to the terminal.
    assert start_failure(b"", None) == (
        "the Spark driver's JVM exited while it started: it printed nothing (its output is above)"
    )
    assert start_failure(other, None).endswith("bad option (its output is above)")
    assert capfd.readouterr().err == other.decode()


def test_a_password_in_what_the_jvm_printed_is_cut_out(tmp_path, capfd):
    log = tmp_path / "processor.log"
    tried = b"==== private: tried\n  https://builder:s3cr3t-pw@repo.example.com/maven2/x.pom\n"
    start_failure(tried, log)
    start_failure(tried, None)
    kept = log.read_text() + capfd.readouterr().err
    assert "s3cr3t" not in kept
    assert kept.count("https://builder:***@repo.example.com/maven2/x.pom") == 2


def test_capture_turns_an_exited_jvm_into_one_line_and_keeps_its_output(tmp_path, capfd):
    log = tmp_path / "processor.log"
    with pytest.raises(JvmStartError) as caught, JvmStderr(log).capture():
        # A child started in the block writes to the captured stderr, as spark-submit does.
        subprocess.run(["sh", "-c", "printf '%s' \"$0\" >&2", IVY_OUTPUT.decode()], check=True)
        raise PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})
    assert str(caught.value).startswith("Spark could not fetch the connector jars (")
    assert capfd.readouterr().err == ""  # nothing of it on the terminal
    assert IVY_OUTPUT.decode() in log.read_text()


def test_capture_of_a_jvm_that_started_copies_what_it_prints_to_the_terminal(capfd):
    with JvmStderr(None).capture():
        subprocess.run(["sh", "-c", "echo 'WARNING: Using incubator modules' >&2"], check=True)
    deadline = time.monotonic() + 10
    err = ""
    while "incubator" not in err and time.monotonic() < deadline:  # copied by a thread
        time.sleep(0.05)
        err += capfd.readouterr().err
    assert err == "WARNING: Using incubator modules\n"


def test_capture_lets_other_errors_through():
    with (
        pytest.raises(PySparkRuntimeError, match="SESSION_ALREADY_EXIST"),
        JvmStderr(None).capture(),
    ):
        raise PySparkRuntimeError(errorClass="SESSION_ALREADY_EXIST", messageParameters={})


def test_what_the_jvm_prints_itself_is_cut_of_secrets_on_the_terminal_and_in_the_log(
    tmp_path, capfd
):
    """Java's own prints bypass log4j: the copy cuts them, before ``quiet`` and after it."""
    log = tmp_path / "processor.log"
    quieted = tmp_path / "quieted"
    stderr = JvmStderr(log)
    printed = (
        "echo 'before https://u:pw-one@h/x' >&2;"
        f"while [ ! -e {quieted} ]; do sleep 0.05; done;"
        "echo 'after SharedAccessKey=pw-two;EntityPath=t' >&2"
    )
    with stderr.capture():
        child = subprocess.Popen(["sh", "-c", printed])
    deadline = time.monotonic() + 10
    err = ""
    while "before" not in err and time.monotonic() < deadline:  # copied by a thread
        time.sleep(0.05)
        err += capfd.readouterr().err
    stderr.quiet()
    quieted.touch()  # the child prints its second line only now
    assert child.wait(10) == 0
    while "after" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert err == "before https://u:***@h/x\n"
    assert log.read_text() == "after SharedAccessKey=***;EntityPath=t\n"
