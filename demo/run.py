"""``make demo``: the whole pipeline on the local stack, stopped cleanly by Ctrl-C.

Starts the Kafka broker, the processor (continuous), the producer (a live fleet
at a steady rate, the ``realistic`` scenario: anomalies, duplicates, late and
malformed records, device dropouts) and the dashboard, each a child process in
its own process group with its log under ``<state dir>/demo/logs``. With
``--ingress mqtt`` the producer publishes to a local Mosquitto instead, and the
bridge (``python -m bridge``) forwards its readings to the Kafka broker. With
``--format avro`` it also starts a local schema registry (``infra.schema_registry``),
and the producer sends Avro that the processor decodes through it. It prints
the dashboard's URL once it answers, watches the children, and on Ctrl-C or
SIGTERM stops them all, then the broker.

The demo's own settings (``demo_env``) make every page fill within about two
minutes: background queries every 15 s, a 30 s watermark, and a session gap of
half a dropout's silence, so that each dropout closes a connectivity session.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import typing
import urllib.error
import urllib.request
from pathlib import Path

from bridge.service import READY_LINE as BRIDGE_READY_LINE
from common import cli
from common.child import Child
from common.intervals import interval_seconds
from common.kafka_settings import KafkaSettings
from common.lake_settings import LakeSettings
from common.stop_signals import StartInterrupted, StopFlag
from infra import broker, mqtt_broker, schema_registry
from infra.jars import JarResolutionError, ensure_jar_dir, ensure_jars
from infra.paths import PROJECT_ROOT, state_dir
from processor.settings import ProcessorSettings
from producer.settings import ProducerSettings
from producer.wire_format import FORMATS

STOP_TIMEOUT_S = 20.0
# The bridge has subscribed (it says BRIDGE_READY_LINE) before the producer publishes:
# MQTT keeps nothing for a subscription that does not exist yet.
BRIDGE_READY_TIMEOUT_S = 60.0
INGRESSES = ("kafka", "mqtt")
SCENARIO_NAMES = typing.get_args(ProducerSettings.model_fields["scenario"].annotation)
# The demo's timing (see demo_env); the services' defaults are for real deployments.
BACKGROUND_TRIGGER_INTERVAL = "15 seconds"
WATERMARK = "30 seconds"
# A skewed device clock stays well inside the watermark, so its readings are kept.
CLOCK_SKEW_MAX_S = 10
# Readings a dropout silences; the session gap is half the silence this makes.
DROPOUT_READINGS = 20
# The realistic scenario's share of readings lost to dropouts, raised so that a device
# goes silent within seconds of the start (the first closed session is on the Sessions
# page within about a minute) rather than after minutes.
REALISTIC_DROPOUT_RATE = 0.01
ROLLOUT_SHARE = 0.25  # a quarter of the fleet sends the contract's newest schema version
ALERTS_TOPIC = str(KafkaSettings.model_fields["alerts_topic"].default)


def _spark_interval(text: str) -> str:
    """An argparse ``type``: an interval Spark reads (``common.intervals``), kept as text."""
    try:
        interval_seconds(text, spark_only=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _say(msg: str) -> None:
    cli.console.info("[demo] %s", msg)


def _spawn(name: str, args: list[str], env: dict[str, str], logs: Path) -> Child:
    child = Child(name, args, env, logs / f"{name}.log")
    _say(f"started {name} (pid {child.proc.pid}), log: {child.log}")
    return child


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _wait_for_line(child: Child, line: str, stop: StopFlag) -> bool:
    """Wait until ``child``'s log holds ``line``; False if it exits, stop is set, or time is up."""
    deadline = BRIDGE_READY_TIMEOUT_S
    while deadline > 0 and child.proc.poll() is None:
        if line in child.log.read_text(errors="replace"):
            return True
        if stop.wait(0.2):
            return False
        deadline -= 0.2
    return False


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = cli.ArgumentParser(prog="python -m demo", description=__doc__)
    p.add_argument(
        "--rate", type=cli.at_least(0), default=200.0, help="producer events/s (default 200)"
    )
    p.add_argument(
        "--fleet-size", type=cli.at_least(1, int), default=50, help="simulated devices (default 50)"
    )
    p.add_argument("--port", type=cli.port, default=8501, help="dashboard port (default 8501)")
    p.add_argument("--topic", default="iot-events", help="Kafka topic (default iot-events)")
    p.add_argument(
        "--scenario",
        default="realistic",
        choices=SCENARIO_NAMES,
        help=f"producer scenario, one of {', '.join(SCENARIO_NAMES)} (default realistic)",
    )
    p.add_argument(
        "--ingress",
        default="kafka",
        choices=INGRESSES,
        help="how the readings come in: kafka (the producer sends to the broker) or mqtt "
        "(the producer publishes to a local Mosquitto, python -m bridge forwards them to "
        "the broker) (default kafka)",
    )
    p.add_argument(
        "--format",
        default="json",
        choices=FORMATS,
        help="payload format: json, or avro (Confluent-framed, through a local schema "
        "registry the demo starts) (default json)",
    )
    p.add_argument(
        "--trigger-interval",
        type=_spark_interval,
        help="processor hot-path micro-batch interval (default: its own)",
    )
    p.add_argument(
        "--clean",
        action="store_true",
        help="stop the demo's broker if one was left running, delete the demo's data "
        "(lake, broker data, logs, producer report) and exit; the jars stay",
    )
    return p.parse_args(argv)


def session_gap(rate: float, fleet_size: int) -> str:
    """Half the silence of a dropout (``DROPOUT_READINGS`` of one device's readings).

    Each device reads every ``fleet_size / rate`` seconds, so a dropout leaves a
    silence of about ``DROPOUT_READINGS`` times that: a gap of half of it closes a
    session at every dropout, and never between two readings in a row.

    Args:
        rate: The producer's events/s (0: as fast as possible).
        fleet_size: Devices in the fleet.

    Returns:
        A Spark interval, e.g. ``"2500 milliseconds"`` (200 events/s, 50 devices).
    """
    interval_s = fleet_size / rate if rate > 0 else 0.0
    return f"{max(1000, math.ceil(DROPOUT_READINGS * interval_s * 1000 / 2))} milliseconds"


def demo_env(
    args: argparse.Namespace, root: Path, bootstrap: str, jars_dir: Path
) -> dict[str, str]:
    """The environment the demo gives its services (on top of the caller's).

    Args:
        args: The demo's options.
        root: The demo's folder (lake, logs, producer report).
        bootstrap: ``host:port`` of the broker's PLAINTEXT listener.
        jars_dir: The resolved Spark connector jars.
    """
    return (
        KafkaSettings.env_vars(
            bootstrap_servers=bootstrap, topic=args.topic, alerts_topic=ALERTS_TOPIC, auth="none"
        )
        | LakeSettings.env_vars(root=root / "lake")
        | ProcessorSettings.env_vars(
            jars_dir=jars_dir,
            fleet_size=args.fleet_size,
            # The demo's broker and lake live and die together; if one is wiped
            # alone, carry on from the earliest offsets rather than fail.
            fail_on_data_loss=False,
            # Alerts, sessions and device status within a minute or two, not after
            # the watermark and background interval of a real deployment.
            background_trigger_interval=BACKGROUND_TRIGGER_INTERVAL,
            watermark=WATERMARK,
            session_gap=session_gap(args.rate, args.fleet_size),
            trigger_interval=args.trigger_interval,
        )
        | ProducerSettings.env_vars(
            fleet_size=args.fleet_size,
            scenario=args.scenario,
            # A firmware rollout under way: both schema versions flow into one set of columns.
            rollout_share=ROLLOUT_SHARE,
            dropout_readings=DROPOUT_READINGS,
            dropout_rate=REALISTIC_DROPOUT_RATE if args.scenario == "realistic" else None,
            clock_skew_max_s=CLOCK_SKEW_MAX_S,
            rate=args.rate,
            progress_s=30,
            report_path=root / "producer-report.json",
        )
        | {"PYTHONUNBUFFERED": "1"}
    )


def clean(root: Path) -> None:
    """Stop the demo's broker if it still runs, then delete the demo's folder.

    Args:
        root: The demo's folder (``<state dir>/demo``).
    """
    if broker.stop(root / "broker"):
        _say("stopped the demo's broker, which was left running")
    if mqtt_broker.status(root / "mqtt-broker") is not None:
        mqtt_broker.stop(root / "mqtt-broker")
        _say("stopped the demo's MQTT broker, which was left running")
    if schema_registry.status(root / "schema-registry") is not None:
        schema_registry.stop(root / "schema-registry")
        _say("stopped the demo's schema registry, which was left running")
    shutil.rmtree(root, ignore_errors=True)
    _say(f"deleted {root}")


def _start(args: argparse.Namespace, root: Path, children: list[Child], stop: StopFlag) -> bool:
    """Start the daemons, then each service, listing each child as it starts.

    Returns:
        False when the bridge did not start forwarding (said on the console).

    Raises:
        StartInterrupted: A stop was asked for (``stop.starting``): the start-up is left
            at once, and what is on ``children`` is stopped by the caller.
    """
    logs = root / "logs"
    spark_jar_dir = ensure_jar_dir("spark")
    ensure_jars("kafka")
    info = broker.start(root / "broker")
    broker.ensure_topic(info.plaintext, args.topic, partitions=3)
    broker.ensure_topic(info.plaintext, ALERTS_TOPIC, partitions=1)
    env = os.environ | demo_env(args, root, info.plaintext, spark_jar_dir)
    services: list[tuple[str, list[str]]] = [("processor", ["-m", "processor", "run"])]
    if args.ingress == "mqtt":
        env |= mqtt_broker.start(root / "mqtt-broker").env
        env |= ProducerSettings.env_vars(transport="mqtt")
        services.append(("bridge", ["-m", "bridge"]))
    if args.format == "avro":
        registry = schema_registry.start(root / "schema-registry")
        _say(f"schema registry: {registry.url}")
        env |= registry.env | ProducerSettings.env_vars(format="avro")
    dashboard = [
        "-m", "streamlit", "run", str(PROJECT_ROOT / "dashboard" / "app.py"),
        "--server.port", str(args.port), "--server.headless", "true",
        "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
    ]  # fmt: skip
    services += [("producer", ["-m", "producer"]), ("dashboard", dashboard)]
    for name, child_args in services:
        with stop.unbroken():  # a child being started is on the list before the start-up is left
            children.append(_spawn(name, child_args, env, logs))
        if name == "bridge" and not _wait_for_line(children[-1], BRIDGE_READY_LINE, stop):
            if stop.is_set():
                raise StartInterrupted
            _say(f"the bridge did not start forwarding:\n{children[-1].tail()}")
            return False
    return True


def _watch(children: list[Child], port: int, stop: StopFlag) -> bool:
    """Wait until a stop is asked for or a service exits; say when the dashboard answers.

    Returns:
        Whether a service exited (a failure of the demo).
    """
    url = f"http://localhost:{port}"
    announced = False
    while not stop.wait(1.0):
        for child in children:
            if child.proc.poll() is not None:
                _say(f"{child.name} exited with code {child.proc.returncode}:\n{child.tail()}")
                stop.set("a service failed")
                return True
        if not announced and _http_ok(url):
            announced = True
            _say(f"dashboard ready: {url}  (Ctrl-C stops everything)")
    return False


def _stop_all(root: Path, children: list[Child], stop: StopFlag) -> None:
    """Stop the services (all at once, newest first), then the daemons."""
    if children or (root / "broker").exists():
        _say(f"stopping ({stop.reason or 'a service failed'}) ...")
    for child in reversed(children):  # all at once: each stops while the others do
        child.ask_to_stop()
    for child in reversed(children):
        child.stop(STOP_TIMEOUT_S, _say)
    broker.stop(root / "broker")
    if (root / "mqtt-broker").exists():
        mqtt_broker.stop(root / "mqtt-broker")
    if (root / "schema-registry").exists():
        schema_registry.stop(root / "schema-registry")
    _say("stopped")


def main(argv: list[str] | None = None) -> int:
    """Run the demo until Ctrl-C; return non-zero if a service failed."""
    args = _parse(argv)
    if args.clean:
        clean(state_dir() / "demo")
        return 0
    # Until every service is started, a signal leaves the start-up at once (the jars,
    # the broker's start, a service's), rather than once it is done; then it ends the watch.
    stop = StopFlag()
    stop.install()
    root = state_dir() / "demo"
    (root / "logs").mkdir(parents=True, exist_ok=True)
    children: list[Child] = []
    try:
        with stop.starting():
            if not _start(args, root, children, stop):
                return 1
        return 1 if _watch(children, args.port, stop) else 0
    except StartInterrupted:
        return 0
    except (
        broker.BrokerError,
        mqtt_broker.MqttBrokerError,
        schema_registry.RegistryError,
        JarResolutionError,
    ) as exc:
        _say(f"error: {exc}")
        return 1
    finally:
        _stop_all(root, children, stop)
