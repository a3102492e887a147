"""Stop and start the broker under a running producer and processor: nothing lost or doubled.

The producer (Kafka transport, idempotent, ``acks=all``) and the processor run as their
own processes, as a user runs them. Mid-stream the broker is stopped and started again
on the same ports; both clients must ride it out by retrying, and
``python -m loadtest verify`` must then find every acknowledged reading in bronze and
silver exactly once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra import broker
from infra.jars import bundle_dir
from loadtest.lake import read_truth
from tests.integration.proc import (
    ROOT,
    kill_group,
    processor_env,
    start_processor,
    stop_gracefully,
    table_rows,
    wait_for,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(1200),
]

TOPIC = "restart-pipeline"
FLEET, SEED, RATE, COUNT = 20, 7, 100, 6_000  # 60 s of readings
RESTART_AFTER_S = 20.0
RESTART_LIMIT_S = 30.0


def _producer(bootstrap: str, work: Path) -> subprocess.Popen[bytes]:
    env = processor_env(bootstrap, TOPIC, work / "lake", bundle_dir("spark")) | {
        "IOT_PRODUCER_RATE": str(RATE), "IOT_PRODUCER_COUNT": str(COUNT),
        "IOT_PRODUCER_FLEET_SIZE": str(FLEET), "IOT_PRODUCER_SEED": str(SEED),
        "IOT_PRODUCER_MANIFEST_PATH": str(work / "manifest.jsonl"),
        "IOT_PRODUCER_REPORT_PATH": str(work / "report.json"),
    }  # fmt: skip
    log = (work / "producer.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "producer"], cwd=ROOT, env=env, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def _ports(info: broker.BrokerInfo) -> tuple[str, str, int]:
    return info.plaintext, info.sasl_ssl, info.controller_port


def test_broker_restart_under_producer_and_processor(tmp_path: Path) -> None:
    data_dir = tmp_path / "broker"
    lake = tmp_path / "lake"
    plog = tmp_path / "processor.log"
    info = broker.start(data_dir, quiet=True)
    processor = producer = None
    try:
        broker.ensure_topic(info.plaintext, TOPIC, partitions=3)
        env = processor_env(
            info.plaintext, TOPIC, lake, bundle_dir("spark"),
            IOT_PROCESSOR_FLEET_SIZE=str(FLEET), IOT_PROCESSOR_SEED=str(SEED),
            IOT_PROCESSOR_QUERIES="bronze,silver", IOT_PROCESSOR_BRONZE_TRIGGER_INTERVAL="2 seconds",
        )  # fmt: skip
        processor = start_processor(env, plog)
        silver = lake / "silver" / "events"
        # The producer starts once the processor's queries run, so that both are live.
        wait_for((silver / "_delta_log").is_dir, 600, "the processor's start", processor, plog)
        producer = _producer(info.plaintext, tmp_path)
        time.sleep(RESTART_AFTER_S)  # a third of the readings sent

        assert producer.poll() is None, "the producer finished before the broker restart"
        assert processor.poll() is None, plog.read_text()[-3000:]
        assert broker.stop(data_dir) is True
        time.sleep(3)  # clients see the broker gone: refused connections, failed requests
        began = time.monotonic()
        again = broker.start(data_dir, quiet=True)
        assert time.monotonic() - began < RESTART_LIMIT_S
        assert _ports(again) == _ports(info)
        assert producer.poll() is None, "the producer finished while the broker was down"

        code = producer.wait(600)
        assert code == 0, (tmp_path / "producer.log").read_text()[-3000:]
        report = json.loads((tmp_path / "report.json").read_text())
        assert report["acked"] == report["sent"] == COUNT and report["undelivered"] == 0, report
        acked = read_truth(tmp_path / "manifest.jsonl").events.collect().height
        assert acked == COUNT
        bronze = lake / "bronze" / "events"
        wait_for(
            lambda: min(len(table_rows(t, ["offset"])) for t in (bronze, silver)) >= acked,
            900, "every reading in bronze and silver", processor, plog,
        )  # fmt: skip
        assert stop_gracefully(processor) == 0, plog.read_text()[-3000:]
    finally:
        for proc in (producer, processor):
            if proc is not None:
                kill_group(proc)  # SIGKILL: only what a failed assertion left running
        broker.stop(data_dir)

    out = tmp_path / "verify"
    with (tmp_path / "verify.log").open("wb") as fh:
        code = subprocess.run(
            [sys.executable, "-m", "loadtest", "verify", "--manifest",
             str(tmp_path / "manifest.jsonl"), "--lake-root", str(lake), "--out", str(out)],
            cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, timeout=300, check=False,
        ).returncode  # fmt: skip
    result = json.loads((out / "verify.json").read_text())
    assert code == 0, (tmp_path / "verify.log").read_text()
    assert result["ok"] and result["warnings"] == [], result["failures"] + result["warnings"]
    assert result["loss"]["total"] == 0
    assert result["duplicates"]["silver_duplicated_ids"] == 0
    assert result["duplicates"]["bronze_unexpected_copies"] == 0  # idempotent producer
    assert result["counts"]["bronze_rows"] == result["counts"]["silver_rows"] == COUNT
