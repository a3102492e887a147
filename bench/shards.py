"""Four shards (four producer processes, as from four hosts) against one producer with four workers.

Both sides send the same fleet and count to one local broker as fast as they can (the
``realistic`` scenario, manifests on): side ``workers`` is ``python -m producer --workers
4``; side ``shards`` is four ``python -m producer --shard K/4`` processes given one
``--start-at``, whose reports merge into one (``producer.report_merge``: the sending lasts
from the first start to the last end). Each side's topic is checked to hold every
acknowledged message. The sides take turns, the first round of each is a warm-up, and the
best round of each counts; ``ratio`` is shards over workers, same run, same machine.

The last line printed is one JSON object::

    {"workers_events_per_s": ..., "shards_events_per_s": ..., "ratio": ...,
     "shards_start_spread_s": ..., "rounds": [...]}

Usage: ``python bench/shards.py [--count 400000] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.report import ProducerReport  # noqa: E402
from infra import broker  # noqa: E402
from producer.report_merge import merge_reports  # noqa: E402

SHARDS = 4
START_DELAY_S = 10.0  # the shards' shared start, after their launch (imports, fleet, broker)


def _command(args: argparse.Namespace, report: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "producer", "--count", str(args.count), "--rate", "0",
        "--scenario", "realistic", "--fleet-size", str(args.fleet_size), "--seed", "42",
        "--progress-s", "30", "--report-path", str(report),
        "--manifest-path", str(report.with_suffix(".jsonl")), *extra,
    ]  # fmt: skip


def _env(bootstrap: str, topic: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("IOT_")} | {
        "IOT_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "IOT_KAFKA_TOPIC": topic,
    }


def _read(report: Path) -> ProducerReport:
    done = ProducerReport.read(report)
    if done is None:
        raise SystemExit(f"a producer wrote no report at {report}: see its output above")
    return done


def run_workers(args: argparse.Namespace, bootstrap: str, topic: str, work: Path) -> dict:
    report = work / f"{topic}.json"
    cmd = _command(args, report, "--workers", str(SHARDS))
    subprocess.run(cmd, cwd=ROOT, env=_env(bootstrap, topic), check=False, timeout=1800)
    done = _read(report)
    return {"sent": done.sent, "acked": done.acked, "events_per_s": done.achieved_rate}


def run_shards(args: argparse.Namespace, bootstrap: str, topic: str, work: Path) -> dict:
    start_at = (datetime.now(UTC) + timedelta(seconds=START_DELAY_S)).isoformat()
    reports = [work / f"{topic}-{k}.json" for k in range(SHARDS)]
    procs = [
        subprocess.Popen(
            _command(args, reports[k], "--shard", f"{k}/{SHARDS}", "--start-at", start_at),
            cwd=ROOT,
            env=_env(bootstrap, topic),
        )  # fmt: skip
        for k in range(SHARDS)
    ]
    for proc in procs:
        proc.wait(1800)
    parts = [_read(r) for r in reports]
    merged = merge_reports([p.to_dict() for p in parts])
    starts = [datetime.fromisoformat(p.started_at).timestamp() for p in parts]
    return {
        "sent": merged.sent,
        "acked": merged.acked,
        "events_per_s": merged.achieved_rate,
        "start_spread_s": round(max(starts) - min(starts), 3),
    }


def main() -> None:
    """Run the rounds and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=400_000, help="events per side and round")
    parser.add_argument("--fleet-size", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds counted (plus a warm-up)")
    args = parser.parse_args()
    from bench.producer import topic_messages

    work = Path(tempfile.mkdtemp(prefix="bench-shards-"))
    info = broker.start(work / "broker", quiet=True)
    rounds: list[dict[str, Any]] = []
    try:
        bootstrap = info.plaintext
        for n in range(args.rounds + 1):
            sides = [("workers", run_workers), ("shards", run_shards)]
            row: dict[str, Any] = {"round": n, "warm_up": n == 0}
            for name, run in sides if n % 2 == 0 else sides[::-1]:
                topic = f"bench-{name}-{n}"
                broker.ensure_topic(bootstrap, topic, partitions=3)
                time.sleep(2)
                got = run(args, bootstrap, topic, work)
                held = topic_messages(bootstrap, topic)
                if held != got["acked"]:
                    raise SystemExit(f"{topic} holds {held:,} messages, {got['acked']:,} acked")
                row[name] = got
            rounds.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        broker.stop(work / "broker")
    counted = [r for r in rounds if not r["warm_up"]]
    best_w = max(r["workers"]["events_per_s"] for r in counted)
    best_s = max(r["shards"]["events_per_s"] for r in counted)
    print(
        json.dumps(
            {
                "workers_events_per_s": best_w,
                "shards_events_per_s": best_s,
                "ratio": round(best_s / best_w, 3),
                "shards_start_spread_s": max(r["shards"]["start_spread_s"] for r in counted),
                "count": args.count,
                "rounds": rounds,
            }
        )
    )


if __name__ == "__main__":
    main()
