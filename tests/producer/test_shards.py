"""A fleet split into shards (one per host) sends what one process with as many workers sends."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from common.stop_signals import StopFlag
from producer.__main__ import main
from producer.settings import ProducerSettings
from producer.shards import Shard, wait_until
from tests.manifests import read_manifest

START = "2026-01-01T00:00:00Z"
RUN = ("--transport", "file", "--rate", "0", "--start-time", START, "--clock-rate", "100",
       "--count", "3001", "--fleet-size", "12", "--scenario", "realistic",
       "--deterministic-ids")  # fmt: skip


@pytest.fixture(autouse=True)
def _no_iot_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith("IOT_") or key == "JOB_COMPLETION_INDEX":
            monkeypatch.delenv(key)


def _run(tmp: Path, name: str, *extra: str) -> tuple[Path, Path, Path]:
    out, manifest, report = tmp / "land", tmp / f"{name}.jsonl", tmp / f"{name}.json"
    rc = main([*RUN, "--out-dir", str(out), "--manifest-path", str(manifest),
               "--report-path", str(report), *extra])  # fmt: skip
    assert rc == 0
    return out, manifest, report


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.jsonl"))}


@pytest.mark.parametrize(("shards", "workers"), [(4, 1), (2, 2)])
def test_shards_send_byte_for_byte_what_one_process_with_four_workers_sends(
    tmp_path, shards, workers
):
    whole_out, whole_manifest, _ = _run(tmp_path / "whole", "m", "--workers", "4")
    manifests = []
    for k in range(shards):
        _, manifest, report = _run(
            tmp_path / "shards", f"m{k}", "--shard", f"{k}/{shards}", "--workers", str(workers)
        )
        manifests.append(read_manifest(manifest))
        rep = json.loads(report.read_text())
        assert rep["readings"] == sum(3001 // 4 + (s < 3001 % 4) for s in range(k, 4, shards))
        header = manifests[-1]["header"]["run"]
        assert header["shard"] == {"index": k, "count": shards}
    # Worker w of shard k owns slot k + shards * w: the same files, the same bytes.
    assert _files(tmp_path / "shards" / "land") == _files(whole_out)
    whole = read_manifest(whole_manifest)
    devices = {d: line for m in manifests for d, line in m["devices"].items()}
    assert sorted(devices) == sorted(whole["devices"]) == [f"dev-{i:05d}" for i in range(12)]
    assert devices == whole["devices"]
    for m, k in zip(manifests, range(shards), strict=True):
        assert sorted(m["devices"]) == [f"dev-{i:05d}" for i in range(k, 12, shards)]
    faults = sorted(json.dumps(f, sort_keys=True) for m in manifests for f in m["faults"])
    assert faults == sorted(json.dumps(f, sort_keys=True) for f in whole["faults"])


def test_a_shard_takes_its_index_from_an_indexed_job(tmp_path, monkeypatch):
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "2")
    _, manifest, _ = _run(tmp_path, "m", "--shard", "3")
    truth = read_manifest(manifest)
    assert truth["header"]["run"]["shard"] == {"index": 2, "count": 3}
    assert sorted(truth["devices"]) == ["dev-00002", "dev-00005", "dev-00008", "dev-00011"]


def test_shard_parsing():
    assert Shard.parse(None) == Shard(0, 1)
    assert Shard.parse("3/8") == Shard(3, 8)
    assert Shard.parse(" 0 / 1 ") == Shard(0, 1)
    assert Shard.parse("8", {"JOB_COMPLETION_INDEX": "7"}) == Shard(7, 8)
    assert Shard(3, 8).slot(0, 1) == (3, 8)
    assert Shard(1, 2).slot(1, 3) == (3, 6)
    assert str(Shard(1, 4)) == "1/4"
    bad = {
        "4/4": "shard 4/4: the index must be 0 to 3",
        "a/4": "shard 'a/4': use K/N (e.g. 0/4), or N with JOB_COMPLETION_INDEX set",
        "0/0": "shard 0/0: the index must be 0 to -1",
    }
    for text, says in bad.items():
        with pytest.raises(ValueError) as err:
            Shard.parse(text)
        assert str(err.value) == says
    with pytest.raises(ValueError) as err:
        Shard.parse("4", {})
    assert str(err.value) == (
        "shard '4' takes its index from JOB_COMPLETION_INDEX, which is not set: give K/N instead"
    )
    with pytest.raises(ValueError) as err:
        Shard.parse("4", {"JOB_COMPLETION_INDEX": "x"})
    assert "which is 'x'" in str(err.value)


def test_bad_shards_are_one_line_and_exit_2(tmp_path, capsys):
    for args, says in (
        (["--shard", "5/4"], "shard 5/4: the index must be 0 to 3"),
        (["--shard", "0/4", "--workers", "4", "--fleet-size", "12"],
         "workers x shards (4 x 4) is more than the 12 devices"),
        (["--shard", "0/2", "--replay", str(tmp_path / "x")],
         "replay sends one file in order: it cannot be split into shards"),
        (["--start-at", "2026-01-01T00:00:00"], "start_at must carry a UTC offset"),
    ):  # fmt: skip
        assert main(["--transport", "file", "--out-dir", str(tmp_path), *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err


class _Clock:
    """A wall clock that moves only when slept on."""

    def __init__(self, t: float) -> None:
        self.t = t
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def test_wait_until_holds_until_the_start_time():
    at = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    clock, said = _Clock(at.timestamp() - 0.35), []
    waited = wait_until(at, StopFlag(), say=said.append, now=clock.now, sleep=clock.sleep)
    assert waited == pytest.approx(0.35)
    assert clock.t == pytest.approx(at.timestamp())
    assert [round(s, 3) for s in clock.slept] == [0.1, 0.1, 0.1, 0.05]
    assert said == ["[producer] waiting 0.3 s for the start time 2026-03-01 12:00:00.000 UTC"]


def test_wait_until_a_past_time_starts_at_once_and_says_how_late():
    at = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    clock, said = _Clock(at.timestamp() + 4.25), []
    assert wait_until(at, StopFlag(), say=said.append, now=clock.now, sleep=clock.sleep) == 0
    assert clock.slept == []
    assert said == [
        "[producer] the start time 2026-03-01 12:00:00.000 UTC passed 4.2 s ago: starting now"
    ]


def test_wait_until_ends_at_a_stop():
    at = datetime.now(UTC) + timedelta(hours=1)
    stop = StopFlag()
    stop.set("SIGTERM")
    assert wait_until(at, stop) < 0.05


def test_a_shard_sends_its_share_of_the_rate():
    settings = ProducerSettings(rate=4000, shard="1/4", workers=2, fleet_size=100)
    assert settings.fleet_shard() == Shard(1, 4)
    assert settings.fleet_shard().slot(1, settings.workers) == (5, 8)


def test_shards_given_one_start_time_start_together(tmp_path):
    at = datetime.now(UTC) + timedelta(seconds=2)
    starts = []
    for k in range(2):
        out = tmp_path / f"land{k}"
        rc = main(["--transport", "file", "--out-dir", str(out), "--rate", "500",
                   "--count", "200", "--fleet-size", "10", "--shard", f"{k}/2",
                   "--start-at", at.isoformat(), "--report-path", str(tmp_path / f"{k}.json")])  # fmt: skip
        assert rc == 0
        rep = json.loads((tmp_path / f"{k}.json").read_text())
        starts.append(datetime.fromisoformat(rep["started_at"]))
        assert rep["readings"] == 100 and rep["target_rate"] == pytest.approx(250, rel=0.05)
    # The first waited for the start time; the second, run after it, started late at once.
    assert at <= starts[0] < at + timedelta(seconds=0.5)
    assert starts[1] > starts[0]
