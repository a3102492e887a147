"""The producer end to end without a broker: file and stdout sinks, rate, stop, replay, manifest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest

from common.latency import LatencyHistogram
from common.report import RUNNING
from producer.__main__ import main
from producer.launch import throughput_warning
from producer.pacing import Pacer
from producer.run import Limits, Progress, run
from producer.settings import ProducerSettings
from tests.manifests import read_manifest

ROOT = Path(__file__).resolve().parents[2]
START = "2026-01-01T00:00:00Z"
QUIET = Progress(show=False)


@pytest.fixture(autouse=True)
def _no_iot_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith("IOT_"):
            monkeypatch.delenv(key)


def _file_run(tmp: Path, *extra: str, name: str = "out") -> tuple[int, Path, Path, Path]:
    out, manifest, report = tmp / name, tmp / f"{name}.manifest.jsonl", tmp / f"{name}.json"
    rc = main([
        "--transport", "file", "--out-dir", str(out), "--rate", "0", "--start-time", START,
        "--clock-rate", "100", "--manifest-path", str(manifest), "--report-path", str(report),
        *extra,
    ])  # fmt: skip
    return rc, out, manifest, report


def _lines(folder: Path) -> list[bytes]:
    return [line for f in sorted(folder.glob("*.jsonl")) for line in f.read_bytes().splitlines()]


def _parsed(lines: list[bytes]) -> list[dict]:
    """The lines that are JSON objects with an event id (not broken or missing it)."""
    out = []
    for line in lines:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if "event_id" in event:
            out.append(event)
    return out


def _ids(lines: list[bytes]) -> set[str]:
    return {e["event_id"] for e in _parsed(lines)}


def _seeded_lines(tmp: Path, name: str, *extra: str) -> list[bytes]:
    rc, out, _, _ = _file_run(tmp, "--count", "3000", "--fleet-size", "10", "--seed", "5",
                              "--scenario", "realistic", *extra, name=name)  # fmt: skip
    assert rc == 0
    return _lines(out)


def test_event_ids_are_unique_across_runs_unless_asked_to_repeat(tmp_path):
    """Two runs of one seed share no event id; with --deterministic-ids they are identical."""
    lines = _seeded_lines
    a, b = lines(tmp_path, "a"), lines(tmp_path, "b")
    assert len(_ids(a)) > 2900 and not _ids(a) & _ids(b)
    # The seed still fixes everything else: the same readings, the same faults.
    assert len(a) == len(b)
    assert [e | {"event_id": ""} for e in _parsed(a)] == [e | {"event_id": ""} for e in _parsed(b)]
    c, d = lines(tmp_path, "c", "--deterministic-ids"), lines(tmp_path, "d", "--deterministic-ids")
    assert c == d and not _ids(c) & _ids(a)


def test_same_seed_same_bytes_and_manifest_matches_output(tmp_path):
    args = ("--count", "6000", "--fleet-size", "30", "--seed", "3", "--scenario", "chaos",
            "--file-roll-events", "1000", "--oversized-bytes", "3000", "--deterministic-ids")  # fmt: skip
    rc, out_a, manifest, report = _file_run(tmp_path, *args, name="a")
    assert rc == 0
    _, out_b, _, _ = _file_run(tmp_path, *args, name="b")
    lines = _lines(out_a)
    assert lines == _lines(out_b)
    assert [p.name for p in sorted(out_a.glob("*.jsonl"))] == [
        f"events-{i:06d}.jsonl" for i in range(len(lines) // 1000 + 1)
    ]

    truth = read_manifest(manifest)
    rep = json.loads(report.read_text())
    assert rep["sent"] == rep["acked"] == len(lines) == truth["header"]["totals"]["messages_sent"]
    assert rep["readings"] == 6000
    # Every valid reading in the files is in the manifest under its device, and nothing else.
    valid: dict[str, list[tuple[int, str]]] = {}
    for line in lines:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if {"event_id", "device_id", "seq"} <= set(event):  # else a missing_field fault
            valid.setdefault(event["device_id"], []).append((event["seq"], event["event_id"]))
    malformed = {f["event_id"] for f in truth["faults"]
                 if f["kind"] in ("wrong_type", "missing_field", "unknown_device", "oversized", "broken_json")}  # fmt: skip
    dups = Counter(f["event_id"] for f in truth["faults"] if f["kind"] == "duplicate")
    for device_id, dev in truth["devices"].items():
        sent = [(s, e) for s, e in valid.get(device_id, []) if e not in malformed]
        # each duplicate appears twice in the file, once in the manifest
        seen, firsts = set(), []
        for s, e in sent:
            if e not in seen:
                seen.add(e)
                firsts.append((s, e))
        assert list(zip(dev["seqs"], dev["event_ids"], strict=True)) == firsts
        assert len(sent) - len(firsts) == sum(dups[e] for _, e in firsts)
    # Gaps in seq are explained by dropouts and malformed payloads.
    dropped = {(a["device_id"], s) for a in truth["anomalies"] if a["kind"] == "dropout"
               for s in range(a["start_seq"], a["end_seq"] + 1)}  # fmt: skip
    broken = {(f["device_id"], f["seq"]) for f in truth["faults"] if f.get("event_id") in malformed}
    for device_id, dev in truth["devices"].items():
        missing = set(range(1, dev["last_seq"] + 1)) - set(dev["seqs"])
        assert missing == {s for d, s in dropped | broken if d == device_id}


def test_two_workers_are_reproducible(tmp_path):
    args = ("--count", "3000", "--fleet-size", "10", "--workers", "2", "--scenario", "realistic",
            "--deterministic-ids")  # fmt: skip
    rc, out_a, manifest, report = _file_run(tmp_path, *args, name="a")
    assert rc == 0
    _file_run(tmp_path, *args, name="b")
    names = sorted(p.name for p in out_a.glob("*.jsonl"))
    assert names == ["events-w00-000000.jsonl", "events-w01-000000.jsonl"]
    for name in names:
        assert (out_a / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    truth = read_manifest(manifest)
    assert sorted(truth["devices"]) == [f"dev-{i:05d}" for i in range(10)]
    assert (
        sum(len(d["seqs"]) for d in truth["devices"].values())
        == truth["header"]["totals"]["events_acked"]
    )
    rep = json.loads(report.read_text())
    assert rep["workers"] == 2 and rep["readings"] == 3000


def test_constant_rate_is_held(tmp_path):
    rc, _, _, report = _file_run(
        tmp_path, "--rate", "2000", "--duration-s", "2.5", "--fleet-size", "20"
    )
    rep = json.loads(report.read_text())
    assert rc == 0 and rep["stopped_by"] == "duration"
    assert abs(rep["achieved_rate"] - 2000) / 2000 < 0.05
    assert rep["target_rate"] == 2000.0 and rep["send_s"] <= rep["duration_s"]
    assert rep["per_second_target"][:2] == [2000.0, 2000.0]
    assert all(abs(n - 2000) <= 100 for n in rep["per_second"][:2])


def test_ramp_profile_follows_the_integral(tmp_path):
    rc, _, _, report = _file_run(
        tmp_path, "--rate-profile", "ramp:500:1500:2", "--duration-s", "2.5", "--fleet-size", "5"
    )
    rep = json.loads(report.read_text())
    assert rc == 0
    assert rep["per_second_target"][:2] == [750.0, 1250.0]
    assert abs(rep["per_second"][0] - 750) <= 60 and abs(rep["per_second"][1] - 1250) <= 60


def test_sigterm_flushes_and_writes_report_and_manifest(tmp_path):
    out, manifest, report = tmp_path / "land", tmp_path / "m.jsonl", tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "producer", "--transport", "file", "--out-dir", str(out),
         "--rate", "1000", "--scenario", "realistic", "--file-roll-events", "100000",
         "--manifest-path", str(manifest), "--report-path", str(report)],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    live = _live_reports(report, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    rep = json.loads(report.read_text())
    assert rep["stopped_by"] == "SIGTERM"
    assert rep["sent"] > live[-1]["sent"]
    lines = _lines(out)
    assert rep["sent"] == rep["acked"] == len(lines) > 500
    assert read_manifest(manifest)["header"]["totals"]["messages_sent"] == len(lines)
    assert "stopped by SIGTERM" in err


def test_a_worker_killed_mid_run_leaves_a_manifest_that_says_so(tmp_path):
    """The other worker's part is kept; the header names the missing one; verify refuses it."""
    import psutil

    from loadtest.truth import read_truth_files

    manifest, report = tmp_path / "m.jsonl", tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "producer", "--transport", "file", "--out-dir",
         str(tmp_path / "land"), "--rate", "400", "--workers", "2", "--fleet-size", "10",
         "--scenario", "clean", "--manifest-path", str(manifest), "--report-path", str(report)],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _live_reports(report, proc)
    workers = [
        c for c in psutil.Process(proc.pid).children()
        if "spawn_main" in " ".join(c.cmdline())
    ]  # fmt: skip
    assert len(workers) == 2
    workers[0].kill()
    workers[0].wait(10)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert "exited with code -9" in err

    got = read_manifest(manifest)
    (dead,) = {0, 1} - {int(d["device_id"][-1]) % 2 for d in got["devices"].values()}
    assert got["header"]["run"]["incomplete"] == f"worker {dead} of 2 wrote no manifest"
    assert len(got["devices"]) == 5 and all(d["acked"] > 0 for d in got["devices"].values())
    with pytest.raises(ValueError, match=f"^worker {dead} of 2 wrote no manifest: its devices'"):
        read_truth_files([manifest], tmp_path)


def test_a_reader_that_closes_stdout_ends_the_run_with_its_manifest_and_report(tmp_path):
    """``python -m producer --transport stdout | head -2``: a stop, not a broken pipe."""
    from loadtest.truth import read_truth_files

    manifest, report = tmp_path / "m.jsonl", tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")}
    shell = (
        f"{sys.executable} -m producer --transport stdout --count 100000 --rate 0 "
        f"--manifest-path {manifest} --report-path {report} | head -2"
    )
    done = subprocess.run(["bash", "-o", "pipefail", "-c", shell], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2
    assert "Broken pipe" not in done.stderr and "Traceback" not in done.stderr
    rep = json.loads(report.read_text())
    assert rep["stopped_by"] == "output closed" and rep["fatal"] is None
    assert 0 < rep["sent"] < 100_000
    truth = read_truth_files([manifest], tmp_path)  # whole: its lines add up to its header
    assert truth.events.collect().height == truth.header["totals"]["events_acked"] == rep["acked"]


def _live_reports(path: Path, proc: subprocess.Popen, n: int = 2) -> list[dict]:
    """Reports read while the producer runs: ``n`` refreshes, each further on than the last."""
    seen: list[dict] = []
    deadline = time.monotonic() + 30
    while len(seen) < n and time.monotonic() < deadline and proc.poll() is None:
        if path.exists():
            rep = json.loads(path.read_text())  # replaced atomically: never half a file
            if not seen or rep["sent"] > seen[-1]["sent"]:
                seen.append(rep)
        time.sleep(0.2)
    assert len(seen) == n, seen
    for rep in seen:
        assert rep["stopped_by"] == RUNNING
        assert 0 <= rep["acked"] <= rep["sent"] and len(rep["per_second"]) >= 1
    assert seen[1]["duration_s"] > seen[0]["duration_s"]
    return seen


def test_two_workers_refresh_the_report_while_they_run(tmp_path):
    report = tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "producer", "--transport", "file", "--out-dir",
         str(tmp_path / "land"), "--rate", "2000", "--workers", "2", "--duration-s", "8",
         "--file-roll-s", "0.5", "--report-path", str(report)],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    live = _live_reports(report, proc)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert live[0]["workers"] == 2
    assert abs(live[1]["sent"] - 2000 * live[1]["duration_s"]) <= 2000 * 0.5
    final = json.loads(report.read_text())
    assert final["stopped_by"] == "duration" and final["sent"] > live[-1]["sent"]


def test_a_bad_out_dir_is_one_line_and_exit_2(tmp_path, capsys):
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    for bad, says in ((a_file, "is not a folder"), (a_file / "sub", "cannot be written to")):
        assert main(["--transport", "file", "--out-dir", str(bad), "--count", "5"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: --out-dir {bad} {says}"), err
        assert err.endswith(": give a folder this user can create and write to\n"), err
    assert not list(tmp_path.glob("**/events-*.jsonl"))


def test_replay_sends_lines_verbatim(tmp_path, capsysbinary):
    recorded = [
        b'{"event_id":"e1","device_id":"dev-00001","seq":1,"x":1.50}',
        b"not json at all",
        b'{"event_id":"e2","device_id":"dev-00002","seq":7}',
        b'{"event_id":"e3","device_id":"dev-00001","seq":2}',
    ]
    src = tmp_path / "rec.jsonl"
    src.write_bytes(b"\n".join(recorded[:2]) + b"\r\n\n" + b"\n".join(recorded[2:]))
    manifest = tmp_path / "m.jsonl"
    rc = main(["--transport", "stdout", "--replay", str(src), "--rate", "0",
               "--manifest-path", str(manifest)])  # fmt: skip
    assert rc == 0
    assert capsysbinary.readouterr().out.splitlines() == recorded
    truth = read_manifest(manifest)
    assert truth["devices"]["dev-00001"]["seqs"] == [1, 2]
    assert truth["devices"]["dev-00001"]["event_ids"] == ["e1", "e3"]
    assert truth["devices"]["dev-00002"]["event_ids"] == ["e2"]
    assert truth["header"]["totals"]["unidentified_messages"] == 1


def test_throughput_unit_warning(tmp_path):
    over = ProducerSettings(rate=1500, throughput_units=1)
    assert "exceeds what 1 throughput unit(s) admit 1,000 events/s and 1 MB/s" in (
        throughput_warning(over) or ""
    )
    assert throughput_warning(ProducerSettings(rate=900, throughput_units=1)) is None
    assert throughput_warning(ProducerSettings(rate=1500)) is None
    spiky = ProducerSettings(rate_profile="spike:100:2500:5:5", throughput_units=2)
    assert "peak rate 2,500 events/s" in (throughput_warning(spiky) or "")
    assert throughput_warning(ProducerSettings(rate=0, throughput_units=3)).startswith(
        "the rate is unlimited"
    )
    # Bytes, not events, can be the limit: 900 events/s of 1.5 kB exceed 1 MB/s.
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"".join(b'{"pad":"' + b"x" * 1490 + b'"}\n' for _ in range(20)))
    heavy = throughput_warning(ProducerSettings(rate=900, throughput_units=1, replay=big))
    assert "900 events/s (about 1.35 MB/s at 1500 bytes per event)" in (heavy or "")
    assert throughput_warning(ProducerSettings(rate=600, throughput_units=1, replay=big)) is None


def test_invalid_settings_exit_2(capsys):
    assert main(["--transport", "stdout", "--workers", "2"]) == 2
    assert "transport=stdout needs workers=1" in capsys.readouterr().err
    assert main(["--rate-profile", "ramp:1"]) == 2
    assert "expected 3 numbers" in capsys.readouterr().err
    assert main(["--late-delay", "gamma:2"]) == 2
    assert "bad delay distribution" in capsys.readouterr().err
    assert main(["--transport", "file"]) == 2
    assert "transport=file needs --out-dir" in capsys.readouterr().err
    assert main(["--transport", "stdout", "--replay", "missing.jsonl"]) == 2
    assert capsys.readouterr().err == (
        "error: replay file missing.jsonl does not exist: give a JSON-lines file\n"
    )
    assert main(["--format", "avro"]) == 2
    assert "format=avro needs a schema registry: set IOT_SCHEMA_REGISTRY_URL" in (
        capsys.readouterr().err
    )
    registry = ["--schema-registry-url", "http://127.0.0.1:1"]
    assert main(["--format", "avro", "--transport", "stdout", *registry]) == 2
    assert "format=avro sends simulated readings to Kafka" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["--format", "xml"])
    assert exc.value.code == 2
    assert "--format: invalid choice: 'xml' (choose from 'json', 'avro')" in (
        capsys.readouterr().err
    )


def test_clean_defaults_send_exactly_what_generate_gives(capsysbinary):
    """All rates 0 (the default): the CLI's messages are generate()'s events, byte for byte."""
    import itertools
    from datetime import datetime

    from common.fleet import build_fleet
    from producer.simulation import generate, simulated_clock

    rc = main(["--transport", "stdout", "--count", "1500", "--fleet-size", "12", "--seed", "7",
               "--rate", "0", "--clock-rate", "10", "--start-time", "2026-01-01T00:00:00+00:00",
               "--deterministic-ids"])  # fmt: skip
    assert rc == 0
    start = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
    want = [
        orjson.dumps(e)
        for e in itertools.islice(
            generate(build_fleet(12, 7), 7, simulated_clock(start, 10.0)), 1500
        )
    ]
    assert capsysbinary.readouterr().out.splitlines() == want


class _CountingSource:
    """Readings as plain messages; remembers the size of every batch asked for."""

    device_ids = ["dev-00000"]

    def __init__(self) -> None:
        self.generated = 0
        self.batches: list[int] = []

    def prepare(self) -> None:
        pass

    def next_batch(self, n: int) -> list:
        self.batches.append(n)
        msgs = [(b"k", b"{}", 0, self.generated + i, "", None) for i in range(n)]
        self.generated += n
        return msgs

    def drain(self) -> list:
        return []


class _NullSink:
    def __init__(self) -> None:
        self.acked, self.errors, self.failures = 0, Counter(), []
        self.latency = LatencyHistogram()

    def send_batch(self, msgs) -> None:
        self.acked += len(msgs)

    def poll(self) -> None:
        pass

    def wait_ready(self, timeout_s: float, stop=None) -> float:
        return 0.0

    def flush(self, timeout_s: float) -> int:
        return 0

    def close(self) -> None:
        pass


def test_a_set_rate_is_sent_in_batches_of_about_ten_milliseconds():
    from producer.rate import parse_profile

    source, sink = _CountingSource(), _NullSink()
    report = run(source, sink, Pacer(parse_profile("constant", 2000.0)), limits=Limits(None, 1.0),
                 progress=QUIET, install_signal_handlers=False)  # fmt: skip
    # 2,000 readings/s in steps of 10 ms: batches of about 20, not one reading per batch.
    assert abs(report.sent - 2000) <= 100
    assert len(source.batches) <= 110
    assert sorted(source.batches)[len(source.batches) // 2] >= 19
    # A count that is not a multiple of the step still ends exactly.
    source = _CountingSource()
    report = run(source, _NullSink(), Pacer(parse_profile("constant", 2000.0)),
                 limits=Limits(count=1005), progress=QUIET, install_signal_handlers=False)  # fmt: skip
    assert report.readings == report.sent == 1005 and report.stopped_by == "count"


def test_the_rates_sent_are_over_the_sending_not_the_wait_for_the_last_acknowledgements():
    from producer.rate import parse_profile

    class _SlowFlushSink(_NullSink):
        """Acknowledges nothing until flushed, which takes 0.5 s (a far broker)."""

        def send_batch(self, msgs) -> None:
            self.pending = getattr(self, "pending", 0) + len(msgs)

        def flush(self, timeout_s: float) -> int:
            if getattr(self, "pending", 0):
                time.sleep(0.5)
                self.acked, self.pending = self.acked + self.pending, 0
            return 0

    report = run(_CountingSource(), _SlowFlushSink(), Pacer(parse_profile("constant", 1000.0)),
                 limits=Limits(duration_s=1.0), progress=QUIET,
                 install_signal_handlers=False)  # fmt: skip
    assert report.acked == report.sent and abs(report.sent - 1000) <= 50
    assert report.duration_s >= report.send_s + 0.5 and report.send_s >= 1.0
    assert report.target_rate == 1000.0
    # Counted over the whole 1.5 s, the run would claim ~667/s sent.
    assert abs(report.achieved_rate - report.sent / report.send_s) <= 1.0
    assert abs(report.achieved_rate - 1000) <= 50
    assert abs(report.acked_rate - report.acked / report.duration_s) <= 1.0


def test_the_send_loop_collects_garbage_rarely_and_restores_the_collector():
    import gc

    from producer.rate import parse_profile
    from producer.run import GC_THRESHOLD

    marker: list[int] = []  # a tracked container alive on entry
    seen: list[tuple[tuple[int, int, int], bool]] = []

    def frozen() -> bool:  # gc.get_objects() leaves out the permanent generation
        return gc.is_tracked(marker) and not any(o is marker for o in gc.get_objects())

    class _Watching(_CountingSource):
        def next_batch(self, n: int) -> list:
            seen.append((gc.get_threshold(), frozen()))
            return super().next_batch(n)

    def send(count: int) -> None:
        run(_Watching(), _NullSink(), Pacer(parse_profile("constant", 0.0), batch_size=1000),
            limits=Limits(count=count), progress=QUIET,
            install_signal_handlers=False)  # fmt: skip

    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0 and not frozen()
    send(3000)
    assert seen == [((GC_THRESHOLD, before[1], before[2]), True)] * 3
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0 and not frozen()
    # Objects someone else froze stay frozen after the loop; the threshold still changes.
    gc.freeze()
    try:
        seen.clear()
        send(2000)
        assert seen == [((GC_THRESHOLD, before[1], before[2]), True)] * 2
        assert gc.get_threshold() == before and frozen()
    finally:
        gc.unfreeze()


def test_progress_lines_show_the_rate_the_acknowledged_count_and_the_errors():
    import re

    from producer.rate import parse_profile

    class _HalfAckSink(_NullSink):
        """Acknowledges every other message; counts the rest as errors of one kind."""

        def send_batch(self, msgs) -> None:
            self.acked += len(msgs) // 2
            self.errors["_MSG_TIMED_OUT"] += len(msgs) - len(msgs) // 2

    lines: list[str] = []
    run(_CountingSource(), _HalfAckSink(), Pacer(parse_profile("constant", 1000.0)),
        limits=Limits(duration_s=1.3), progress=Progress(every_s=0.25, say=lines.append),
        install_signal_handlers=False)  # fmt: skip
    pattern = r"\[producer\] +([\d.]+)s sent ([\d,]+) acked ([\d,]+) rate ([\d,]+)/s errors (\d+)"
    parsed = [re.fullmatch(pattern, line) for line in lines]
    assert len(parsed) >= 4 and all(parsed), lines
    for m in parsed:
        elapsed, sent, acked, rate, errors = (float(g.replace(",", "")) for g in m.groups())
        # The closed loop holds 1,000/s (the time is printed to 0.1 s: up to 50 readings off).
        assert abs(sent - 1000 * elapsed) <= 80
        assert acked + errors == sent and abs(acked - errors) <= 20
        assert abs(rate - 1000) <= 100  # the rate so far, from the unrounded time


@pytest.mark.parametrize(
    ("profile", "want"),
    [("step:500@0,1500@1", [500.0, 1500.0]), ("spike:400:1600:1:1", [400.0, 1600.0])],
)
def test_step_and_spike_profiles_are_held_second_by_second(tmp_path, profile, want):
    rc, _, _, report = _file_run(
        tmp_path, "--rate-profile", profile, "--duration-s", "2.5", "--fleet-size", "5"
    )
    rep = json.loads(report.read_text())
    assert rc == 0
    assert rep["per_second_target"][:2] == want
    assert all(abs(n - w) <= 0.05 * w for n, w in zip(rep["per_second"][:2], want, strict=True))


def test_the_clock_starts_after_the_source_is_prepared_and_the_sink_is_ready():
    from producer.rate import parse_profile
    from producer.run import READY_TIMEOUT_S

    calls: list[object] = []

    class _Source(_CountingSource):
        def prepare(self) -> None:
            calls.append("prepare")

        def next_batch(self, n: int) -> list:
            calls.append("batch")
            return super().next_batch(n)

    class _SlowSink(_NullSink):
        def wait_ready(self, timeout_s: float, stop=None) -> float:
            calls.append(("wait_ready", timeout_s, stop()))
            return 0.25

    report = run(_Source(), _SlowSink(), Pacer(parse_profile("constant", 0.0), batch_size=10),
                 limits=Limits(count=20), progress=QUIET, install_signal_handlers=False,
                 start_gate=lambda: calls.append("gate"))  # fmt: skip
    assert calls == ["prepare", ("wait_ready", READY_TIMEOUT_S, False), "gate", "batch", "batch"]
    assert report.ready_wait_s == 0.25 and report.sent == 20
    assert "waited 0.2 s for the sink to be ready" in report.summary()


def test_merged_workers_last_from_the_first_start_to_the_last_end():
    from common.latency import LatencyHistogram
    from common.report import ProducerReport
    from producer.report_merge import merge_reports

    def part(started_at: str, duration_s: float, send_s: float, sent: int, ready: float) -> dict:
        latency = LatencyHistogram()
        latency.record(0.01)
        report = ProducerReport(
            target_rate=0.0, sent=sent, acked=sent, undelivered=0, duration_s=duration_s,
            send_s=send_s, achieved_rate=0.0, errors={}, ack_latency_ms={},
            started_at=started_at, per_second=[sent], per_second_acked=[sent],
            per_second_target=[0.0], ready_wait_s=ready,
            ack_latency_histogram=latency.encode(),
        )  # fmt: skip
        return report.to_dict()

    merged = merge_reports([
        part("2026-01-01T00:00:00.500000+00:00", 1.0, 0.75, 300, 0.5),
        part("2026-01-01T00:00:00+00:00", 1.25, 1.0, 500, 0.25),
    ])  # fmt: skip
    # The second starts first (0.0) and the first ends last (0.5 + 1.0): 1.5 s in all;
    # the first sends last (until 0.5 + 0.75): 1.25 s of sending.
    assert (merged.duration_s, merged.send_s) == (1.5, 1.25)
    assert merged.achieved_rate == 640.0  # 800 / 1.25
    assert merged.acked_rate == 533.3  # 800 / 1.5, to 0.1
    assert merged.started_at == "2026-01-01T00:00:00+00:00"
    assert merged.ready_wait_s == 0.5


def test_a_worker_that_fails_before_the_start_does_not_hold_the_others(tmp_path):
    import multiprocessing as mp

    from producer.workers import _worker_main

    settings = ProducerSettings(
        _env_file=None, transport="file", out_dir=tmp_path / "out",
        replay=tmp_path / "missing.jsonl",
    )  # fmt: skip
    ready = mp.Value("i", 0)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(FileNotFoundError, match="missing.jsonl"):
            _worker_main(settings, 0, 2, str(tmp_path), mp.Event(), mp.Event(),
                         mp.Array("q", 8, lock=False), ready)  # fmt: skip
    finally:  # a worker takes over the signals of its process
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert ready.value == 1  # counted as arrived: the other worker starts at once


def test_bad_manifest_and_report_paths_are_one_line_before_anything_is_sent(tmp_path, capsys):
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    for flag in ("--manifest-path", "--report-path"):
        inside_a_file = a_file / "out.json"
        assert main(["--transport", "stdout", "--count", "5", flag, str(inside_a_file)]) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert err == (
            f"error: {flag} {inside_a_file}: {a_file} is not a folder: "
            "give a folder this user can create and write to\n"
        )
        assert main(["--transport", "stdout", "--count", "5", flag, str(tmp_path)]) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert err == f"error: {flag} {tmp_path} is a folder: give a file name\n"
