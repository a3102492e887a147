"""verify on a synthetic manifest and tiny Delta tables written by delta-rs (no Spark).

Two devices on two partitions. Times are seconds after T0; every expected figure
below is worked out by hand from the rows this file writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from common.intervals import interval_seconds
from loadtest.__main__ import main
from loadtest.lake import read_lake, read_truth
from loadtest.verify import LakeFrames, VerifyConfig, verify

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
DEVICES = {"dev-00000": 0, "dev-00001": 1}  # device -> partition


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def eid(device: str, seq: int) -> str:
    return f"{device[-1]}0000000-0000-4000-8000-{seq:012d}"


def payload(device: str, seq: int, t: float) -> bytes:
    return json.dumps(
        {"event_id": eid(device, seq), "device_id": device, "seq": seq,
         "event_time": at(t).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
         "schema_version": 1, "status": "online", "temperature_c": 21.5},
        separators=(",", ":"),
    ).encode()  # fmt: skip


@dataclass
class Run:
    """What a run sent (manifest) and what the tables hold, before writing."""

    sends: dict[str, list[tuple[int, float, float]]]  # device -> (seq, event t, kafka t) in order
    faults: list[dict] = field(default_factory=list)
    extra_bronze: list[tuple[str, bytes, float]] = field(default_factory=list)  # device, raw, t
    not_in_silver: set[str] = field(default_factory=set)
    quarantine: list[tuple[str, str | None, bytes, str]] = field(default_factory=list)
    processed: dict[int, float] = field(default_factory=dict)  # seq -> silver batch start
    metrics: list[tuple[str, float, int, int]] = field(default_factory=list)
    gold_commits: list[float] = field(default_factory=list)  # gold/device_1m MERGE times
    start_time: str | None = None

    def write(
        self, tmp: Path, *, lose: str | None = None, duplicate: str | None = None
    ) -> tuple[Path, Path]:
        tmp.mkdir(parents=True, exist_ok=True)
        manifest = tmp / "manifest.jsonl"
        lines = [{"type": "header", "manifest_version": 1,
                  "run": {"seed": 1, "fleet_size": 2, "start_time": self.start_time, "replay": None},
                  "totals": {"messages_sent": 0, "messages_failed": 0,
                             "events_acked": sum(map(len, self.sends.values()))}}]  # fmt: skip
        for device, sends in self.sends.items():
            lines.append({"type": "device", "device_id": device, "acked": len(sends),
                          "seqs": [s for s, _, _ in sends],
                          "event_ids": [eid(device, s) for s, _, _ in sends]})  # fmt: skip
        lines += [{"type": "fault", **f} for f in self.faults]
        manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))

        bronze: list[dict] = []
        silver: list[dict] = []
        offsets = dict.fromkeys(DEVICES.values(), 0)
        rows: list[tuple[str, bytes, float, int | None, float | None]] = []
        for device, sends in self.sends.items():
            for seq, t, kt in sends:
                rows.append((device, payload(device, seq, t), kt, seq, t))
        rows += [(d, raw, kt, None, None) for d, raw, kt in self.extra_bronze]
        for device, raw, kt, seq, t in sorted(rows, key=lambda r: r[2]):
            p = DEVICES[device]
            off = offsets[p]
            offsets[p] += 1
            if seq is not None and eid(device, seq) == lose:
                continue  # acknowledged, never reached bronze
            bronze.append({"value": raw, "partition": p, "offset": off,
                           "kafka_timestamp": at(kt), "ingest_time": at(kt + 0.9)})  # fmt: skip
            if seq is None or eid(device, seq) in self.not_in_silver:
                continue
            if any(r["event_id"] == eid(device, seq) for r in silver):
                continue  # the resend of a duplicate: silver deduplicates it
            row = {"event_id": eid(device, seq), "device_id": device, "seq": seq,
                   "event_time": at(t), "partition": p, "offset": off, "kafka_timestamp": at(kt),
                   # Silver reads the source itself: its ingest time is its own batch's.
                   "ingest_time": at(self.processed[seq]),
                   "processed_time": at(self.processed[seq])}  # fmt: skip
            silver.append(row)
            if eid(device, seq) == duplicate:
                silver.append(dict(row))
        lake = tmp / "lake"
        ts = pa.timestamp("us", tz="UTC")
        write_deltalake(str(lake / "bronze/events"), pa.Table.from_pylist(bronze, pa.schema(
            [("value", pa.binary()), ("partition", pa.int32()), ("offset", pa.int64()),
             ("kafka_timestamp", ts), ("ingest_time", ts)])))  # fmt: skip
        write_deltalake(str(lake / "silver/events"), pa.Table.from_pylist(silver, pa.schema(
            [("event_id", pa.string()), ("device_id", pa.string()), ("seq", pa.int64()),
             ("event_time", ts), ("partition", pa.int32()), ("offset", pa.int64()),
             ("kafka_timestamp", ts), ("ingest_time", ts), ("processed_time", ts)])))  # fmt: skip
        quarantine = []
        for device, qid, raw, reason in self.quarantine:
            b = next(r for r in bronze if r["value"] == raw)
            quarantine.append({"reason": reason, "raw": raw.decode(), "event_id": qid,
                               "device_id": device, "partition": b["partition"],
                               "offset": b["offset"]})  # fmt: skip
        write_deltalake(str(lake / "silver/quarantine"), pa.Table.from_pylist(quarantine, pa.schema(
            [("reason", pa.string()), ("raw", pa.string()), ("event_id", pa.string()),
             ("device_id", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())])))  # fmt: skip
        metrics = [{"query_name": q, "timestamp": at(s), "batch_duration_ms": ms,
                    "num_input_rows": n, "rows_dropped_by_watermark": 0}
                   for q, s, ms, n in self.metrics]  # fmt: skip
        write_deltalake(str(lake / "ops/pipeline_metrics"), pa.Table.from_pylist(metrics, pa.schema(
            [("query_name", pa.string()), ("timestamp", ts), ("batch_duration_ms", pa.int64()),
             ("num_input_rows", pa.int64()), ("rows_dropped_by_watermark", pa.int64())])))  # fmt: skip
        return manifest, lake


def clean_run() -> Run:
    """Seq k of each device at t = 10k s, in Kafka 0.1 s later; silver batches at 33 and 53 s."""
    sends = {d: [(k, 10.0 * k, 10.0 * k + 0.1) for k in range(1, 6)] for d in DEVICES}
    return Run(
        sends=sends,
        processed={1: 33.0, 2: 33.0, 3: 33.0, 4: 53.0, 5: 53.0},
        metrics=[("silver", 33.0, 1000, 6), ("silver", 53.0, 2200, 4)],
        # The silver batch at 33 s adds its events to gold at 34.2 s; the one at 53 s at 54 s.
        gold_commits=[34.2, 54.0],
    )  # fmt: skip


def run_verify(tmp_path: Path, run: Run, **kw) -> object:
    """verify in one bucket, and in buckets of three readings: the same findings."""
    manifest, lake = run.write(tmp_path, **kw)
    truth, cfg = read_truth(manifest), VerifyConfig(watermark_s=10.0, slack_s=5.0)
    whole = verify(truth, frames(lake, run), cfg)
    split = verify(truth, frames(lake, run), cfg, rows_per_bucket=3)
    assert split.to_dict() == whole.to_dict()
    return whole


def frames(lake: Path, run: Run) -> LakeFrames:
    """The tables as read, with gold's commit times those of the run (not the test's clock)."""
    commits = pl.DataFrame({"committed": [at(t) for t in run.gold_commits]},
                           schema={"committed": pl.Datetime("us", "UTC")})  # fmt: skip
    return replace(read_lake(str(lake)), gold_commits=commits)


@pytest.mark.parametrize("folder", ["lake", "a lake"])
def test_clean_run_passes_with_exact_latencies(tmp_path: Path, folder: str) -> None:
    """Also under a folder with a space in its name (delta-rs gives such paths encoded)."""
    result = run_verify(tmp_path / folder, clean_run())
    assert result.ok, result.summary()
    assert result.failures == [] and result.warnings == []
    assert result.counts["acked"] == 10 and result.counts["bronze_rows"] == 10
    assert result.loss["total"] == 0 and result.duplicates["silver_duplicated_ids"] == 0
    assert result.sequence["expected"] == 0 and result.sequence["actual"] == 0
    stages = result.latency["stages"]
    assert result.latency["events"] == 10
    assert stages["kafka"] == {"count": 10, "p50": 0.1, "p95": 0.1, "p99": 0.1, "max": 0.1}
    assert stages["bronze"]["p50"] == 1.0
    # silver: processed at 33 s (k = 1..3) or 53 s (k = 4, 5): 23, 13, 3, 13, 3 per device.
    assert stages["silver"] == {"count": 10, "p50": 13.0, "p95": 23.0, "p99": 23.0, "max": 23.0}
    # gold: processed at 33 s -> gold commit 34.2 s; at 53 s -> 54 s: 24.2, 14.2, 4.2, 14, 4
    # per device (nearest rank: p50 is the 5th of 10, p95 the 10th).
    assert stages["gold"] == {"count": 10, "p50": 14.0, "p95": 24.2, "p99": 24.2, "max": 24.2}
    assert result.latency["not_in_gold"] == 0


def test_an_avro_run_is_refused_in_one_line(tmp_path: Path) -> None:
    manifest, lake = clean_run().write(tmp_path)
    truth = read_truth(manifest)
    truth.header["run"]["format"] = "avro"
    with pytest.raises(ValueError) as exc:
        verify(truth, frames(lake, clean_run()))
    assert str(exc.value) == (
        "verify reads JSON payloads, and this run sent avro: run load tests with --format json"
    )


def test_events_after_the_last_gold_commit_are_not_in_gold(tmp_path: Path) -> None:
    run = clean_run()
    run.gold_commits = [34.2]
    result = run_verify(tmp_path, run)
    # Seq 4 and 5 (processed at 53 s) have no gold commit after them.
    assert result.latency["stages"]["gold"] == {
        "count": 6, "p50": 14.2, "p95": 24.2, "p99": 24.2, "max": 24.2
    }  # fmt: skip
    assert result.latency["not_in_gold"] == 4


def test_without_gold_commits_gold_is_not_measured(tmp_path: Path) -> None:
    run = clean_run()
    run.gold_commits = []
    result = run_verify(tmp_path, run)
    assert result.latency["stages"]["gold"]["count"] == 0
    assert result.latency["not_in_gold"] == 10
    assert "not measured" in result.latency["note"]


def test_latency_from_leaves_the_warm_up_out_of_latency_only(tmp_path: Path) -> None:
    manifest, lake = clean_run().write(tmp_path)
    cfg = VerifyConfig(watermark_s=10.0, slack_s=5.0, latency_from=at(30.0))
    result = verify(read_truth(manifest), frames(lake, clean_run()), cfg)
    assert result.ok and result.counts["acked"] == 10  # loss and duplicates: every reading
    # Seq 3..5 (t = 30, 40, 50 s) per device. Silver: 33-30, 53-40, 53-50 = 3, 13, 3.
    # Gold: 34.2-30, 54-40, 54-50 = 4.2, 14, 4; six values, nearest rank: p50 the 4th, p95 the 6th.
    assert result.latency["events"] == 6
    stages = result.latency["stages"]
    assert stages["silver"] == {"count": 6, "p50": 3.0, "p95": 13.0, "p99": 13.0, "max": 13.0}
    assert stages["gold"] == {"count": 6, "p50": 4.2, "p95": 14.0, "p99": 14.0, "max": 14.0}
    assert "2026-03-01T12:00:30+00:00 (warm-up)" in result.latency["excluded"]


def test_one_lost_event_is_caught(tmp_path: Path) -> None:
    lost = eid("dev-00001", 3)
    result = run_verify(tmp_path, clean_run(), lose=lost)
    assert not result.ok
    assert result.loss["missing_from_bronze"] == 1 and result.loss["total"] == 1
    assert result.loss["examples_missing_from_bronze"] == [
        {"event_id": lost, "device_id": "dev-00001", "seq": 3}
    ]
    assert len(result.failures) == 1 and lost in result.failures[0]
    assert result.duplicates["silver_duplicated_ids"] == 0


def test_one_duplicated_event_is_caught(tmp_path: Path) -> None:
    doubled = eid("dev-00000", 4)
    result = run_verify(tmp_path, clean_run(), duplicate=doubled)
    assert not result.ok
    assert result.duplicates["silver_duplicated_ids"] == 1
    assert result.duplicates["silver_extra_rows"] == 1
    assert result.duplicates["examples"] == [{"event_id": doubled, "copies": 2}]
    assert len(result.failures) == 1 and doubled in result.failures[0]
    assert result.loss["total"] == 0


def test_a_redelivered_copy_warns_and_an_id_collision_fails(tmp_path: Path) -> None:
    """Planted: an identical second copy of dev-00001/2 (a redelivery: warning only) and a
    different event under dev-00000/4's id (a collision: failure), both arriving at 55 s."""
    redelivered = payload("dev-00001", 2, 20)
    clash = payload("dev-00000", 4, 40).replace(b'"temperature_c":21.5', b'"temperature_c":30.0')
    assert clash != payload("dev-00000", 4, 40)
    run = clean_run()
    run.extra_bronze = [("dev-00001", redelivered, 55.0)]
    only_redelivered = run_verify(tmp_path / "a", run)
    assert only_redelivered.ok, only_redelivered.failures
    d = only_redelivered.duplicates
    assert (d["bronze_collided_ids"], d["bronze_collided_rows"]) == (0, 0)
    assert d["bronze_identical_copies"] == 1 == d["bronze_unexpected_copies"]
    assert only_redelivered.warnings == [
        "bronze holds 1 copies beyond the injected duplicates (redelivery upstream of the "
        "processor; silver must still hold one)"
    ]

    run.extra_bronze.append(("dev-00000", clash, 55.0))
    result = run_verify(tmp_path / "b", run)
    assert not result.ok
    d = result.duplicates
    assert d["bronze_collided_ids"] == 1 and d["bronze_collided_rows"] == 2
    assert d["bronze_identical_copies"] == 1
    assert d["examples_collisions"] == [
        {"event_id": eid("dev-00000", 4), "copies": 2, "contents": 2}
    ]
    assert result.failures == [
        f"1 event ids carry different events in bronze (2 rows; e.g. {eid('dev-00000', 4)}): "
        "an id must name one event"
    ]
    assert "id collisions in bronze: 1 event ids on 2 rows" in result.summary()


def fault_run() -> Run:
    """Injected faults the pipeline handles correctly: verify passes and counts each one.

    dev-00000 sends 1, 2, 4, 5, then 3 late (event time 30 s, in Kafka at 50.2 s, when
    the newest event time is 50 s: 20 s late, beyond watermark 10 + slack 5: dropped),
    and 2 again (a duplicate). dev-00001 sends 1, 2, 4, 3 (out of order, 10 s late: kept),
    5, then two malformed payloads (broken JSON, seq as "n/a") and an oversized one that
    was never delivered.
    """
    broken = payload("dev-00001", 6, 60.0)[:40]
    wrong = payload("dev-00001", 7, 70.0).replace(b'"seq":7', b'"seq":"n/a"')
    run = Run(
        sends={
            "dev-00000": [(1, 10, 10.1), (2, 20, 20.1), (4, 40, 40.1), (5, 50, 50.1), (3, 30, 50.2)],
            "dev-00001": [(1, 10, 10.1), (2, 20, 20.1), (4, 40, 40.1), (3, 30, 40.2), (5, 50, 50.1)],
        },
        faults=[
            {"kind": "late", "device_id": "dev-00000", "event_id": eid("dev-00000", 3), "seq": 3,
             "delay_s": 20.2},
            {"kind": "duplicate", "device_id": "dev-00000", "event_id": eid("dev-00000", 2),
             "seq": 2, "gap": 4, "copies_acked": 2},
            {"kind": "out_of_order", "device_id": "dev-00001", "event_id": eid("dev-00001", 3),
             "seq": 3, "overtaken_by": 1},
            {"kind": "broken_json", "device_id": "dev-00001", "event_id": eid("dev-00001", 6),
             "seq": 6, "expected_reason": "unparsable", "delivered": True},
            {"kind": "wrong_type", "device_id": "dev-00001", "event_id": eid("dev-00001", 7),
             "seq": 7, "field": "seq", "expected_reason": "wrong_type:seq", "delivered": True},
            {"kind": "oversized", "device_id": "dev-00001", "event_id": eid("dev-00001", 8),
             "seq": 8, "expected_reason": "rejected_too_large", "delivered": False},
        ],
        extra_bronze=[
            ("dev-00000", payload("dev-00000", 2, 20), 51.0),
            ("dev-00001", broken, 60.1),
            ("dev-00001", wrong, 70.1),
        ],
        not_in_silver={eid("dev-00000", 3)},
        quarantine=[
            ("dev-00001", None, broken, "unparsable"),
            ("dev-00001", eid("dev-00001", 7), wrong, "wrong_type:seq"),
        ],
        processed={1: 33.0, 2: 33.0, 3: 53.0, 4: 53.0, 5: 53.0},
        metrics=[("silver", 33.0, 1000, 6), ("silver", 53.0, 1000, 6)],
        gold_commits=[33.9, 53.9],
    )  # fmt: skip
    return run


def test_injected_faults_are_accounted_for(tmp_path: Path) -> None:
    result = run_verify(tmp_path, fault_run())
    assert result.ok, result.summary()
    assert result.warnings == []
    assert result.counts["acked"] == 10 and result.counts["bronze_rows"] == 13
    assert result.loss["total"] == 0
    assert result.duplicates["bronze_injected_duplicates"] == 1
    assert result.duplicates["bronze_unexpected_copies"] == 0
    late = result.late
    assert late["injected"] == late["injected_over_watermark"] == late["injected_dropped"] == 1
    assert (late["dropped"], late["dropped_expected"], late["dropped_boundary"]) == (1, 1, 0)
    assert late["examples_dropped"] == [
        {"event_id": eid("dev-00000", 3), "device_id": "dev-00000", "seq": 3, "lateness_s": 20.0}
    ]
    assert late["kept_beyond"] == 0 and late["max_lateness_kept_s"] == 10.0
    q = result.quarantine
    assert q["ok"] and (q["expected"], q["quarantined"], q["not_delivered"]) == (2, 2, 1)
    assert q["by_reason"] == {"unparsable": {"injected": 1, "quarantined": 1},
                              "wrong_type:seq": {"injected": 1, "quarantined": 1}}  # fmt: skip
    s = result.sequence
    assert s["ok"] and (s["expected"], s["actual"]) == (2, 2)
    assert s["injected"] == {"late": 1, "out_of_order": 1}
    # Latency leaves out the late and out-of-order readings: 8 events.
    assert result.latency["events"] == 8


def test_a_drop_exactly_one_watermark_late_is_at_the_boundary_not_a_loss(tmp_path: Path) -> None:
    """Spark drops ``event_time <= watermark``: a lateness of exactly the watermark may go."""
    run = fault_run()
    at_watermark = eid("dev-00001", 3)  # 10 s late, the watermark being 10 s
    run.not_in_silver = {eid("dev-00000", 3), at_watermark}
    result = run_verify(tmp_path, run)
    assert result.ok, result.summary()
    assert result.loss["dropped_unexplained"] == 0
    late = result.late
    assert (late["dropped"], late["dropped_expected"], late["dropped_boundary"]) == (2, 1, 1)


def test_a_drop_the_watermark_does_not_explain_is_a_loss(tmp_path: Path) -> None:
    run = clean_run()
    gone = eid("dev-00000", 2)
    run.not_in_silver = {gone}
    result = run_verify(tmp_path, run)
    assert not result.ok
    assert result.loss["dropped_unexplained"] == 1
    assert result.loss["examples_dropped_unexplained"] == [
        {"event_id": gone, "device_id": "dev-00000", "seq": 2, "lateness_s": 0.0}
    ]


def test_rows_silver_has_not_read_yet_are_pending(tmp_path: Path) -> None:
    run = clean_run()
    run.not_in_silver = {eid("dev-00001", 5)}  # the last offset of partition 1
    result = run_verify(tmp_path, run)
    assert not result.ok
    assert result.loss["pending"] == 1 and result.loss["dropped_unexplained"] == 0
    assert "not yet read by silver" in result.failures[0]


def test_a_row_silver_committed_reading_past_is_not_pending_but_judged(tmp_path: Path) -> None:
    run = clean_run()
    gone = eid("dev-00001", 5)  # the last offset of partition 1
    run.not_in_silver = {gone}
    manifest, lake = run.write(tmp_path)
    truth, cfg = read_truth(manifest), VerifyConfig(watermark_s=10.0, slack_s=5.0)
    ends = (
        pl.read_delta(str(lake / "bronze" / "events"))
        .group_by("partition")
        .agg(pl.col("offset").max())
    )
    # Silver's checkpoint: its last committed batch read every partition to its end.
    read_to = {int(p): int(o) + 1 for p, o in ends.iter_rows()}
    result = verify(truth, replace(frames(lake, run), silver_read_to=read_to), cfg)
    # Read, and not in silver with no lateness to explain it: lost, not pending.
    assert result.loss["pending"] == 0 and result.loss["dropped_unexplained"] == 1
    assert result.loss["examples_dropped_unexplained"][0]["event_id"] == gone


def test_quarantine_and_sequence_mismatches_warn_or_fail_when_strict(tmp_path: Path) -> None:
    run = fault_run()
    run.quarantine = [run.quarantine[0]]  # the wrong-type payload was not quarantined
    manifest, lake = run.write(tmp_path)
    truth, tables = read_truth(manifest), frames(lake, run)
    loose = verify(truth, tables, VerifyConfig(watermark_s=10.0, slack_s=5.0))
    assert loose.ok and loose.quarantine["missing"] == 1
    assert loose.quarantine["examples"][0]["expected_reason"] == "wrong_type:seq"
    assert len(loose.warnings) == 1 and "1 missing" in loose.warnings[0]
    strict = verify(truth, tables, VerifyConfig(watermark_s=10.0, slack_s=5.0, strict=True))
    assert not strict.ok and strict.failures == loose.warnings


def test_simulated_clock_runs_have_no_latency(tmp_path: Path) -> None:
    run = clean_run()
    run.start_time = "2026-01-01T00:00:00+00:00"
    result = run_verify(tmp_path, run)
    assert result.ok and result.latency["stages"] == {}
    assert "simulated" in result.latency["note"]


def test_cli_exit_codes_and_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest, lake = clean_run().write(tmp_path / "clean")
    assert read_lake(str(lake)).gold_commits.height == 0  # the test wrote no gold table
    out = tmp_path / "out"
    args = ["verify", "--manifest", str(manifest), "--lake-root", str(lake),
            "--watermark", "10 seconds", "--slack-s", "5", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    report = json.loads((out / "verify.json").read_text())
    assert report["ok"] is True and report["counts"]["acked"] == 10
    assert (out / "verify.md").read_text().startswith("# verify: PASS")
    assert "verify: PASS" in capsys.readouterr().out

    manifest, lake = clean_run().write(tmp_path / "dup", duplicate=eid("dev-00000", 1))
    assert main(["verify", "--manifest", str(manifest), "--lake-root", str(lake)]) == 1
    assert "duplicated in silver" in capsys.readouterr().out
    assert (
        main(["verify", "--manifest", str(tmp_path / "none.jsonl"), "--lake-root", str(lake)]) == 2
    )
    assert "no manifest" in capsys.readouterr().err

    manifest, lake = clean_run().write(tmp_path / "warm")
    args = ["verify", "--manifest", str(manifest), "--lake-root", str(lake),
            "--watermark", "10 seconds", "--slack-s", "5", "--out", str(out)]  # fmt: skip
    assert main([*args, "--latency-from", at(30.0).strftime("%Y-%m-%dT%H:%M:%SZ")]) == 0
    assert json.loads((out / "verify.json").read_text())["latency"]["events"] == 6
    assert main([*args, "--latency-from", "2026-03-01T12:00:30"]) == 2
    assert "is not an ISO-8601 time with a zone" in capsys.readouterr().err


def test_a_manifest_cut_short_or_missing_a_worker_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest, lake = clean_run().write(tmp_path)
    lines = manifest.read_text().splitlines(keepends=True)
    assert [json.loads(line)["type"] for line in lines] == ["header", "device", "device"]
    manifest.write_text("".join(lines[:2]))  # the second device's line lost at a line's end
    args = ["verify", "--manifest", str(manifest), "--lake-root", str(lake)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "its device lines list 5 readings but its header counts 10: the file is cut" in err

    header = json.loads(lines[0])
    header["run"]["incomplete"] = "worker 1 of 2 wrote no manifest"
    manifest.write_text(json.dumps(header) + "\n" + "".join(lines[1:]))
    assert main(args) == 2
    assert "worker 1 of 2 wrote no manifest: its devices' readings are not listed" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2 minutes", 120.0), ("5 seconds", 5.0), ("1 minute 30 seconds", 90.0),
     ("interval 500 milliseconds", 0.5), ("1 hour", 3600.0)],
)  # fmt: skip
def test_interval_seconds(text: str, seconds: float) -> None:
    assert interval_seconds(text) == seconds


def test_interval_seconds_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="cannot read the interval"):
        interval_seconds("soon")
    with pytest.raises(ValueError, match="unknown unit"):
        interval_seconds("2 fortnights")


def _split(manifest: Path, folder: Path) -> list[Path]:
    """The manifest as two shards' manifests: each device line to its own shard."""
    lines = [json.loads(line) for line in manifest.read_text().splitlines()]
    header, devices = lines[0], [x for x in lines if x["type"] == "device"]
    folder.mkdir()
    out = []
    for k, device in enumerate(devices):
        run = header["run"] | {"shard": {"index": k, "count": len(devices)}}
        part = [header | {"run": run, "totals": {"messages_sent": device["acked"]}}, device]
        out.append(folder / f"manifest-{k}.jsonl")
        out[-1].write_text("".join(json.dumps(x) + "\n" for x in part))
    return out


def test_verify_reads_the_manifests_of_a_runs_shards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest, lake = clean_run().write(tmp_path / "clean")
    shards = _split(manifest, tmp_path / "shards")
    judge = ["--lake-root", str(lake), "--watermark", "10 seconds", "--slack-s", "5"]
    for named in ([str(tmp_path / "shards")], [str(p) for p in shards],
                  [str(tmp_path / "shards" / "manifest-*.jsonl")]):  # fmt: skip
        out = tmp_path / f"out{len(named)}"
        assert main(["verify", "--manifest", *named, *judge, "--out", str(out)]) == 0
        report = json.loads((out / "verify.json").read_text())
        assert report["counts"]["acked"] == 10 and report["ok"] is True
    truth = read_truth(shards)
    assert truth.header["run"]["shards"] == 2 and "shard" not in truth.header["run"]
    assert truth.header["totals"] == {"messages_sent": 10}
    capsys.readouterr()

    def error_of(*named: str) -> str:
        assert main(["verify", "--manifest", *named, *judge]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        return err.strip()

    assert error_of(str(shards[0])) == (
        f"error: {shards[0]} is not a readable producer manifest: the manifests of shard 1 are "
        "missing: verify gets the manifest of each of the run's 2 shards exactly once"
    )
    assert error_of(str(shards[0]), str(shards[0]), str(tmp_path / "shards" / "*-0.jsonl")) == (
        f"error: {shards[0]} is not a readable producer manifest: the manifests of shard 1 are "
        "missing: verify gets the manifest of each of the run's 2 shards exactly once"
    )  # a file named twice is read once
    other = tmp_path / "other.jsonl"
    lines = shards[1].read_text().splitlines()
    head = json.loads(lines[0])
    head["run"]["seed"] = 2
    other.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    assert error_of(str(shards[0]), str(other)) == (
        "error: the 2 manifests are not one run's: the manifests are of different runs: "
        "their seed differs (1 against 2)"
    )
    assert error_of(str(tmp_path / "nothing-*.jsonl")) == (
        f"error: no manifest matches {tmp_path / 'nothing-*.jsonl'}: check the pattern"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert error_of(str(empty)) == f"error: no manifest (*.jsonl) in the folder {empty}"
    assert error_of(str(shards[0]), "--reports", str(tmp_path / "r.json")) == (
        f"error: no report at {tmp_path / 'r.json'}"
    )


def test_a_bad_manifest_line_is_named_and_a_bad_out_folder_is_refused_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest, lake = clean_run().write(tmp_path)
    lines = manifest.read_text().splitlines(keepends=True)
    args = ["verify", "--manifest", str(manifest), "--lake-root", str(lake)]
    for bad, said in [
        ("null\n", "line 2 is not a manifest line (a JSON object with a type)"),
        (lines[1][:30] + "\n", "line 2 is not JSON ("),
    ]:
        manifest.write_text(lines[0] + bad + "".join(lines[2:]))
        assert main(args) == 2
        assert said in capsys.readouterr().err
    manifest.write_text("".join(lines) + "\n")  # a blank last line is no line
    assert main(args) == 0
    capsys.readouterr()

    a_file = tmp_path / "a-file"
    a_file.write_text("")
    assert main([*args, "--out", str(a_file)]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # refused before the checks ran
    assert err.startswith(f"error: --out: cannot write the results to {a_file} (")


def test_a_lake_store_that_takes_connections_but_never_answers_is_one_line_within_30_s() -> None:
    import socket
    import time

    from common.lake_settings import LakeSettings
    from loadtest.lake import LakeReadError

    with socket.create_server(("127.0.0.1", 0)) as silent:
        silent.listen(50)
        lake = LakeSettings(
            _env_file=None, root="s3a://bucket/iot", s3_region="us-east-1",
            s3_endpoint=f"http://127.0.0.1:{silent.getsockname()[1]}",
            s3_access_key_id="a", s3_secret_access_key="b",
        )  # fmt: skip
        began = time.monotonic()
        with pytest.raises(LakeReadError) as caught:
            read_lake(lake.root, lake.storage_options())
        assert time.monotonic() - began < 30
    said = str(caught.value)
    assert said.startswith("the lake's store did not answer for s3a://bucket/iot/bronze/events (")
    assert said.endswith("): check IOT_LAKE_S3_ENDPOINT and the keys") and "\n" not in said
