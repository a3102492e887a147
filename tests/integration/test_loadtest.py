"""verify and loadtest on the real pipeline: producer -> broker -> processor -> Delta.

1. A chaos-scenario run (duplicates, late and out-of-order readings, malformed
   payloads, skewed clocks, readings jittered before their turns) sent as four shards, four producer processes with one
   start time into one topic, processed with ``available_now``: verify over the four
   manifests passes and accounts for every injected fault; then one bronze row
   deleted and one silver row doubled with delta-rs, and verify catches each.
2. ``python -m loadtest run`` for 10 s of warm-up and 20 s at 300 events/s through the broker's Event
   Hubs-shaped SASL_SSL listener (``target=local_sasl``, the code path of a real
   Event Hubs): it passes, with the latency bound loosened for a shared machine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from deltalake import DeltaTable, write_deltalake

from common.lake import Table
from infra.broker import ensure_topic
from infra.jars import ensure_jar_dir
from loadtest.lake import read_lake, read_truth
from loadtest.verify import VerifyConfig, verify
from tests.integration.proc import ROOT, run_python, service_env
from tests.manifests import read_manifest

pytestmark = pytest.mark.integration

FLEET, SEED, COUNT, SHARDS = 20, 11, 4000, 4
SHARD_START_S = 10  # the shards' shared start, this far after they are launched


def _env(**extra: str) -> dict[str, str]:
    return service_env(PYTHONUNBUFFERED="1", **extra)


@pytest.fixture(scope="module")
def chaos_run(kafka_broker, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Produce a chaos run with a manifest, process it with available_now."""
    work = tmp_path_factory.mktemp("verify-chaos")
    topic = "verify-chaos"
    ensure_topic(kafka_broker.plaintext, topic, partitions=3)
    kafka = {"IOT_KAFKA_BOOTSTRAP_SERVERS": kafka_broker.plaintext, "IOT_KAFKA_TOPIC": topic}
    manifests = work / "manifests"
    start_at = (datetime.now(UTC) + timedelta(seconds=SHARD_START_S)).isoformat()
    shards = [
        subprocess.Popen(
            [sys.executable, "-m", "producer"],
            cwd=ROOT,
            stdout=(work / f"producer-{k}.log").open("wb"),
            stderr=subprocess.STDOUT,
            env=_env(
                **kafka,
                IOT_PRODUCER_SCENARIO="chaos",
                IOT_PRODUCER_COUNT=str(COUNT),
                IOT_PRODUCER_RATE="0",
                IOT_PRODUCER_FLEET_SIZE=str(FLEET),
                IOT_PRODUCER_SEED=str(SEED),
                IOT_PRODUCER_START_TIME="2026-01-01T00:00:00Z",
                IOT_PRODUCER_CLOCK_RATE="100",
                IOT_PRODUCER_REPORT_JITTER_S="1",
                IOT_PRODUCER_SHARD=f"{k}/{SHARDS}",
                IOT_PRODUCER_START_AT=start_at,
                IOT_PRODUCER_MANIFEST_PATH=str(manifests / f"manifest-{k}.jsonl"),
                IOT_PRODUCER_REPORT_PATH=str(work / "reports" / f"report-{k}.json"),
            ),
        )  # fmt: skip
        for k in range(SHARDS)
    ]
    for k, proc in enumerate(shards):
        # Exit 1 is the oversized payloads the broker refused on purpose; the manifest says so.
        assert proc.wait(300) in (0, 1), (work / f"producer-{k}.log").read_text()[-3000:]
    lake = work / "lake"
    code = run_python(
        ["-m", "processor", "run"],
        _env(**kafka, IOT_LAKE_ROOT=str(lake), IOT_PROCESSOR_TRIGGER="available_now",
             IOT_PROCESSOR_JARS_DIR=str(ensure_jar_dir("spark", quiet=True)),
             IOT_PROCESSOR_FLEET_SIZE=str(FLEET), IOT_PROCESSOR_SEED=str(SEED),
             IOT_PROCESSOR_SHUFFLE_PARTITIONS="2", IOT_PROCESSOR_DRIVER_MEMORY="1g"),
        work / "processor.log",
        900,
    )  # fmt: skip
    assert code == 0, (work / "processor.log").read_text()[-3000:]
    return manifests, lake


def _faults(manifests: Path) -> list[dict]:
    lines = [json.loads(line) for m in _files(manifests) for line in m.read_text().splitlines()]
    return [line for line in lines if line["type"] == "fault"]


def _files(manifests: Path) -> list[Path]:
    return sorted(manifests.glob("*.jsonl"))


def test_verify_accounts_for_every_injected_fault(chaos_run: tuple[Path, Path]) -> None:
    manifests, lake = chaos_run
    truth = read_truth(_files(manifests))
    result = verify(truth, read_lake(str(lake)), VerifyConfig())
    assert result.ok, result.summary()
    assert result.warnings == [], result.summary()
    # Four shards of one fleet: disjoint devices, all of them, and the count split.
    assert truth.header["run"]["shards"] == SHARDS
    per_shard = [read_manifest(m) for m in _files(manifests)]
    assert [sorted(m["devices"]) for m in per_shard] == [
        [f"dev-{i:05d}" for i in range(k, FLEET, SHARDS)] for k in range(SHARDS)
    ]
    assert truth.events.collect()["device_id"].n_unique() == FLEET
    reports = [json.loads(p.read_text()) for p in sorted(manifests.parent.glob("reports/*"))]
    assert [r["shard"] for r in reports] == [f"{k}/{SHARDS}" for k in range(SHARDS)]
    assert [r["readings"] for r in reports] == [COUNT // SHARDS] * SHARDS
    # One start time: the shards' clocks started within a second of each other.
    starts = [datetime.fromisoformat(r["started_at"]).timestamp() for r in reports]
    assert max(starts) - min(starts) < 1.0, starts
    faults = _faults(manifests)
    kinds = Counter(f["kind"] for f in faults)
    assert kinds["duplicate"] > 0 and kinds["late"] > 0 and kinds["out_of_order"] > 0
    # One batch (available_now): the watermark drops nothing, so silver holds every reading.
    assert result.counts["silver_rows"] == truth.events.collect().height == result.counts["acked"]
    assert result.late["dropped"] == 0 and result.late["injected"] == kinds["late"]
    assert result.duplicates["bronze_injected_duplicates"] == kinds["duplicate"]
    delivered = [
        f for f in faults
        if "expected_reason" in f and f.get("delivered") is not False
        and f["expected_reason"] != "rejected_too_large"
    ]  # fmt: skip
    assert len(delivered) > 0
    q = result.quarantine
    assert q["expected"] == q["quarantined"] == len(delivered)
    assert {r: v["injected"] for r, v in q["by_reason"].items()} == dict(
        Counter(f["expected_reason"] for f in delivered)
    )
    assert q["rows_by_reason"] == dict(
        sorted(Counter(f["expected_reason"] for f in delivered).items())
    )
    s = result.sequence
    assert s["ok"] and s["expected"] == s["actual"] > 0
    assert result.latency["stages"] == {}  # simulated clock
    # The jitter (1 s against a device's 0.2 s turns) made readings before their turns:
    # some device's later reading has the earlier time, which no fault does.
    silver = pl.from_arrow(
        DeltaTable(str(lake / Table.SILVER_EVENTS)).to_pyarrow_table(
            columns=["device_id", "seq", "event_time"]
        )
    )
    inverted = silver.sort("device_id", "seq").filter(
        pl.col("event_time").diff().over("device_id").dt.total_microseconds() < 0
    )
    assert truth.header["run"]["report_jitter_s"] == 1.0 and inverted.height > 100


def test_verify_catches_a_lost_and_a_duplicated_event(
    chaos_run: tuple[Path, Path], tmp_path: Path
) -> None:
    manifests, shared = chaos_run
    lake = tmp_path / "lake"  # a copy: the other tests of the module read the run as it was
    shutil.copytree(shared, lake)
    truth = read_truth(_files(manifests))
    events = truth.events.collect()
    once = events.filter(~events["event_id"].is_in(list(truth.fault_ids("duplicate"))))
    lost = once.row(10, named=True)
    doubled = once.row(20, named=True)
    silver = DeltaTable(str(lake / "silver/events"))
    row = silver.to_pyarrow_table(filters=[("event_id", "=", doubled["event_id"])])
    assert row.num_rows == 1
    bronze = DeltaTable(str(lake / "bronze/events"))
    copies = [
        r for r in bronze.to_pyarrow_table(columns=["value", "partition", "offset"]).to_pylist()
        if lost["event_id"].encode() in r["value"]
    ]  # fmt: skip
    assert len(copies) == 1
    bronze.delete(f"`partition` = {copies[0]['partition']} AND `offset` = {copies[0]['offset']}")
    write_deltalake(str(lake / "silver/events"), row, mode="append", schema_mode="merge")
    result = verify(truth, read_lake(str(lake)), VerifyConfig())
    assert not result.ok
    assert result.loss["missing_from_bronze"] == 1
    assert result.loss["examples_missing_from_bronze"][0]["event_id"] == lost["event_id"]
    assert result.duplicates["silver_duplicated_ids"] == 1
    assert result.duplicates["examples"] == [{"event_id": doubled["event_id"], "copies": 2}]
    assert len(result.failures) == 2
    assert code_of(manifests, lake, tmp_path) == 1


def code_of(manifests: Path, lake: Path, out: Path, *extra: str) -> int:
    return run_python(
        ["-m", "loadtest", "verify", "--manifest", str(manifests), "--lake-root", str(lake),
         "--out", str(out), *extra],
        _env(), out / "verify.log", 300,
    )  # fmt: skip


def test_verify_of_the_shards_from_the_command_line(
    chaos_run: tuple[Path, Path], tmp_path: Path
) -> None:
    manifests, lake = chaos_run
    reports = manifests.parent / "reports"
    (tmp_path / "all").mkdir()
    assert code_of(manifests, lake, tmp_path / "all", "--reports", str(reports)) == 0
    document = json.loads((tmp_path / "all" / "verify.json").read_text())
    parts = [json.loads(p.read_text()) for p in sorted(reports.glob("*.json"))]
    total = document["senders"]["total"]
    assert [row["sender"] for row in document["senders"]["parts"]] == ["0/4", "1/4", "2/4", "3/4"]
    assert total["acked"] == sum(p["acked"] for p in parts) == document["counts"]["bronze_rows"]
    assert total["workers"] == SHARDS
    assert "## Senders" in (tmp_path / "all" / "verify.md").read_text()
    # Three of the four shards' manifests: one line, exit 2, nothing judged.
    some = [str(m) for m in _files(manifests)[:3]]
    code = run_python(
        ["-m", "loadtest", "verify", "--manifest", *some, "--lake-root", str(lake)],
        _env(), tmp_path / "three.log", 300,
    )  # fmt: skip
    said = (tmp_path / "three.log").read_text()
    assert code == 2, said
    assert said.strip().splitlines()[-1] == (
        "error: the 3 manifests are not one run's: the manifests of shard 3 are missing: "
        "verify gets the manifest of each of the run's 4 shards exactly once"
    )


@pytest.mark.slow
def test_short_loadtest_through_the_event_hubs_shaped_listener(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code = run_python(
        ["-m", "loadtest", "run", "--target", "local_sasl", "--rate", "300", "--duration-s", "20",
         "--warmup-s", "10", "--fleet-size", "20", "--partitions", "2", "--out-dir", str(out),
         "--no-dashboard-report", "--max-p95-latency-s", "600"],
        _env(), tmp_path / "loadtest.log", 1500,
    )  # fmt: skip
    log = (tmp_path / "loadtest.log").read_text()
    assert code == 0, log[-5000:]
    assert "load test: PASS" in log and "verify: PASS" in log
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] is True and report["target"] == "local_sasl"
    assert [c["name"] for c in report["criteria"]] == [
        "rate", "latency", "lost", "processed", "duplicated", "out_of_sequence"
    ]  # fmt: skip
    assert report["verify"]["counts"]["acked"] == report["producer"]["acked"] > 5000
    latency = report["verify"]["latency"]
    assert latency["stages"]["gold"]["count"] > 0
    # The 10 s warm-up (about 3,000 readings) counts for loss, not for latency.
    assert latency["events"] < report["verify"]["counts"]["acked"] - 2000
    assert "(warm-up)" in latency["excluded"]
    for name in ("report.md", "report.html", "rate.svg", "latency.svg", "manifest.jsonl"):
        assert (out / name).is_file(), name
    assert not (out / "broker").exists()
    assert "SharedAccessKey=" not in log
