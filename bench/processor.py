"""Benchmark the processor on the local stack (broker on this machine, Spark local[2]).

Two figures, each in its own fresh lake:

1. **Throughput.** The processor (its own process, default settings) starts on an
   empty topic and is warmed up with ``--warmup-events`` events, which must reach
   gold. Then a backlog of ``--events`` pre-encoded events is published as fast as
   the client can, and the clock runs from the first publish until gold's
   ``events`` sum covers every event: ``events_per_s`` = events / that time, all of
   bronze, silver and every gold query running. The first ``--warm-backlogs``
   backlogs (default 1) are the JVM's warm-up: each runs until every query, the
   background ones included, has processed a batch of it; they are reported
   (``first_backlog_events_per_s``) and the next one is measured. Then, in the same
   run, the same procedure times Spark's plain Kafka -> Delta copy of the same events
   (``bench/kafka_copy.py``, the ceiling of any pipeline on this Spark):
   ``copy_events_per_s``, and ``pipeline_to_copy_ratio``. Target: a ratio >= 1.0.
2. **Latency and cost**, at each of ``--rates`` (default 200 and 2,000
   events/s), in a fresh lake each: the producer sends live events (wall-clock event
   times) while the processor runs with its default settings. Once every query has run
   a batch with rows, plus ``--latency-warm-s`` (default 300 s: a streaming job runs
   for long, and the JVM's JIT compilers settle only after minutes;
   ``jit_compile_s_at_<rate>`` says how much they compiled in the measured window),
   the events sent over ``--latency-s`` seconds (default 180) are measured. Gold is
   polled every 0.5 s; an event counts as in gold when its (device, minute) row shows
   a ``last_seq`` at or past the event's ``seq`` (the load keeps running until they
   are all in gold, or 120 s have passed; missing ones count as infinitely late).
   ``p95_latency_s_at_<rate>`` is the 95th percentile of (time seen in gold - event
   time); ``cores_at_<rate>`` the CPU the processor's processes (its JVM and Python
   workers, ended ones included) used over the measured window, per second, reported
   with no target. Target: p95 <= 5 s at both rates. Then the load stops and,
   after ``--quiet-wait-s`` (default 150 s: the background queries' last turns, and the
   empty batches that close their windows), ``cores_quiet_after_<rate>`` is the CPU per
   second over ``--quiet-s`` (default 90 s; 0 skips it): what a quiet pipeline costs.
   There is no alerts topic, so the real-time alert app (``bench/alerts.py``) does not
   run; ``--realtime-alerts`` gives it one, as ``make demo`` does, and its CPU counts.

``--remote`` then measures both again, in the same run, with the processor as a client
of a local Spark Connect server (``infra.spark_connect``; a fresh server per run, whose
CPU counts in ``cores_at_<rate>``): the figures are prefixed ``connect_``, beside the
classic ones. The plain copy and the real-time alert app run only in the classic runs.

``--format avro`` then times the throughput once more, in the same run, with the backlog
encoded as Avro (Confluent framing, its schema in a local schema registry,
``infra.schema_registry``), which silver decodes by schema id: ``avro_events_per_s``
beside the JSON run's, and ``avro_to_json_ratio``.

``--java-home DIR`` runs the processor on another Java (the broker keeps this shell's).

The machine's speed moves the figures as much as the code does:
``cpu_stamp_s`` (``loadtest.machine``, before and after) says how fast it was.

Usage: ``python bench/processor.py [--events 300000] [--rates 200,2000] [--latency-s 180]``.
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import psutil
from confluent_kafka import Producer
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

# Run as a script, this folder comes first on sys.path and its producer.py would
# shadow the producer package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from common.child import Child  # noqa: E402
from common.fleet import build_fleet  # noqa: E402
from common.lake import Query  # noqa: E402
from common.registry_settings import RegistrySettings  # noqa: E402
from common.stats import percentiles  # noqa: E402
from infra import broker, daemons, schema_registry, spark_connect  # noqa: E402
from infra.jars import ensure_jar_dir  # noqa: E402
from loadtest.machine import cpu_stamp, processes_cpu_s, session_pids  # noqa: E402
from processor.settings import ProcessorSettings  # noqa: E402
from producer.simulation import generate, simulated_clock, wall_clock  # noqa: E402
from producer.wire_format import AvroFormat  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

FLEET, SEED = 200, 5


def say(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)


def rows(path: Path, columns: list[str]) -> list[dict]:
    try:
        return DeltaTable(str(path)).to_pyarrow_table(columns=columns).to_pylist()
    except (TableNotFoundError, OSError):
        return []


class ConnectProcessor(Child):
    """The processor as a client of a Spark Connect server of its own (started first)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        port = daemons.free_ports(spark_connect.HOST)[0]
        settings = ProcessorSettings(jars_dir=env["IOT_PROCESSOR_JARS_DIR"])
        command = spark_connect.server_command(port, settings)
        self.server = daemons.launch(
            command, log.with_suffix(".server.log"), cwd=log.parent, env=spark_connect.server_env()
        )
        spark_connect.wait_until_ready(port, self.server, spark_connect.READY_TIMEOUT_S)
        url = f"sc://{spark_connect.HOST}:{port}"
        super().__init__("processor", ["-m", "processor", "run"], env | {REMOTE_ENV: url}, log)

    def stop(self, timeout_s: float, say: Callable[[str], None] | None = None) -> int:
        """Stop the client, then its server."""
        try:
            return super().stop(timeout_s, say)
        finally:
            daemons.terminate_group(self.server.pid, timeout_s)


# --remote: the runs measured a second time, each through a Connect server of its own.
MODE: dict[str, bool] = {"connect": False, "avro": False}
# The registry of --format avro's runs (its URL), when it runs.
REGISTRY: dict[str, str] = {}
# The classic JSON run's events/s, the Avro run's peer.
EPS: dict[str, float] = {}
REMOTE_ENV = ProcessorSettings.env_name("remote")


def topic_name(base: str) -> str:
    """A run's topic: the Connect runs and the Avro runs read topics of their own."""
    return base + ("-connect" if MODE["connect"] else "") + ("-avro" if MODE["avro"] else "")


def processor(env: dict[str, str], log: Path) -> Child:
    if MODE["connect"]:
        return ConnectProcessor(env, log)
    return Child("processor", ["-m", "processor", "run"], env, log)


def processor_cpu_s(proc: Child) -> float:
    """CPU seconds of the processor's processes: through Spark Connect, its server's too."""
    server = getattr(proc, "server", None)
    return group_cpu_s(proc.proc.pid) + (group_cpu_s(server.pid) if server else 0.0)


SETTINGS: dict[str, str] = {}  # --setting NAME=VALUE, passed as IOT_PROCESSOR_<NAME>
JAVA: dict[str, str] = {}  # --java-home: the processor's JAVA_HOME (the broker keeps its own)


def env_for(
    info: broker.BrokerInfo, topic: str, lake: Path, jars: Path, **extra: str
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")}
    env |= {f"IOT_PROCESSOR_{k.upper()}": v for k, v in SETTINGS.items()} | JAVA
    return env | {
        "IOT_KAFKA_BOOTSTRAP_SERVERS": info.plaintext, "IOT_KAFKA_TOPIC": topic,
        "IOT_LAKE_ROOT": str(lake), "IOT_PROCESSOR_JARS_DIR": str(jars),
        "IOT_PROCESSOR_FLEET_SIZE": str(FLEET), "IOT_PROCESSOR_SEED": str(SEED),
        "PYTHONUNBUFFERED": "1", "IOT_PROCESSOR_LOG_PROGRESS": "true",
    } | ({"IOT_SCHEMA_REGISTRY_URL": REGISTRY["url"]} if MODE["avro"] else {}) | extra  # fmt: skip


def table_rows(path: Path) -> int:
    """Rows in a Delta table, from its log's file statistics (no data read)."""
    try:
        actions = DeltaTable(str(path)).get_add_actions(flatten=True)
    except (TableNotFoundError, OSError):
        return 0
    return int(sum(n or 0 for n in actions.column("num_records").to_pylist()))


def gold_events(lake: Path) -> int:
    return sum(r["events"] for r in rows(lake / "gold" / "device_1m", ["events"]))


def encoded_events(n: int, start: datetime, topic: str) -> list[tuple[bytes, bytes]]:
    """``n`` events as JSON, or (an Avro run) as Avro registered under ``topic``'s subject."""
    stream = generate(build_fleet(FLEET, SEED), SEED, simulated_clock(start, 500.0))
    events = [next(stream) for _ in range(n)]
    if MODE["avro"]:
        wire = AvroFormat(RegistrySettings(url=REGISTRY["url"]), topic, [1])
        values = wire.encode(events)
    else:
        values = [json.dumps(e).encode() for e in events]
    return [(str(e["device_id"]).encode(), v) for e, v in zip(events, values, strict=True)]


def publish(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    p = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 2_000_000}
    )
    for i, (key, value) in enumerate(messages):
        p.produce(topic, value, key)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0


def wait_until(what: str, done: Callable[[], bool], proc: Child) -> None:
    deadline = time.monotonic() + 1800
    while not done():
        if proc.proc.poll() is not None:
            raise SystemExit(f"processor exited while waiting for {what}: see {proc.log}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after 30 minutes waiting for {what}: see {proc.log}")
        time.sleep(0.5)


# The queries that read events (alert_recoveries reads alerts, which may stay empty; the
# alert-topic queries do not run here: this bench has no alerts topic, bench/alerts.py does).
WARM_QUERIES = tuple(
    q for q in Query if q not in (Query.ALERT_RECOVERIES, Query.ALERTS_RT, Query.REALTIME_ALERTS)
)


def warmed_up(log: Path, since: int = 0) -> bool:
    """Every query that reads events has logged a micro-batch with rows (after byte ``since``)."""
    with log.open("rb") as fh:
        fh.seek(since)
        text = fh.read().decode(errors="replace")
    chosen = [q.strip() for q in SETTINGS.get("queries", "").split(",") if q.strip()]
    return all(f"[progress] {q} batch" in text for q in WARM_QUERIES if not chosen or q in chosen)


def group_cpu_s(session: int) -> float:
    """CPU seconds (user + system) used so far by a session's processes, ended ones included.

    Each live process counts with its ended children: the JVM's include the shell commands
    Hadoop's local file system runs per checkpoint file (``readlink``, ``chmod``), which
    without them were not counted at all.
    """
    return processes_cpu_s(session_pids(session))


def java_pid(session: int) -> int | None:
    """The Spark JVM among a session's processes (the processor's driver)."""
    for pid in session_pids(session):
        try:
            if "SparkSubmit" in " ".join(psutil.Process(pid).cmdline()):
                return pid
        except psutil.Error:
            continue
    return None


def jit_compile_s(pid: int | None) -> float | None:
    """Seconds the JVM has spent in its JIT compilers so far (``jstat -compiler``), or None."""
    if pid is None or shutil.which("jstat") is None:
        return None
    try:
        out = subprocess.run(
            ["jstat", "-compiler", str(pid)], capture_output=True, text=True, timeout=30
        )
        header, values = (line.split() for line in out.stdout.split("\n")[:2])
        return float(values[header.index("Time")].replace(",", "."))
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def timed_backlogs(
    info: broker.BrokerInfo,
    topic: str,
    proc: Child,
    counts: dict[str, Callable[[], int]],
    n: int,
    warmup: int,
    warm_backlogs: int,
    settle: Callable[[int], bool] = lambda _mark: True,
) -> tuple[list[float], dict[str, float], float]:
    """Warm ``proc`` up, then time backlogs of ``n`` events until the last stage holds them.

    ``counts`` gives the rows each stage (in order) holds; the last decides. The first
    ``warm_backlogs`` backlogs are the JVM's warm-up (its JIT compilers spend seconds of
    CPU per backlog until the hot paths of big batches are compiled): timed, reported, not
    the figure. ``settle(log offset)`` must hold between two backlogs.

    Returns:
        Each backlog's events/s, the measured backlog's time per stage, the warm-up time.
    """
    broker.ensure_topic(info.plaintext, topic, partitions=4)
    backlogs = warm_backlogs + 1
    messages = encoded_events(warmup + backlogs * n, datetime(2026, 1, 1, tzinfo=UTC), topic)
    last = list(counts)[-1]
    t_start = time.monotonic()
    publish(info.plaintext, topic, messages[:warmup])
    wait_until(f"the warm-up events in {last}", lambda: counts[last]() >= warmup, proc)
    wait_until("every query's first batch", lambda: settle(0), proc)
    warm_s = time.monotonic() - t_start
    say(f"{proc.name} warm: {warmup:,} events reached {last} {warm_s:.1f} s after start")
    rates: list[float] = []
    marks: dict[str, float] = {}
    for b in range(backlogs):
        measured = b == backlogs - 1
        what = "measured backlog" if measured else f"warm-up backlog {b + 1}/{warm_backlogs}"
        t0 = time.monotonic()
        mark = proc.log.stat().st_size
        at = warmup + b * n
        publish(info.plaintext, topic, messages[at : at + n])
        say(f"{proc.name} {what}: {n:,} events published in {time.monotonic() - t0:.1f} s")
        marks = {}
        for stage, count in counts.items():
            wait_until(f"{stage} to hold every event", lambda c=count, t=at + n: c() >= t, proc)
            marks[stage] = time.monotonic() - t0
        rates.append(n / marks[last])
        times = ", ".join(f"{stage} {t:.1f} s" for stage, t in marks.items())
        say(f"{proc.name} {what}: {times} = {rates[-1]:,.0f}/s")
        if not measured:
            wait_until("every query's batch of the warm-up backlog", lambda m=mark: settle(m), proc)
    return rates, marks, warm_s


def throughput(
    info: broker.BrokerInfo, jars: Path, work: Path, n: int, warmup: int, warm_backlogs: int
) -> dict[str, float | None]:
    """Time a backlog of ``n`` events through the pipeline to gold, and beside it, in the
    same run, through Spark's plain Kafka -> Delta copy (``bench/kafka_copy.py``).

    Each runs warmed up (see ``timed_backlogs``), on a topic of its own holding the same
    events, one after the other (never both at once).
    """
    lake, log = work / "lake-throughput", work / "throughput.log"
    topic = topic_name("bench-throughput")
    proc = processor(env_for(info, topic, lake, jars), log)
    try:
        stages = {
            "bronze": lambda: table_rows(lake / "bronze" / "events"),
            "silver": lambda: table_rows(lake / "silver" / "events"),
            "gold": lambda: gold_events(lake),
        }
        settle = lambda mark: warmed_up(log, since=mark)  # noqa: E731
        rates, marks, warm_s = timed_backlogs(
            info, topic, proc, stages, n, warmup, warm_backlogs, settle
        )
    finally:
        proc.stop(60)
    eps = rates[-1]
    if not MODE["connect"] and not MODE["avro"]:
        EPS["json"] = eps
    say(f"throughput: {n:,} events bronze->silver->gold in {marks['gold']:.1f} s = {eps:,.0f}/s")
    figures = {
        "events_per_s": round(eps, 1),
        "throughput_elapsed_s": round(marks["gold"], 2),
        "bronze_done_s": round(marks["bronze"], 2),
        "silver_done_s": round(marks["silver"], 2),
        "first_backlog_events_per_s": round(rates[0], 1),
        "warmup_s": round(warm_s, 1),
    }
    if MODE["connect"] or MODE["avro"]:  # the copy is the classic JSON run's ceiling
        return figures
    copy_lake = work / "lake-copy"
    copy = Child(
        "kafka copy", [str(ROOT / "bench" / "kafka_copy.py")],
        env_for(info, "bench-copy", copy_lake, jars), work / "copy.log",
    )  # fmt: skip
    try:
        copied = {"copy": lambda: table_rows(copy_lake / "copy")}
        copy_rates, copy_marks, _ = timed_backlogs(
            info, "bench-copy", copy, copied, n, warmup, warm_backlogs
        )
    finally:
        copy.stop(60)
    copy_eps = copy_rates[-1]
    say(
        f"plain Kafka -> Delta copy: {n:,} events in {copy_marks['copy']:.1f} s = "
        f"{copy_eps:,.0f}/s; the pipeline at {eps / copy_eps:.2f}x the copy"
    )
    return figures | {
        "copy_events_per_s": round(copy_eps, 1),
        "pipeline_to_copy_ratio": round(eps / copy_eps, 3),
    }


def latency(
    info: broker.BrokerInfo,
    jars: Path,
    work: Path,
    seconds: float,
    rate: float,
    warm_s: float,
    quiet: tuple[float, float] = (0.0, 0.0),
    realtime_alerts: bool = False,
) -> dict[str, float | None]:
    """Latency and cores at ``rate``; then, with ``quiet`` (wait, seconds), cores without input.

    With ``realtime_alerts`` the run has an alerts topic, so the real-time alert app runs too.
    """
    topic = topic_name(f"bench-latency-{rate:.0f}")
    broker.ensure_topic(info.plaintext, topic, partitions=4)
    lake = work / f"lake-latency-{rate:.0f}"
    log = work / f"latency-{rate:.0f}.log"
    extra = {}
    if realtime_alerts:
        broker.ensure_topic(info.plaintext, f"{topic}-alerts", partitions=1)
        extra = {"IOT_KAFKA_ALERTS_TOPIC": f"{topic}-alerts"}
    proc = processor(env_for(info, topic, lake, jars, **extra), log)
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

    thread = threading.Thread(target=produce, daemon=True)
    try:
        # The load runs from the start; the clock starts once every query is warm.
        thread.start()
        wait_until("every query's first batch", lambda: warmed_up(log), proc)
        say(f"every query has run a batch; {warm_s:.0f} s more under load before measuring")
        time.sleep(warm_s)
        jvm = java_pid(getattr(proc, "server", proc.proc).pid)
        jit0 = jit_compile_s(jvm)
        t_start = time.time()
        t_end = t_start + seconds
        say(f"warm; measuring events sent over the next {seconds:.0f} s")
        cpu0 = processor_cpu_s(proc)
        seen_seq: dict[str, int] = {}
        latencies: list[float] = []
        deadline = t_end + 120
        while time.time() < deadline:
            now = time.time()
            for r in rows(lake / "gold" / "device_1m", ["device_id", "last_seq"]):
                dev, last = r["device_id"], r["last_seq"]
                prev = seen_seq.get(dev, 0)
                if last > prev:
                    for seq, sent_at in sent.get(dev, [])[prev:last]:
                        if seq > prev and t_start <= sent_at <= t_end:
                            latencies.append(now - sent_at)
                    seen_seq[dev] = last
            if now > t_end and all(
                seen_seq.get(dev, 0) >= max((q for q, at in events if at <= t_end), default=0)
                for dev, events in list(sent.items())
            ):
                break
            time.sleep(0.5)
        cores = (processor_cpu_s(proc) - cpu0) / (time.time() - t_start)
        jit1 = jit_compile_s(jvm)
        jit = None if jit0 is None or jit1 is None else round(jit1 - jit0, 1)
        measured = sum(
            1 for events in list(sent.values()) for _, at in events if t_start <= at <= t_end
        )
        missing = measured - len(latencies)
        if missing:
            say(f"{missing:,} measured events had not reached gold 120 s after the window")
            latencies += [float("inf")] * missing
        stop_flag.set()
        thread.join(30)
        quiet_cores = quiet_cpu(proc, rate, *quiet) if quiet[1] > 0 else None
    finally:
        stop_flag.set()
        proc.stop(60)
    pct = percentiles(latencies, (50, 95, 99))
    say(
        f"latency at {rate:,.0f} events/s over {len(latencies):,} events: "
        f"p50 {pct['p50']:.2f} s, p95 {pct['p95']:.2f} s; the processor used {cores:.2f} cores"
    )
    at = f"_at_{rate:.0f}"
    if quiet_cores is not None:
        say(
            f"with no input, after {rate:,.0f} events/s, the processor used {quiet_cores:.3f} cores"
        )
    return {
        f"cores_quiet_after_{rate:.0f}": None if quiet_cores is None else round(quiet_cores, 3),
        f"p50_latency_s{at}": round(pct["p50"], 3),
        f"p95_latency_s{at}": round(pct["p95"], 3),
        f"cores{at}": round(cores, 2),
        f"latency_events{at}": len(latencies),
        f"latency_missing{at}": missing,
        f"jit_compile_s{at}": jit,
    }


def quiet_cpu(proc: Child, rate: float, wait_s: float, seconds: float) -> float:
    """The processor's cores over ``seconds``, ``wait_s`` after its input stopped."""
    say(f"load stopped; {wait_s:.0f} s for the last batches, then {seconds:.0f} s measured")
    time.sleep(wait_s)
    if proc.proc.poll() is not None:
        raise RuntimeError(f"the processor stopped after the {rate:,.0f} events/s run")
    t0, cpu0 = time.time(), processor_cpu_s(proc)
    time.sleep(seconds)
    return (processor_cpu_s(proc) - cpu0) / (time.time() - t0)


def avro_throughput(
    info: broker.BrokerInfo, jars: Path, work: Path, args: argparse.Namespace
) -> dict[str, float | None]:
    """The classic throughput run again with the backlog as Avro, beside the JSON one."""
    say("the throughput run again, the backlog as Avro through a local schema registry")
    REGISTRY["url"] = schema_registry.start(work / "schema-registry", quiet=True).url
    MODE["connect"], MODE["avro"] = False, True
    try:
        run = work / "avro"
        run.mkdir(exist_ok=True)
        measured = throughput(info, jars, run, args.events, args.warmup_events, args.warm_backlogs)
    finally:
        MODE["avro"] = False
    figures = {"avro_" + k: v for k, v in measured.items()}
    return figures | {"avro_to_json_ratio": round(measured["events_per_s"] / EPS["json"], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--warmup-events", type=int, default=20_000)
    ap.add_argument(
        "--warm-backlogs", type=int, default=1,
        help="backlogs of --events run (and reported) before the measured one (JIT warm-up)",
    )  # fmt: skip
    ap.add_argument("--latency-s", type=float, default=180.0, help="measured window per rate")
    ap.add_argument(
        "--rates", default="200,2000", help="events/s of each latency and cost run, comma-separated"
    )
    ap.add_argument(
        "--latency-warm-s", type=float, default=300.0,
        help="seconds under load, after every query's first batch, before latency is measured "
        "(the JIT compilers take about 5 minutes to settle)",
    )  # fmt: skip
    ap.add_argument(
        "--work", type=Path, help="keep the logs and lakes in this folder (default: a temp dir)"
    )
    ap.add_argument(
        "--quiet-wait-s", type=float, default=150.0,
        help="after each rate's window, seconds without input before the quiet cores are measured",
    )  # fmt: skip
    ap.add_argument(
        "--quiet-s", type=float, default=90.0,
        help="seconds the quiet cores are measured over, after each rate (0: skip)",
    )  # fmt: skip
    ap.add_argument("--skip-latency", action="store_true", help="measure throughput only")
    ap.add_argument("--skip-throughput", action="store_true", help="measure latency and cost only")
    ap.add_argument(
        "--setting", action="append", default=[], metavar="NAME=VALUE",
        help="a processor setting for both runs, e.g. trigger_interval='2 seconds' (repeatable)",
    )  # fmt: skip
    ap.add_argument(
        "--java-home", type=Path, metavar="DIR",
        help="the Java the processor runs on, e.g. /usr/lib/jvm/temurin-25-jdk-amd64 "
        "(default: this shell's JAVA_HOME, else java on PATH; the broker keeps that one)",
    )  # fmt: skip
    ap.add_argument(
        "--remote", action="store_true",
        help="then measure the same runs again through a local Spark Connect server "
        "(infra.spark_connect), one per run; their figures are prefixed connect_",
    )  # fmt: skip
    ap.add_argument(
        "--format", choices=("json", "avro"), default="json",
        help="avro: then measure the throughput again with the backlog as Avro (Confluent "
        "framing, a local schema registry), figures prefixed avro_, and avro_to_json_ratio",
    )  # fmt: skip
    ap.add_argument(
        "--realtime-alerts", action="store_true",
        help="give the latency runs an alerts topic, so the processor also runs the real-time "
        "alert app (as make demo does); its CPU counts in cores_at_<rate>",
    )  # fmt: skip
    args = ap.parse_args()
    if args.java_home:
        if not (args.java_home / "bin" / "java").is_file():
            ap.error(f"--java-home {args.java_home}: no bin/java there")
        JAVA["JAVA_HOME"] = str(args.java_home)
    if args.warm_backlogs < 0:
        ap.error("--warm-backlogs must be 0 or more")
    try:
        rates = [float(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        ap.error(f"--rates takes events/s separated by commas, got {args.rates!r}")
    if not rates or min(rates) <= 0:
        ap.error("--rates needs at least one rate above 0")
    for item in args.setting:
        name, sep, value = item.partition("=")
        if not sep or not name:
            ap.error(f"--setting takes NAME=VALUE, got {item!r}")
        SETTINGS[name.strip()] = value
    jars = ensure_jar_dir("spark")
    stamp = cpu_stamp()
    say(f"this machine's CPU stamp: {stamp} s (loadtest.machine; lower is faster)")
    with tempfile.TemporaryDirectory(prefix="bench-processor-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        say(f"logs (with a line per micro-batch) under {work}")
        info = broker.start(work / "broker", quiet=True)
        try:
            figures: dict[str, float | None] = {}
            for connect in (False, True) if args.remote else (False,):
                MODE["connect"] = connect
                prefix = "connect_" if connect else ""
                run = work / "connect" if connect else work
                run.mkdir(exist_ok=True)
                if connect:
                    say("the same runs through a local Spark Connect server")
                if not args.skip_throughput:
                    measured = throughput(
                        info, jars, run, args.events, args.warmup_events, args.warm_backlogs
                    )
                    figures |= {prefix + k: v for k, v in measured.items()}
                for rate in [] if args.skip_latency else rates:
                    measured = latency(
                        info, jars, run, args.latency_s, rate, args.latency_warm_s,
                        quiet=(args.quiet_wait_s, args.quiet_s),
                        realtime_alerts=args.realtime_alerts and not connect,
                    )  # fmt: skip
                    figures |= {prefix + k: v for k, v in measured.items()}
            if args.format == "avro" and not args.skip_throughput:
                figures |= avro_throughput(info, jars, work, args)
        finally:
            broker.stop(work / "broker")
            schema_registry.stop(work / "schema-registry")
    figures |= {
        "cpu_stamp_s": stamp,
        "cpu_stamp_after_s": cpu_stamp(),
    }
    # A figure that never arrived (infinitely late) is reported as null.
    print(json.dumps({k: v if v is None or math.isfinite(v) else None for k, v in figures.items()}))


if __name__ == "__main__":
    main()
