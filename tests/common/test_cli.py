"""Every CLI fails in one line on stderr; the full trace goes to <state dir>/logs/<service>.log.

The CLIs run in the test's process (the ``run_cli`` fixture), as ``python -m`` runs them;
``test_python_m_fails_as_the_in_process_run_does`` checks that the real entry point gives
the same exit code, output and log.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from common import cli
from common.settings import load_settings
from processor.settings import ProcessorSettings
from tests.cli_runs import run_python

TIME_LIMIT_S = 30


@pytest.fixture
def run(run_cli, tmp_path) -> Callable[..., tuple[int, str, str, float]]:
    """Run ``python -m <module> <args>`` (in-process) with its state under ``home``."""

    def run(
        command: str | Callable[[], int], *args: str, home: Path, service: str = "", **env: str
    ) -> tuple[int, str, str, float]:
        done = run_cli(command, *args, home=home, cwd=tmp_path, service=service, env=env)
        return done.code, done.out, done.err, done.elapsed_s

    return run


def assert_quiet_failure(err: str, elapsed: float) -> None:
    """Exactly one line, no Python or Java trace, in time."""
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    assert "\tat " not in err
    assert elapsed < TIME_LIMIT_S


def test_verify_with_a_missing_manifest(run, tmp_path):
    lake = tmp_path / "lake"
    lake.mkdir()
    manifest = tmp_path / "none.jsonl"
    code, out, err, elapsed = run(
        "loadtest", "verify", "--manifest", str(manifest), "--lake-root", str(lake),
        home=tmp_path / "home",
    )  # fmt: skip
    assert code == 2
    assert out == ""
    assert err.startswith(f"error: no manifest at {manifest}: run the producer with")
    assert_quiet_failure(err, elapsed)
    log = (tmp_path / "home" / "logs" / "loadtest.log").read_text()
    assert f"ERROR iot_pulse.console: error: no manifest at {manifest}" in log
    assert "exit 2" in log


def test_verify_names_a_missing_manifest_before_a_missing_lake_root(run, tmp_path):
    home = tmp_path / "home"  # its lake root (the default) does not exist either
    code, out, err, elapsed = run(
        "loadtest", "verify", "--manifest", "/nonexistent", home=home
    )  # fmt: skip
    assert (code, out) == (2, "")
    assert err == (
        "error: no manifest at /nonexistent: run the producer with --manifest-path "
        "(docs/manifest.md)\n"
    )
    assert_quiet_failure(err, elapsed)


@pytest.mark.parametrize("kind", ["file", "missing"])
def test_verify_with_a_lake_root_that_is_not_a_folder(run, tmp_path, kind):
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("")
    lake = tmp_path / "lake"
    if kind == "file":
        lake.write_text("not a lake")
    code, out, err, elapsed = run(
        "loadtest", "verify", "--manifest", str(manifest), "--lake-root", str(lake),
        home=tmp_path / "home",
    )  # fmt: skip
    what = "is a file" if kind == "file" else "does not exist"
    assert (code, out) == (2, "")
    assert err == (
        f"error: the lake root {lake} {what}: pass --lake-root the folder the processor "
        "writes (its IOT_LAKE_ROOT)\n"
    )
    assert_quiet_failure(err, elapsed)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["loadtest", "verify"],
            "error: python -m loadtest verify: the following arguments are required: "
            "--manifest (see python -m loadtest verify --help)",
        ),
        (
            ["processor", "--log-level", "chatty"],
            "error: python -m processor: argument --log-level: invalid choice: 'chatty' "
            "(choose from 'ERROR', 'WARN', 'INFO', 'DEBUG') (see python -m processor --help)",
        ),
        (
            ["producer", "--scenario", "nosuch"],
            "error: python -m producer: argument --scenario: invalid choice: 'nosuch' "
            "(choose from 'clean', 'realistic', 'chaos') (see python -m producer --help)",
        ),
        (
            ["processor", "--config", "no-such.toml"],
            "error: invalid settings: config file no-such.toml does not exist",
        ),
        (
            ["bridge", "--nosuch"],
            "error: python -m bridge: unrecognized arguments: --nosuch "
            "(see python -m bridge --help)",
        ),
        (
            ["notifier", "--nosuch"],
            "error: python -m notifier: unrecognized arguments: --nosuch "
            "(see python -m notifier --help)",
        ),
        (
            ["infra.mqtt_broker", "restart"],
            "error: python -m infra.mqtt_broker: argument command: invalid choice: 'restart' "
            "(choose from 'start', 'stop', 'status') (see python -m infra.mqtt_broker --help)",
        ),
    ],
    ids=[
        "missing argument",
        "unknown log level",
        "unknown scenario",
        "missing config file",
        "bridge flag",
        "notifier flag",
        "mqtt broker command",
    ],  # fmt: skip
)
def test_usage_and_settings_errors_are_one_line(run, tmp_path, args, expected):
    code, out, err, elapsed = run(*args, home=tmp_path / "home")
    assert (code, out, err) == (2, "", expected + "\n")
    assert_quiet_failure(err, elapsed)


def test_an_unexpected_error_names_the_log_file_which_holds_the_trace(run, tmp_path):
    home = tmp_path / "home"
    code, out, err, elapsed = run(lambda: int("seven"), home=home, service="demo")
    log_file = home / "logs" / "demo.log"
    assert (code, out) == (1, "")
    assert err == (
        "error: ValueError: invalid literal for int() with base 10: 'seven' "
        f"(the full trace is in {log_file})\n"
    )
    assert_quiet_failure(err, elapsed)
    log = log_file.read_text()
    assert "Traceback (most recent call last):" in log
    assert "ValueError: invalid literal for int() with base 10: 'seven'" in log
    assert log.rstrip().endswith("INFO iot_pulse: exit 1")


def test_iot_log_dir_moves_the_log_file(run, tmp_path):
    logs = tmp_path / "demo-logs"
    code, _, err, _ = run(
        lambda: int("seven"), home=tmp_path / "home", service="demo", IOT_LOG_DIR=str(logs)
    )
    assert code == 1
    assert err.endswith(f"(the full trace is in {logs / 'demo.log'})\n")
    assert "ValueError" in (logs / "demo.log").read_text()
    assert not (tmp_path / "home" / "logs").exists()


def test_an_expected_error_keeps_its_exit_code_and_logs_its_cause(run, tmp_path):
    home = tmp_path / "home"

    def main() -> int:
        try:
            {}["broker"]
        except KeyError as exc:
            raise cli.CliError("no broker: start one", cli.BAD_INPUT) from exc
        return 0

    code, out, err, elapsed = run(main, home=home, service="demo")
    assert (code, out, err) == (2, "", "error: no broker: start one\n")
    log = (home / "logs" / "demo.log").read_text()
    assert "KeyError: 'broker'" in log
    assert "ERROR iot_pulse.console: error: no broker: start one" in log


def test_a_log_file_that_cannot_be_written_leaves_the_trace_on_stderr(run, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "logs").write_text("a file where the logs folder would be")
    code, out, err, _ = run(lambda: 1 // 0, home=home, service="demo")
    assert (code, out) == (1, "")
    assert "Traceback (most recent call last):" in err
    assert err.splitlines()[-1] == (
        "error: ZeroDivisionError: integer division or modulo by zero (the full trace is above)"
    )
    assert err.count("error: ZeroDivisionError") == 1  # the console's line, not again by the log


def test_what_a_command_says_is_on_stderr_once_and_in_its_log(run, tmp_path):
    home = tmp_path / "home"

    def main() -> int:
        cli.console.info("[x] step %d of %d", 1, 2)
        cli.console.warning("warning: %s", "nearly full")
        print("the result")
        return 0

    code, out, err, _ = run(main, home=home, service="demo")
    assert (code, out, err) == (0, "the result\n", "[x] step 1 of 2\nwarning: nearly full\n")
    said = [
        line.split(" ", 1)[1]
        for line in (home / "logs" / "demo.log").read_text().splitlines()
        if "iot_pulse.console" in line
    ]
    assert said == [
        "INFO iot_pulse.console: [x] step 1 of 2",
        "WARNING iot_pulse.console: warning: nearly full",
    ]


def test_a_lowercase_log_level_is_refused_with_the_allowed_values(monkeypatch, capsys):
    monkeypatch.setenv("IOT_PROCESSOR_LOG_LEVEL", "warn")
    with pytest.raises(ValueError) as caught:
        load_settings(ProcessorSettings)
    assert cli.settings_error(caught.value) == cli.BAD_INPUT
    assert capsys.readouterr().err == (
        "error: invalid settings: IOT_PROCESSOR_LOG_LEVEL (--log-level): Input should be "
        "'ERROR', 'WARN', 'INFO' or 'DEBUG' (got 'warn')\n"
    )


def test_one_line_joins_lines_and_cuts_long_text():
    assert cli.one_line("first\n  second\tthird\n") == "first second third"
    cut = cli.one_line("x" * 600)
    assert len(cut) == 500
    assert cut.endswith("...")


def test_one_line_drops_terminal_colour_codes():
    # delta-rs's error chain, as its S3 client prints it.
    chain = (
        "Generic S3 error\n  \x1b[31m\u21b3\x1b[0m HTTP error\n   \x1b[31m\u21b3\x1b[0m tcp connect"
    )
    assert cli.one_line(chain) == "Generic S3 error \u21b3 HTTP error \u21b3 tcp connect"


def test_first_line_of_a_grpc_error_is_its_details():
    # What PySpark's Spark Connect client raises when its server is gone, as it prints.
    text = (
        "<_InactiveRpcError of RPC that terminated with:\n"
        "\tstatus = StatusCode.UNAVAILABLE\n"
        '\tdetails = "failed to connect to all addresses; last error: UNKNOWN: '
        'ipv4:127.0.0.1:23265: Failed to connect to remote host: Connection refused"\n'
        '\tdebug_error_string = "UNAVAILABLE:failed to connect to all addresses"\n>'
    )
    assert cli.first_line(RuntimeError(text)) == (
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:23265: "
        "Failed to connect to remote host: Connection refused"
    )
    # PySpark's warning of a listener it lost ends with the repr of the stream's error.
    warned = "all client side listeners are removed. The error is: " + text.replace(
        "_InactiveRpcError", "_MultiThreadedRendezvous"
    )
    assert cli.first_line(RuntimeError(warned)) == (
        "all client side listeners are removed. The error is: failed to connect to all "
        "addresses; last error: UNKNOWN: ipv4:127.0.0.1:23265: Failed to connect to remote "
        "host: Connection refused"
    )
    assert cli.first_line(RuntimeError("plain\nsecond")) == "plain"
    assert cli.first_line(RuntimeError("")) == "RuntimeError"


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("/data/lake", Path("/data/lake")),
        ("file:///data/lake", Path("/data/lake")),
        ("file:/data/lake", Path("/data/lake")),
        ("abfss://lake@account.dfs.core.windows.net/iot", None),
        ("s3a://bucket/lake", None),
        ("C:/lake", Path("C:/lake")),
    ],
)
def test_local_path(location, expected):
    assert cli.local_path(location) == expected


def test_broker_with_a_data_dir_that_is_a_file(run, tmp_path):
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    code, out, err, elapsed = run(
        "infra.broker", "start", "--data-dir", str(a_file), home=tmp_path / "home"
    )
    assert code == 1
    assert out == ""
    assert err == (
        f"error: the broker's data dir {a_file} is not a folder: "
        "give --data-dir a folder this user can write to\n"
    )
    assert_quiet_failure(err, elapsed)
    assert "exit 1" in (tmp_path / "home" / "logs" / "broker.log").read_text()


def test_broker_stop_all_skips_brokers_that_are_not_running(run, tmp_path):
    home = tmp_path / "home"
    for stale in (home / "broker", home / "rehearsal"):  # stopped brokers' state
        stale.mkdir(parents=True)
        (stale / "broker.json").write_text('{"pid": null}')
    code, out, err, _ = run("infra.broker", "stop", "--all", home=home)
    assert (code, out, err) == (0, f"no broker running under {home}\n", "")
    code, out, err, elapsed = run(
        "infra.broker", "stop", "--all", "--data-dir", str(home / "broker"), home=home
    )
    assert (code, out, err) == (2, "", "error: stop takes --all or --data-dir, not both\n")
    assert_quiet_failure(err, elapsed)


def test_broker_stop_all_goes_on_past_a_broker_it_cannot_stop(run, tmp_path):
    home = tmp_path / "home"
    (home / "a-broken" / "broker.json").mkdir(parents=True)  # not a state file
    (home / "b-stopped").mkdir()
    (home / "b-stopped" / "broker.json").write_text('{"pid": null}')
    code, out, err, elapsed = run("infra.broker", "stop", "--all", home=home)
    assert (code, out) == (1, f"no broker running under {home}\n")
    assert err.startswith(f"error: could not stop 1 broker(s): {home / 'a-broken'}: ")
    assert_quiet_failure(err, elapsed)
    # The broker after the broken one was still looked at: stop() rewrote its state.
    assert (home / "b-stopped" / "broker.json").read_text() == '{\n  "pid": null\n}\n'


def test_producer_with_a_report_path_in_a_file_sends_nothing(run, tmp_path):
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    report = a_file / "report.json"
    code, out, err, elapsed = run(
        "producer", "--transport", "stdout", "--count", "5", "--report-path", str(report),
        home=tmp_path / "home",
    )  # fmt: skip
    assert (code, out) == (2, "")
    assert err == (
        f"error: --report-path {report}: {a_file} is not a folder: "
        "give a folder this user can create and write to\n"
    )
    assert_quiet_failure(err, elapsed)
    assert "exit 2" in (tmp_path / "home" / "logs" / "producer.log").read_text()


def test_demo_and_broker_help_show_defaults_and_choices(run, tmp_path):
    code, out, err, _ = run("demo", "--help", home=tmp_path / "home")
    assert code == 0
    assert "--scenario {clean,realistic,chaos}" in out
    assert "one of clean, realistic, chaos (default realistic)" in " ".join(out.split())
    code, out, err, _ = run("infra.broker", "topic", "--help", home=tmp_path / "home")
    assert code == 0 and "partitions (default 3)" in out
    code, out, err, elapsed = run("demo", "--scenario", "nope", home=tmp_path / "home")
    assert (code, out) == (2, "")
    assert err.startswith("error: python -m demo: argument --scenario: invalid choice:")
    assert_quiet_failure(err, elapsed)


def test_the_log_keeps_flag_names_not_their_values():
    argv = ["run", "--kafka-connection-string", "Endpoint=sb://x/;SharedAccessKey=k", "--a=b"]
    assert cli.flag_names(argv) == ["--kafka-connection-string", "--a"]


# --------------------------------------------------------------------------- python -m

# What the log's records say, without their time and the process id.
_RECORD = re.compile(r"^\S+Z (?P<record>(?:INFO|WARNING|ERROR) .*?)(?: \(pid \d+\))?$")


def _records(log: Path, home: Path) -> list[str]:
    """The log's record lines (not the trace lines), without time and pid; HOME for ``home``."""
    found = (_RECORD.match(line) for line in log.read_text().splitlines())
    return [m["record"].replace(str(home), "HOME") for m in found if m]


# (in-process command, its arguments, Python's arguments if not -m, more environment, exit code)
ENTRY_POINTS = [
    ("loadtest", ["verify", "--manifest", "none.jsonl"], None, {}, 2),
    ("processor", ["--config", "no-such.toml"], None, {}, 2),
    ("processor", ["--log-level", "chatty"], None, {}, 2),
    ("producer", ["--help"], None, {"COLUMNS": "1000", "IOT_KAFKA_CONNECTION_STRING": "s3"}, 0),
    (
        lambda: int("seven"), [],
        ["-c", "from common import cli; cli.run(lambda: int('seven'), 'demo')"], {}, 1,
    ),
]  # fmt: skip


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("command", "args", "python_args", "env", "code"),
    ENTRY_POINTS,
    ids=["verify without manifest", "missing config", "usage error", "help", "unexpected error"],
)
def test_python_m_fails_as_the_in_process_run_does(
    run_cli, tmp_path, command, args, python_args, env, code
):
    """``python -m ...`` gives the exit code, output and log records of the in-process run."""
    service = "demo" if callable(command) else command
    here = run_cli(command, *args, home=tmp_path / "here", cwd=tmp_path, service=service, env=env)
    real = run_python(
        *(python_args or ["-m", command, *args]), home=tmp_path / "real", cwd=tmp_path, env=env
    )
    assert here.code == code, here.err
    said = real.err.replace(str(tmp_path / "real"), str(tmp_path / "here"))
    assert (real.code, real.out, said) == (here.code, here.out, here.err)
    logs = {run: sorted((tmp_path / run / "logs").glob("*.log")) for run in ("here", "real")}
    assert [p.name for p in logs["real"]] == [p.name for p in logs["here"]]
    for log_here, log_real in zip(logs["here"], logs["real"], strict=True):
        assert _records(log_real, tmp_path / "real") == _records(log_here, tmp_path / "here")


SECRET = "SECRETVALUE123"
CONNECTION_STRING = (
    "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;"
    f"SharedAccessKey={SECRET};EntityPath=t"
)


@pytest.mark.parametrize(
    ("module", "args", "env"),
    [
        # A misspelt flag: argparse quotes the value it could not place.
        ("producer", ["--kafka-auth", "connection_string", "--kafka-conection-string",
                      CONNECTION_STRING], {}),
        ("bridge", ["--mqtt-pasword", SECRET], {}),
        # A Spark Connect URL without the slash before its parameters.
        ("processor", ["maintain"], {"IOT_PROCESSOR_REMOTE": f"sc://127.0.0.1:15002;token={SECRET}"}),
        ("producer", ["--format", "avro"],
         {"IOT_SCHEMA_REGISTRY_URL": f"http://user:{SECRET}@127.0.0.1:1"}),
        ("notifier", [], {"IOT_NOTIFIER_DESTINATIONS_FILE": json.dumps(
            [{"name": "ops", "format": "slack",
              "url": f"https://hooks.slack.com/services/T000/B000/{SECRET}"}])}),
    ],
)  # fmt: skip
def test_a_secret_in_bad_input_reaches_neither_the_console_nor_the_log(
    run, tmp_path, module, args, env
):
    home = tmp_path / "home"
    code, out, err, elapsed = run(module, *args, home=home, service=module, **env)
    assert code == cli.BAD_INPUT, err
    assert_quiet_failure(err, elapsed)
    said = err + out + "".join(p.read_text() for p in (home / "logs").glob("*.log"))
    assert SECRET[:6] not in said and SECRET[-6:] not in said, said


def test_redact_cuts_every_secret_shape_and_leaves_the_rest():
    from common.redact import redact

    cases = {
        f"as '15002;token={SECRET}'": "as '15002;token=***'",
        f"{CONNECTION_STRING} x": CONNECTION_STRING.replace(SECRET, "***") + " x",
        f"SharedAccessSignature sr=x&sig={SECRET}%3D&se=1": "SharedAccessSignature sr=x&sig=***&se=1",
        f"at http://user:{SECRET}@host:1/x": "at http://user:***@host:1/x",
        f"POST https://hooks.slack.com/services/T0/B0/{SECRET} failed":
            "POST https://hooks.slack.com/services/*** failed",
        f"https://a.webhook.office.com/webhookb2/{SECRET}": "https://a.webhook.office.com/***",
        "http://127.0.0.1:8080/apis/ccompat/v7 at 12:30:01": "http://127.0.0.1:8080/apis/ccompat/v7 at 12:30:01",
    }  # fmt: skip
    assert {text: redact(text) for text in cases} == cases


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--port", "99999"], "argument --port: 99999 is not a port: give 1 to 65535"),
        (["--port", "0"], "argument --port: 0 is not a port: give 1 to 65535"),
        (["--rate", "-5"], "argument --rate: -5 is not a number of at least 0"),
        (["--rate", "nan"], "argument --rate: nan is not a number of at least 0"),
        (["--fleet-size", "0"], "argument --fleet-size: 0 is not a number of at least 1"),
        (["--fleet-size", "2.5"], "argument --fleet-size: invalid int value: '2.5'"),
    ],
)
def test_port_and_number_flags_refuse_what_no_run_could_use(capsys, flags, said):
    parser = cli.ArgumentParser(prog="python -m x")
    parser.add_argument("--port", type=cli.port)
    parser.add_argument("--rate", type=cli.at_least(0))
    parser.add_argument("--fleet-size", type=cli.at_least(1, int))
    assert vars(parser.parse_args(["--port", "8501", "--rate", "0", "--fleet-size", "3"])) == {
        "port": 8501, "rate": 0.0, "fleet_size": 3,
    }  # fmt: skip
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(flags)
    assert exited.value.code == cli.BAD_INPUT
    assert capsys.readouterr().err == f"error: python -m x: {said} (see python -m x --help)\n"
