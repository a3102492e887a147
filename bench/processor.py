"""Benchmark the processor on the local stack (broker on this machine, Spark local[2]).

Two figures, each in its own fresh lake:

1. **Throughput.** A backlog of events is produced first; the processor (its own
   process, default settings but a 1 s trigger) drains it through bronze, silver
   and gold. ``events_per_s`` = events / time from the first bronze commit until
   gold's ``events`` sum reaches the backlog. Target >= 20,000.
2. **Latency.** The producer sends live events (wall-clock event times) at 2,000
   events/s while the processor runs with its default trigger. Gold is polled every
   0.5 s; an event counts as in gold when its (device, minute) row shows a
   ``last_seq`` at or past the event's ``seq``. ``p95_latency_s`` is the 95th
   percentile of (time seen in gold - event time) after a warm-up. Target <= 10 s.

Usage: ``python bench/processor.py [--events 300000] [--latency-s 90]``. The last
line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import Producer
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

# Run as a script, this folder comes first on sys.path and its producer.py would
# shadow the producer package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from common.fleet import build_fleet  # noqa: E402
from infra import broker  # noqa: E402
from infra.jars import ensure_jars  # noqa: E402
from producer.run import percentiles  # noqa: E402
from producer.signals import generate, simulated_clock, wall_clock  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

FLEET, SEED = 200, 5


def say(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)


def rows(path: Path, columns: list[str]) -> list[dict]:
    try:
        return DeltaTable(str(path)).to_pyarrow_table(columns=columns).to_pylist()
    except (TableNotFoundError, OSError):
        return []


def processor(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "processor", "run"], cwd=ROOT, env=env,
        stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def env_for(
    info: broker.BrokerInfo, topic: str, lake: Path, jars: Path, **extra: str
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")}
    return env | {
        "IOT_KAFKA_BOOTSTRAP_SERVERS": info.plaintext, "IOT_KAFKA_TOPIC": topic,
        "IOT_LAKE_ROOT": str(lake), "IOT_PROCESSOR_JARS_DIR": str(jars),
        "IOT_PROCESSOR_FLEET_SIZE": str(FLEET), "IOT_PROCESSOR_SEED": str(SEED),
        "PYTHONUNBUFFERED": "1",
    } | extra  # fmt: skip


def throughput(info: broker.BrokerInfo, jars: Path, work: Path, n: int) -> dict[str, float]:
    topic = "bench-throughput"
    broker.ensure_topic(info.plaintext, topic, partitions=4)
    p = Producer(
        {
            "bootstrap.servers": info.plaintext,
            "linger.ms": 50,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    stream = generate(
        build_fleet(FLEET, SEED), SEED, simulated_clock(datetime(2026, 1, 1, tzinfo=UTC), 500.0)
    )
    for i in range(n):
        e = next(stream)
        p.produce(topic, json.dumps(e).encode(), str(e["device_id"]).encode())
        if i % 20_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    say(f"backlog of {n:,} events produced")
    lake = work / "lake-throughput"
    proc = processor(
        env_for(info, topic, lake, jars, IOT_PROCESSOR_TRIGGER_INTERVAL="1 second"),
        work / "throughput.log",
    )
    first_bronze = None
    try:
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"processor exited: see {work / 'throughput.log'}")
            if first_bronze is None and rows(lake / "bronze" / "events", ["offset"]):
                first_bronze = time.monotonic()
                say("first bronze commit")
            done = sum(r["events"] for r in rows(lake / "gold" / "device_1m", ["events"]))
            if done >= n:
                break
            time.sleep(0.5)
        else:
            raise SystemExit("the backlog was not drained in 30 minutes")
        elapsed = time.monotonic() - (first_bronze or time.monotonic())
    finally:
        stop(proc)
    eps = n / elapsed
    say(f"throughput: {n:,} events bronze->silver->gold in {elapsed:.1f} s = {eps:,.0f} events/s")
    return {"events_per_s": round(eps, 1), "throughput_elapsed_s": round(elapsed, 2)}


def latency(
    info: broker.BrokerInfo, jars: Path, work: Path, seconds: float, rate: float
) -> dict[str, float]:
    topic = "bench-latency"
    broker.ensure_topic(info.plaintext, topic, partitions=4)
    lake = work / "lake-latency"
    proc = processor(env_for(info, topic, lake, jars), work / "latency.log")
    sent: dict[str, list[tuple[int, float]]] = {}
    stop_flag = threading.Event()

    def produce() -> None:
        p = Producer({"bootstrap.servers": info.plaintext, "linger.ms": 5, "acks": "all"})
        stream = generate(build_fleet(FLEET, SEED), SEED, wall_clock)
        t0, k = time.monotonic(), 0
        while not stop_flag.is_set():
            e = next(stream)
            p.produce(topic, json.dumps(e).encode(), str(e["device_id"]).encode())
            sent.setdefault(str(e["device_id"]), []).append((int(e["seq"]), time.time()))
            k += 1
            if k % 100 == 0:
                p.poll(0)
                ahead = k / rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
        p.flush(30)

    try:
        # Wait until the processor is up before the clock starts.
        deadline = time.monotonic() + 300
        while (
            not rows(lake / "gold" / "device_1m", ["events"])
            and (lake / "gold" / "device_1m").exists() is False
        ):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"processor did not start: see {work / 'latency.log'}")
            time.sleep(1)
        time.sleep(10)
        thread = threading.Thread(target=produce, daemon=True)
        t_start = time.time()
        thread.start()
        seen_seq: dict[str, int] = {}
        latencies: list[float] = []
        warmup = t_start + 20
        while time.time() < t_start + seconds + 20:
            now = time.time()
            for r in rows(lake / "gold" / "device_1m", ["device_id", "last_seq"]):
                dev, last = r["device_id"], r["last_seq"]
                prev = seen_seq.get(dev, 0)
                if last > prev:
                    for seq, sent_at in sent.get(dev, [])[prev:last]:
                        if seq > prev and sent_at >= warmup and sent_at <= t_start + seconds:
                            latencies.append(now - sent_at)
                    seen_seq[dev] = last
            if time.time() > t_start + seconds:
                stop_flag.set()
            time.sleep(0.5)
        stop_flag.set()
        thread.join(30)
    finally:
        stop(proc)
    pct = percentiles(latencies, (50, 95, 99))
    say(
        f"latency at {rate:,.0f} events/s over {len(latencies):,} events: "
        f"p50 {pct['p50']:.2f} s, p95 {pct['p95']:.2f} s"
    )
    return {
        "latency_rate": rate,
        "p50_latency_s": round(pct["p50"], 3),
        "p95_latency_s": round(pct["p95"], 3),
        "latency_events": len(latencies),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--latency-s", type=float, default=90.0)
    ap.add_argument("--rate", type=float, default=2000.0)
    args = ap.parse_args()
    jars = ensure_jars("spark")[0].parent
    with tempfile.TemporaryDirectory(prefix="bench-processor-") as tmp:
        work = Path(tmp)
        info = broker.start(work / "broker", quiet=True)
        try:
            figures = throughput(info, jars, work, args.events)
            figures |= latency(info, jars, work, args.latency_s, args.rate)
        finally:
            broker.stop(work / "broker")
    figures |= {"events_per_s_target": 20000, "p95_latency_s_target": 10.0}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
