"""The real-time alert path on the real broker: exact alerts across a SIGKILL and a restart.

A fleet (half of it on contract version 2) sends readings with injected spikes. The
real-time app (``python -m processor realtime``) is SIGKILLed mid-stream, JVM and
all, after its first checkpoint; ``python -m processor run`` then starts it again as
its child, beside the ``alerts_rt`` query that lands the topic in Delta. The alerts
expected are computed here, from the events topic and the fleet's thresholds, and
must equal the manifest's spikes. The topic may hold an alert twice (real-time mode
delivers at least once); ``gold/alerts_rt`` must hold each exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from common.alerts import alert_id
from common.fleet import build_fleet
from common.lake import Query, Table, checkpoint_location, table_location
from common.registry_settings import RegistrySettings
from infra.broker import ensure_topic
from infra.jars import bundle_dir
from loadtest.alerts import expected_alerts, read_topic
from producer.wire_format import AvroFormat
from tests.integration.proc import (
    ROOT,
    kill_group,
    processor_env,
    run_python,
    table_rows,
    wait_for,
)
from tests.manifests import read_manifest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

EVENTS, ALERTS = "rt-events", "rt-alerts"
FLEET, SEED = 30, 5


def _breaches(bootstrap: str) -> dict[str, tuple[str, float, float]]:
    """The alerts the events topic calls for: alert id -> (kind, value, threshold)."""
    expected = expected_alerts(read_topic(bootstrap, EVENTS), build_fleet(FLEET, SEED))
    return {aid: (kind, value, threshold) for aid, (kind, value, threshold, _) in expected.items()}


def _alert_ids(bootstrap: str, topic: str = ALERTS) -> list[str]:
    return [json.loads(v)["alert_id"] for v, _ in read_topic(bootstrap, topic)]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, env=env, stdout=log.open("ab"),
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def test_every_breach_alerts_once_in_delta_across_a_sigkill(kafka_broker, tmp_path: Path):
    bootstrap = kafka_broker.plaintext
    ensure_topic(bootstrap, EVENTS, partitions=2)
    ensure_topic(bootstrap, ALERTS, partitions=1)
    lake, log, manifest = tmp_path / "lake", tmp_path / "run.log", tmp_path / "manifest.jsonl"
    env = processor_env(
        bootstrap, EVENTS, lake, bundle_dir("spark"),
        IOT_KAFKA_ALERTS_TOPIC=ALERTS,
        IOT_PROCESSOR_FLEET_SIZE=str(FLEET), IOT_PROCESSOR_SEED=str(SEED),
        IOT_PROCESSOR_REALTIME_CHECKPOINT_INTERVAL="10 seconds",
        IOT_PROCESSOR_BACKGROUND_TRIGGER_INTERVAL="2 seconds",
    )  # fmt: skip
    rtm = _start(["-m", "processor", "realtime"], env, log)
    wait_for(lambda: "in real-time mode" in log.read_text(), 180, "the real-time app", rtm, log)
    producer = _start(
        ["-m", "producer", "--scenario", "clean", "--spike-rate", "0.02", "--rate", "150",
         "--duration-s", "60", "--fleet-size", str(FLEET), "--seed", str(SEED),
         "--rollout-share", "0.5", "--manifest-path", str(manifest)],
        env, log,
    )  # fmt: skip
    try:
        commits = Path(checkpoint_location(str(lake), Query.REALTIME_ALERTS)) / "commits"
        wait_for(lambda: (commits / "0").exists(), 240, "the first real-time epoch", rtm, log)
        at_commit = len(_alert_ids(bootstrap))
        # Kill once the next epoch has sent alerts: the restart must send them again.
        wait_for(lambda: len(_alert_ids(bootstrap)) > at_commit, 60,
                 "alerts after the first checkpoint", rtm, log)  # fmt: skip
        kill_group(rtm)  # SIGKILL mid-stream: the JVM goes with it
        assert producer.poll() is None, "the producer ended before the kill: nothing mid-stream"
        run = _start(["-m", "processor", "run", "--queries", "realtime_alerts,alerts_rt"], env, log)
        try:
            assert producer.wait(120) == 0, log.read_text()[-3000:]
            expected = _breaches(bootstrap)
            spikes = [a for a in read_manifest(manifest)["anomalies"] if a["kind"] == "spike"]
            assert {alert_id(s["event_id"], s["metric"]) for s in spikes} == set(expected)
            assert len(expected) >= 60  # 0.02 x 150/s x 60 s, in expectation 180
            wait_for(lambda: set(_alert_ids(bootstrap)) == set(expected), 240,
                     "an alert for every breach on the alerts topic", run, log)  # fmt: skip
            alerts_rt = table_location(str(lake), Table.GOLD_ALERTS_RT)
            wait_for(lambda: len(table_rows(alerts_rt, ["alert_id"])) >= len(expected), 240,
                     "every alert in gold/alerts_rt", run, log)  # fmt: skip
            rows = table_rows(alerts_rt)
            assert sorted(r["alert_id"] for r in rows) == sorted(expected)  # each exactly once
            assert {
                r["alert_id"]: (r["kind"], r["value"], r["threshold"]) for r in rows
            } == expected
            assert all(r["alert_time"] >= r["reading_time"] for r in rows)
            on_topic = _alert_ids(bootstrap)
            resent = len(on_topic) - len(set(on_topic))
            print(f"{len(expected)} breaches; {len(on_topic)} alert records on the topic "
                  f"({resent} resent after the SIGKILL)")  # fmt: skip
            assert resent > 0  # the unfinished epoch ran again: Delta saw copies and kept one
            run.send_signal(signal.SIGTERM)
            assert run.wait(120) == 0, log.read_text()[-3000:]
            # The child app (and every JVM) went with the run: its process group is empty.
            wait_for(lambda: not _group_alive(run.pid), 30, "the run's processes to end")
        finally:
            kill_group(run)
    finally:
        kill_group(producer)
        kill_group(rtm)


AVRO_EVENTS, AVRO_ALERTS = "rt-avro-events", "rt-avro-alerts"


def test_a_schema_registered_while_it_runs_restarts_it_knowing_the_new_version(
    kafka_broker, schema_registry_server, tmp_path: Path
):
    """A firmware rollout registers version 2 while the real-time alerts run on version 1.

    Every breach in Avro is alerted, of version 1 first; once version 2 is registered the
    app starts its query again knowing it, and the breaches sent as version 2 are alerted.
    """
    bootstrap = kafka_broker.plaintext
    ensure_topic(bootstrap, AVRO_EVENTS, partitions=2)
    ensure_topic(bootstrap, AVRO_ALERTS, partitions=1)
    registry = RegistrySettings(url=schema_registry_server.url)
    lake, log = tmp_path / "lake", tmp_path / "run.log"
    env = processor_env(
        bootstrap, AVRO_EVENTS, lake, bundle_dir("spark"),
        IOT_KAFKA_ALERTS_TOPIC=AVRO_ALERTS,
        IOT_PROCESSOR_FLEET_SIZE=str(FLEET), IOT_PROCESSOR_SEED=str(SEED),
        IOT_PROCESSOR_REALTIME_CHECKPOINT_INTERVAL="5 seconds",
        **RegistrySettings.env_vars(url=registry.url, watch_s="1"),
    )  # fmt: skip
    version_1 = AvroFormat(registry, AVRO_EVENTS, [1]).schema_ids[1]  # before the rollout

    def send(rollout_share: str) -> None:
        args = ["-m", "producer", "--format", "avro", "--scenario", "clean",
                "--spike-rate", "0.05", "--rate", "100", "--count", "300",
                "--fleet-size", str(FLEET), "--seed", str(SEED), "--rollout-share", rollout_share]  # fmt: skip
        assert run_python(args, env, log, 120) == 0, log.read_text()[-3000:]

    def breaches(versions: list[int]) -> set[str]:
        wire = AvroFormat(registry, AVRO_EVENTS, versions)
        records = [
            (json.dumps(wire.decode(v)).encode(), ts)
            for v, ts in read_topic(bootstrap, AVRO_EVENTS)
        ]
        return set(expected_alerts(records, build_fleet(FLEET, SEED)))

    rtm = _start(["-m", "processor", "realtime"], env, log)
    try:
        wait_for(lambda: "in real-time mode" in log.read_text(), 180, "the real-time app", rtm, log)
        send("0")  # the whole fleet on firmware 1
        v1 = breaches([1])
        assert len(v1) >= 5
        wait_for(lambda: set(_alert_ids(bootstrap, AVRO_ALERTS)) == v1, 120,
                 "an alert for every version 1 breach", rtm, log)  # fmt: skip
        version_2 = AvroFormat(registry, AVRO_EVENTS, [1, 2]).schema_ids[2]  # the rollout
        restarted = f"decodes schema ids {[version_1, version_2]}"
        wait_for(lambda: restarted in log.read_text(), 120, "the restart with version 2", rtm, log)
        assert f"restarts: {AVRO_EVENTS}-value holds schema ids [{version_2}]" in log.read_text()
        send("1")  # the whole fleet on firmware 2
        every = breaches([1, 2])
        assert len(every - v1) >= 5
        wait_for(lambda: set(_alert_ids(bootstrap, AVRO_ALERTS)) == every, 120,
                 "an alert for every breach of either version", rtm, log)  # fmt: skip
        rtm.send_signal(signal.SIGTERM)
        assert rtm.wait(120) == 0, log.read_text()[-3000:]
    finally:
        kill_group(rtm)
