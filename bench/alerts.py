"""Benchmark the real-time alert path on the local stack, the medallion pipeline beside it.

``python -m processor run`` starts the medallion pipeline (Spark ``local[2]``) and,
as its child, the real-time alert app (real-time mode, one slot per partition of
the 2-partition events topic). The producer sends live readings at ``--rate``
(2,000/s) with spikes injected (``--spike-rate``) and no other anomaly or fault, for
``--warm-s`` of warm-up and then ``--measure-s`` measured seconds.

Latency is measured outside Spark: the events topic gives each breaching reading's
Kafka append time (the breaches are found here, from the readings and the fleet's
thresholds, and must equal the manifest's spikes), the alerts topic each alert's
Kafka timestamp (a resent copy counts from its first). ``p50/p95/p99_ms`` are
percentiles of (alert time - reading time) over the breaches read in the measured
seconds; a breach without an alert counts as infinitely late. Targets: p50 <= 200 ms,
p99 <= 1 s, alerts == breaches (none lost, none doubled).

Usage: ``python bench/alerts.py [--rate 2000] [--measure-s 60]``. The last line
printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

# Run as a script, this folder comes first on sys.path and its producer.py would
# shadow the producer package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from common.alerts import alert_id  # noqa: E402
from common.child import Child  # noqa: E402
from common.fleet import build_fleet  # noqa: E402
from common.stats import percentiles  # noqa: E402
from infra import broker  # noqa: E402
from infra.jars import ensure_jar_dir  # noqa: E402
from loadtest.alerts import expected_alerts, read_topic  # noqa: E402
from loadtest.lake import read_truth  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EVENTS, ALERTS = "bench-events", "bench-alerts"
FLEET, SEED = 200, 5


def say(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)


def wait_for(what: str, done: Callable[[], bool], proc: Child, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if proc.proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"[bench] no {what}; the log ends:\n{proc.tail()}")
        time.sleep(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=2000.0, help="readings/s (default 2000)")
    ap.add_argument("--spike-rate", type=float, default=0.005, help="share of readings spiked")
    ap.add_argument("--warm-s", type=float, default=60.0, help="load before the measurement")
    ap.add_argument("--measure-s", type=float, default=60.0, help="measured seconds of load")
    ap.add_argument("--drain-s", type=float, default=120.0, help="longest wait for the last alerts")
    ap.add_argument("--work", type=Path, help="keep the logs and lake here (default: temp)")
    args = ap.parse_args()
    jars = ensure_jar_dir("spark")
    with tempfile.TemporaryDirectory(prefix="bench-alerts-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        log, manifest = work / "run.log", work / "manifest.jsonl"
        info = broker.start(work / "broker", quiet=True)
        try:
            broker.ensure_topic(info.plaintext, EVENTS, partitions=2)
            broker.ensure_topic(info.plaintext, ALERTS, partitions=1)
            env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")} | {
                "IOT_KAFKA_BOOTSTRAP_SERVERS": info.plaintext, "IOT_KAFKA_TOPIC": EVENTS,
                "IOT_KAFKA_ALERTS_TOPIC": ALERTS, "IOT_LAKE_ROOT": str(work / "lake"),
                "IOT_PULSE_HOME": str(work / "home"), "IOT_PROCESSOR_JARS_DIR": str(jars),
                "IOT_PROCESSOR_FLEET_SIZE": str(FLEET), "IOT_PROCESSOR_SEED": str(SEED),
                "PYTHONUNBUFFERED": "1",
            }  # fmt: skip
            say(f"processor run (medallion + real-time alerts); log {log}")
            proc = Child("processor", ["-m", "processor", "run"], env, log)
            producer: Child | None = None
            try:
                wait_for("real-time app", lambda: "real-time mode" in log.read_text(), proc, 300)
                running = "[processor] running"
                wait_for("pipeline", lambda: running in log.read_text(), proc, 600)
                total = args.warm_s + args.measure_s
                say(f"producer: {args.rate:.0f} readings/s for {total:.0f} s "
                    f"({args.warm_s:.0f} s warm-up), spike rate {args.spike_rate}")  # fmt: skip
                t0 = time.time()
                producer = Child(
                    "producer",
                    ["-m", "producer", "--scenario", "clean", "--spike-rate", str(args.spike_rate),
                     "--rate", str(args.rate), "--duration-s", str(total),
                     "--fleet-size", str(FLEET), "--seed", str(SEED),
                     "--manifest-path", str(manifest)],
                    env, log,
                )  # fmt: skip
                if producer.proc.wait(total + 120) != 0:
                    raise SystemExit(f"[bench] the producer failed:\n{proc.tail()}")
                spikes = {
                    alert_id(a["event_id"], a["metric"])
                    for a in read_truth(manifest).anomalies
                    if a["kind"] == "spike"
                }
                # The last alerts' way through (a path that fell behind shows as latency).
                deadline = time.monotonic() + args.drain_s
                while time.monotonic() < deadline and not spikes <= {
                    json.loads(v)["alert_id"] for v, _ in read_topic(info.plaintext, ALERTS)
                }:
                    time.sleep(2)
                if proc.proc.poll() is not None:
                    raise SystemExit(f"[bench] the processor stopped:\n{proc.tail()}")
            finally:
                if producer is not None:
                    producer.stop(30)
                proc.stop(90)
            readings = read_topic(info.plaintext, EVENTS)
            alerts = read_topic(info.plaintext, ALERTS)
        finally:
            broker.stop(work / "broker")
        expected = {
            aid: a[3] for aid, a in expected_alerts(readings, build_fleet(FLEET, SEED)).items()
        }
        copies = Counter(json.loads(v)["alert_id"] for v, _ in alerts)
        first: dict[str, int] = {}
        for value, ts in alerts:
            aid = json.loads(value)["alert_id"]
            first[aid] = min(ts, first.get(aid, ts))
        since_ms = (t0 + args.warm_s) * 1000
        measured = [aid for aid, ts in expected.items() if ts >= since_ms]
        lat = [float(first[aid] - expected[aid]) if aid in first else math.inf for aid in measured]
        pct = percentiles(lat, (50, 95, 99))
        p50, p95, p99 = (pct.get(k, math.inf) for k in ("p50", "p95", "p99"))
        figures = {
            "readings": len(readings),
            "breaches": len(expected),
            "spikes_in_manifest": len(spikes),
            "alerts_distinct": len(copies),
            "alert_records": sum(copies.values()),
            "lost": len(set(expected) - set(copies)),
            "unexpected": len(set(copies) - set(expected)),
            "doubled": sum(1 for n in copies.values() if n > 1),
            "measured_breaches": len(measured),
            "p50_ms": p50,
            "p95_ms": p95,
            "p99_ms": p99,
            "max_ms": max(lat) if lat else None,
        }
    f = figures
    say(f"{f['breaches']} breaches ({f['spikes_in_manifest']} spikes in the manifest), "
        f"{f['alerts_distinct']} alerts ({f['alert_records']} records): {f['lost']} lost, "
        f"{f['doubled']} doubled, {f['unexpected']} unexpected")  # fmt: skip
    say(f"latency over {len(measured)} breaches in {args.measure_s:.0f} s at {args.rate:.0f}/s: "
        f"p50 {p50:.0f} ms, p95 {p95:.0f} ms, p99 {p99:.0f} ms")  # fmt: skip
    figures |= {"p50_ms_target": 200, "p99_ms_target": 1000}
    print(json.dumps({k: v if v is None or math.isfinite(v) else None for k, v in figures.items()}))


if __name__ == "__main__":
    main()
