"""Producer throughput against a local Kafka broker, side by side with kcat.

Self-contained: starts a throwaway broker (``infra.broker``) in a temp dir, runs
``python -m producer`` at full realism (the ``realistic`` scenario: signals,
anomalies, faults and the ground-truth manifest) as fast as it can, consumes what
it produced into a ``key<TAB>value`` file, replays that file with kcat into a
second topic with the same client settings (acks=all, idempotence, linger.ms),
checks that the topic holds every line (the baseline counts only what was delivered),
then stops the broker. Every producer run with the same settings sends the same bytes,
so the first run's dump is what kcat replays in every round. The broker's JIT makes
every side faster run after run, so two warm-up rounds of each side are not counted, and
the sides take turns (the producer first in even rounds, last in odd ones), each run
after a pause that lets the previous one's disk writes and garbage settle; each side
runs ``--rounds`` times and its best round counts (``round_ratios`` has each round's,
``median_round_ratio`` their median).

The sides are timed nearly alike: the producer's clock (its report's ``duration_s``)
starts once its fleet is built and the broker has given it a producer id, and stops
when the sink is closed after the last acknowledgement; kcat's is its run, launch to
exit, less the fixed cost of launching, connecting and exiting, which is timed on a
one-line file (``kcat_startup_s``, the median of three). The correction leans kcat's
way: kcat reads and queues lines while it waits for its producer id, and the producer's
time keeps its shutdown.

A third side measures the producer's ceiling on this machine: the same file sent by
the producer's own ``KafkaSink`` (confluent-kafka's ``Producer.produce``, one call per
message, a delivery callback per report) in ``--workers`` processes, with no
simulation, faults or manifest. ``client_ratio`` is that against kcat (what the
client can reach from Python at all); ``share_of_client`` is the full-realism
producer against it (what simulation, faults and the manifest cost). The producer's
target is ``TARGET`` events/s at full realism with 2 workers; kcat is a reference only.

The last line printed is one JSON object::

    {"events_per_s": ..., "target_events_per_s": 200000, "meets_target": ...,
     "kcat_events_per_s": ..., "ratio": ..., "client_events_per_s": ...,
     "client_ratio": ..., "share_of_client": ..., ...}

``--format avro`` adds a fourth side, the same producer sending Avro through a local
schema registry (``infra.schema_registry``): ``avro_events_per_s`` and
``avro_to_json_ratio`` against the JSON producer of the same rounds.

Usage: ``python bench/producer.py [--count 2000000] [--workers 2] [--rounds 5]``
(kcat: ``apt-get install kcat``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.report import ProducerReport  # noqa: E402
from infra import broker, schema_registry  # noqa: E402
from loadtest.machine import process_cpu_s  # noqa: E402

BATCH = 4096  # messages per send_batch in the client baseline (the producer's default batch)
TARGET = 200_000  # events/s the producer must reach at full realism with 2 workers


def run_producer(
    bootstrap: str, topic: str, args: argparse.Namespace, work: Path, registry: str = ""
) -> ProducerReport:
    """The producer at full realism into ``topic``; as Avro through ``registry`` if given."""
    report = work / f"report-{topic}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")} | {
        "IOT_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "IOT_KAFKA_TOPIC": topic,
    }
    if registry:
        env |= {"IOT_SCHEMA_REGISTRY_URL": registry, "IOT_PRODUCER_FORMAT": "avro"}
    cmd = [
        sys.executable, "-m", "producer",
        "--count", str(args.count), "--rate", "0", "--scenario", "realistic",
        "--workers", str(args.workers), "--fleet-size", str(args.fleet_size),
        "--seed", "42", "--start-time", "2026-01-01T00:00:00Z", "--clock-rate", "1000",
        "--linger-ms", str(args.linger_ms), "--progress-s", "5",
        "--report-path", str(report), "--manifest-path", str(work / f"manifest-{topic}.jsonl"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    sys.stderr.write(proc.stderr)
    done = ProducerReport.read(report)
    if done is None:
        raise SystemExit(f"the producer failed (exit {proc.returncode})")
    return done


def dump_topic(bootstrap: str, topic: str, expected: int, path: Path) -> int:
    """Consume the whole topic into ``key<TAB>value`` lines; return the line count."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    n = 0
    idle_deadline = time.monotonic() + 30
    with path.open("wb") as fh:
        while n < expected and time.monotonic() < idle_deadline:
            msgs = consumer.consume(10000, 1.0)
            for m in msgs:
                if m.error() is None:
                    fh.write((m.key() or b"") + b"\t" + m.value() + b"\n")
                    n += 1
            if msgs:
                idle_deadline = time.monotonic() + 30
    consumer.close()
    return n


def topic_messages(bootstrap: str, topic: str) -> int:
    """Messages in a topic: the sum of its partitions' end offsets (a fresh topic)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}"}
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        )
    finally:
        consumer.close()


def run_kcat(bootstrap: str, topic: str, path: Path, args: argparse.Namespace) -> float:
    cmd = [
        "kcat", "-P", "-b", bootstrap, "-t", topic, "-K", "\t", "-z", "none",
        "-X", "acks=all", "-X", "enable.idempotence=true",
        "-X", f"linger.ms={args.linger_ms}", "-l", str(path),
    ]  # fmt: skip
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, timeout=900)
    return time.perf_counter() - t0


def _client_worker(
    bootstrap: str, topic: str, lines: list[bytes], linger_ms: int, ready: Any, go: Any, out: Any
) -> None:
    """One process of the client baseline: ``KafkaSink`` with pre-encoded messages.

    The lines are made into the producer's messages (keyed, in batches) before the
    clock starts.
    """
    for key in [k for k in os.environ if k.startswith("IOT_")]:
        del os.environ[key]  # the settings below, as the producer's side gets them
    try:
        from common.kafka import librdkafka_config
        from common.kafka_settings import KafkaSettings
        from producer.sinks import KafkaSink

        kafka = KafkaSettings(_env_file=None, bootstrap_servers=bootstrap, topic=topic, auth="none")
        conf = librdkafka_config(kafka, "producer") | {"linger.ms": linger_ms}
        sink = KafkaSink(conf, topic)
        pairs = [line.partition(b"\t") for line in lines]
        msgs = [(key, value, 0, 0, "", None) for key, _, value in pairs]
        batches = [msgs[at : at + BATCH] for at in range(0, len(msgs), BATCH)]
        sink.wait_ready(10.0)  # as the producer does before its clock starts
        ready.set()
        go.wait()
        t0, cpu0 = time.perf_counter(), time.process_time()
        for batch in batches:
            sink.send_batch(batch)
            sink.poll()
        left = sink.flush(60)
        out.put((sink.acked, time.perf_counter() - t0, left, time.process_time() - cpu0))
        sink.close()
    except Exception as exc:  # the parent reports it rather than wait for a result
        out.put(exc)
        ready.set()


def run_client(
    bootstrap: str, topic: str, path: Path, args: argparse.Namespace
) -> tuple[float, float]:
    """The transport alone: the same file through ``KafkaSink`` in ``--workers`` processes.

    No simulation, faults or manifest: what the producer's Kafka path costs in Python
    (librdkafka), the ceiling of the producer on this machine. Returns events/s.
    """
    ctx = mp.get_context("spawn")
    lines = path.read_bytes().splitlines()
    go, out = ctx.Event(), ctx.Queue()
    procs, readies = [], []
    for w in range(args.workers):
        ready = ctx.Event()
        share = lines[w :: args.workers]
        procs.append(ctx.Process(
            target=_client_worker,
            args=(bootstrap, topic, share, args.linger_ms, ready, go, out),
        ))  # fmt: skip
        readies.append(ready)
    for p in procs:
        p.start()
    if not all(ready.wait(120) for ready in readies):
        for p in procs:
            p.kill()
        raise SystemExit("the client baseline's workers did not start within 120 s")
    t0 = time.perf_counter()
    go.set()
    results = [out.get(timeout=900) for _ in procs]
    seconds = time.perf_counter() - t0
    for p in procs:
        p.join(30)
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise SystemExit(f"the client baseline failed: {failed[0]!r}")
    acked = sum(r[0] for r in results)
    if acked != len(lines) or any(r[2] for r in results):
        raise SystemExit(f"the client baseline delivered {acked:,} of {len(lines):,} messages")
    return len(lines) / seconds, sum(r[3] for r in results)


def children_cpu_s() -> float:
    """CPU seconds of this process's finished (waited-for) children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2_000_000, help="readings per round")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--fleet-size", type=int, default=1000)
    parser.add_argument("--linger-ms", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--format", choices=("json", "avro"), default="json",
        help="avro: a fourth side, the producer sending Avro through a local schema registry "
        "(avro_events_per_s, avro_to_json_ratio)",
    )  # fmt: skip
    parser.add_argument(
        "--warmup-rounds", type=int, default=2, help="rounds of each side not counted"
    )
    parser.add_argument(
        "--settle-s", type=float, default=3.0, help="pause (after a sync) before each run"
    )
    args = parser.parse_args()
    if shutil.which("kcat") is None:
        raise SystemExit("kcat is not installed: apt-get install kcat")

    work = Path(tempfile.mkdtemp(prefix="bench-producer-"))
    info = broker.start(work / "broker", quiet=True)
    try:
        bootstrap = info.plaintext
        # The events: every run with the same seed, count and workers sends exactly these
        # bytes, so one run, dumped, is what kcat and the client replay in every round.
        broker.ensure_topic(bootstrap, "bench-events", partitions=3)
        report = run_producer(bootstrap, "bench-events", args, work)
        events = work / "events.tsv"
        lines = dump_topic(bootstrap, "bench-events", report.acked, events)
        if lines != report.acked:
            raise SystemExit(f"read {lines:,} of the {report.acked:,} messages back")
        n_topics = 0

        def fresh_topic() -> str:
            nonlocal n_topics
            n_topics += 1
            broker.ensure_topic(bootstrap, f"bench-{n_topics}", partitions=3)
            return f"bench-{n_topics}"

        cpu: dict[str, list[float]] = {"producer": [], "kcat": [], "client": []}
        broker_cpu: dict[str, list[float]] = {"producer": [], "kcat": [], "client": []}

        def producer_side() -> float:
            report = run_producer(bootstrap, fresh_topic(), args, work)
            if report.acked != lines:
                raise SystemExit(f"the producer acknowledged {report.acked:,}, not {lines:,}")
            cpu["producer"].append(report.cpu_s)
            return report.acked / report.duration_s

        def kcat_side() -> float:
            topic = fresh_topic()
            before = children_cpu_s()
            total = run_kcat(bootstrap, topic, events, args)
            cpu["kcat"].append(children_cpu_s() - before)
            if total - kcat_startup < total / 2:
                raise SystemExit(
                    f"kcat took {total:.3f} s, its start-up alone {kcat_startup:.3f} s: "
                    "raise --count so that sending, not starting, is what is timed"
                )
            seconds = total - kcat_startup
            # The baseline counts only if every line reached the broker.
            if (held := topic_messages(bootstrap, topic)) != lines:
                raise SystemExit(f"kcat delivered {held:,} of {lines:,} messages to {topic}")
            return lines / seconds

        def client_side() -> float:
            topic = fresh_topic()
            rate, used = run_client(bootstrap, topic, events, args)
            cpu["client"].append(used)
            if (held := topic_messages(bootstrap, topic)) != lines:
                raise SystemExit(f"the client baseline left {held:,} of {lines:,} messages")
            return rate

        def settle() -> None:
            # The last run's log pages are still being written back and the broker's
            # heap collected: let that finish so it does not land on the next run.
            os.sync()
            time.sleep(args.settle_s)

        sides = {"producer": producer_side, "kcat": kcat_side, "client": client_side}
        if args.format == "avro":
            registry = schema_registry.start(work / "schema-registry", quiet=True).url

            def avro_side() -> float:
                report = run_producer(bootstrap, fresh_topic(), args, work, registry)
                if report.acked != lines:
                    raise SystemExit(
                        f"the Avro producer acknowledged {report.acked:,}, not {lines:,}"
                    )
                cpu["avro"].append(report.cpu_s)
                return report.acked / report.duration_s

            sides["avro"] = avro_side
            cpu["avro"], broker_cpu["avro"] = [], []
        # The broker's JIT speeds every side up run after run: warm it first, and take
        # turns (producer first in even rounds, last in odd ones) so no side is always later.
        kcat_startup = 0.0
        for _ in range(args.warmup_rounds):
            for side in ("kcat", "client", "producer", *(["avro"] if "avro" in sides else [])):
                settle()
                sides[side]()
        one_line = work / "one.tsv"
        with events.open("rb") as fh:
            one_line.write_bytes(fh.readline())
        startups = sorted(run_kcat(bootstrap, fresh_topic(), one_line, args) for _ in range(3))
        kcat_startup = startups[1]
        rates: dict[str, list[float]] = {side: [] for side in sides}
        for side in cpu:
            cpu[side].clear()
        for r in range(args.rounds):
            order = ["producer", "kcat", "client", *(["avro"] if "avro" in sides else [])]
            for side in order if r % 2 == 0 else order[::-1]:
                settle()
                broker0 = process_cpu_s(info.pid)
                rates[side].append(sides[side]())
                broker_cpu[side].append(process_cpu_s(info.pid) - broker0)
            print(
                f"round {r}: producer {rates['producer'][-1]:,.0f}/s, "
                f"kcat {rates['kcat'][-1]:,.0f}/s, client alone {rates['client'][-1]:,.0f}/s "
                f"({lines:,} messages each; ratio {rates['producer'][-1] / rates['kcat'][-1]:.3f})",
                flush=True,
            )
        best, best_kcat, best_client = (max(rates[s]) for s in ("producer", "kcat", "client"))
        avro = (
            {"avro_events_per_s": round(max(rates["avro"])),
             "avro_to_json_ratio": round(max(rates["avro"]) / best, 3)}
            if "avro" in rates else {}
        )  # fmt: skip
        # CPU per event, median over the rounds: what each side costs whatever else runs.
        us_per_event = {s: round(statistics.median(v) / lines * 1e6, 2) for s, v in cpu.items()}
        broker_us = {s: round(statistics.median(v) / lines * 1e6, 2) for s, v in broker_cpu.items()}
        ratios = [p / k for p, k in zip(rates["producer"], rates["kcat"], strict=True)]
        print(
            json.dumps(
                {
                    "events_per_s": round(best),
                    "target_events_per_s": TARGET,
                    "meets_target": best >= TARGET,
                    "kcat_events_per_s": round(best_kcat),
                    "ratio": round(best / best_kcat, 3),
                    "client_events_per_s": round(best_client),
                    "client_ratio": round(best_client / best_kcat, 3),
                    "kcat_startup_s": round(kcat_startup, 3),
                    "share_of_client": round(best / best_client, 3),
                    "median_round_ratio": round(statistics.median(ratios), 3),
                    "cpu_us_per_event": us_per_event,
                    "broker_cpu_us_per_event": broker_us,
                    # Two idle cores shared by the producer and the broker, nothing else.
                    "two_idle_cores_events_per_s": round(
                        2e6 / (us_per_event["producer"] + broker_us["producer"])
                    ),
                    "load_average_1m": round(os.getloadavg()[0], 1),
                    "round_ratios": [round(x, 3) for x in ratios],
                    "count": args.count,
                    "workers": args.workers,
                    "scenario": "realistic",
                    "rounds": args.rounds,
                    **avro,
                }
            )
        )
    finally:
        broker.stop(work / "broker")
        schema_registry.stop(work / "schema-registry")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
