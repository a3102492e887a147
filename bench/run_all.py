"""Run every benchmark under bench/, print each figure beside its target, save the results.

Each ``bench/<name>.py`` (this file aside) prints what it measures and, as its last
line, one JSON object of figures. This runner starts them one after the other (they
are heavy; running them together would measure the contention), shows their output
as it comes, parses that last line, and writes every figure, with the targets and
whether each was met, to ``artifacts/bench-results.json`` (``--out``).

Usage: ``python bench/run_all.py [--only dashboard] [--out FILE]``; ``make bench``.
Exit code: 0 when every bench ran and met its targets, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent

# bench name -> (figure, comparison, target)
TARGETS: dict[str, list[tuple[str, str, float]]] = {
    "producer": [("events_per_s", ">=", 200_000)],  # kcat beside it is a reference only
    # Throughput against Spark's plain Kafka -> Delta copy in the same run; cores are
    # reported, with no target.
    "processor": [
        ("pipeline_to_copy_ratio", ">=", 1.0),
        ("p95_latency_s_at_200", "<=", 5.0),
        ("p95_latency_s_at_2000", "<=", 5.0),
    ],
    # A render after a commit, at a million devices (50 devices beside them in the output).
    "dashboard": [("overview_render_s", "<=", 1.0), ("device_render_s", "<=", 1.0)],
    # A million devices built in seconds, in a few hundred MB; the 50-device figures beside.
    "fleet": [
        ("producer_first_reading_s_1000000", "<=", 5.0),
        ("producer_fleet_mb_1000000", "<=", 300.0),
        ("processor_dimension_s_1000000", "<=", 5.0),
    ],
    # py4j round trips per micro-batch to build silver's writes (CPU on both sides).
    "silver_writes": [
        ("py4j_calls_device_1m", "<=", 110),
        ("py4j_calls_silver_rows", "<=", 160),
        ("py4j_calls_quarantine_stamp", "<=", 90),
        ("py4j_calls_column_alias", "<=", 1),
    ],
    # verify out of core: a hundred million readings within 4 GB (1 and 10 million beside).
    "verify": [("peak_gb_100000000", "<=", 4.0)],
    # Four shards, as from four hosts, against one producer with four workers, same run.
    "shards": [("ratio", ">=", 0.9)],
    # A minute's background batch of a million-device fleet at 3,000 events/s, well
    # within the one-minute trigger (the stateful-operator peer's figures beside it).
    "alert_detector": [("ours_batch_s_180000", "<=", 30.0)],
    # Silver's MERGE late in an hour of a million devices reads its own minutes, not the
    # hour's: at most three-quarters of the hour-bounded peer's time, same run.
    "merge_bound": [("minute_over_hour", "<=", 0.75)],
    # A device's history from gold/device_1m, compacted with clustering against compacted
    # without (what maintain did before), same run; the last minutes' read no slower.
    "layout": [
        ("device_read_clustered_over_compacted", "<=", 0.8),
        ("recent_read_clustered_over_compacted", "<=", 1.2),
    ],
    "alerts": [
        ("p50_ms", "<=", 200),
        ("p99_ms", "<=", 1000),
        ("lost", "<=", 0),
        ("doubled", "<=", 0),
        ("unexpected", "<=", 0),
    ],
}
_OPS: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le}


def discover() -> list[str]:
    """Names of the benchmark scripts (``bench/*.py`` except this runner), sorted."""
    return sorted(p.stem for p in BENCH.glob("*.py") if p.name != Path(__file__).name)


def last_json(output: str) -> dict[str, Any] | None:
    """The last non-empty line of ``output`` as a JSON object, or None if it is not one."""
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines:
        return None
    try:
        value = json.loads(lines[-1])
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def check(name: str, figures: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of bench ``name`` against its figure (a missing figure fails)."""
    out = []
    for figure, op, target in TARGETS.get(name, []):
        value = figures.get(figure)
        met = isinstance(value, int | float) and _OPS[op](float(value), target)
        out.append({"figure": figure, "value": value, "op": op, "target": target, "met": met})
    return out


def table(name: str, figures: dict[str, Any], checks: list[dict[str, Any]]) -> str:
    """Every figure of one bench, its target beside it where it has one."""
    by_figure = {c["figure"]: c for c in checks}
    rows = [f"{name}:"]
    for figure, value in figures.items():
        if isinstance(value, float):
            shown = f"{value:,.3f}".rstrip("0").rstrip(".")
        elif isinstance(value, int) and not isinstance(value, bool):
            shown = f"{value:,}"
        else:
            shown = value
        c = by_figure.pop(figure, None)
        if c is None:
            rows.append(f"  {figure:<28} {shown}")
        else:
            verdict = "met" if c["met"] else "NOT MET"
            rows.append(f"  {figure:<28} {shown}   target {c['op']} {c['target']:,g}: {verdict}")
    for c in by_figure.values():
        rows.append(f"  {c['figure']:<28} missing   target {c['op']} {c['target']:,g}: NOT MET")
    return "\n".join(rows)


def run_one(name: str, extra: list[str]) -> dict[str, Any]:
    """Run ``bench/<name>.py``, echoing its output; return its figures and checks."""
    print(f"=== bench/{name}.py", flush=True)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, str(BENCH / f"{name}.py"), *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    captured = []
    for line in proc.stdout:
        captured.append(line)
        print(f"  | {line}", end="", flush=True)
    code = proc.wait()
    figures = last_json("".join(captured)) if code == 0 else None
    return {
        "exit_code": code,
        "seconds": round(time.monotonic() - t0, 1),
        "figures": figures or {},
        "checks": check(name, figures or {}),
        "error": None
        if figures is not None
        else (f"exited with code {code}" if code else "the last line was not a JSON object"),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks and write the results file."""
    names = discover()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=names, help="run only this bench")
    parser.add_argument("--out", type=Path, default=ROOT / "artifacts" / "bench-results.json")
    parser.add_argument(
        "--args",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="extra arguments for one bench, e.g. --args 'processor=--events 100000'",
    )
    args = parser.parse_args(argv)
    extra: dict[str, list[str]] = {}
    for item in args.args:
        name, _, rest = item.partition("=")
        if name not in names:
            parser.error(f"--args: no bench named {name!r} (have {', '.join(names)})")
        extra[name] = rest.split()
    started = datetime.now(UTC).isoformat()
    results = {name: run_one(name, extra.get(name, [])) for name in args.only or names}
    print("\n=== figures (target beside each)")
    for name, res in results.items():
        if res["error"]:
            print(f"{name}: FAILED ({res['error']})")
        else:
            print(table(name, res["figures"], res["checks"]))
    passed = all(not r["error"] and all(c["met"] for c in r["checks"]) for r in results.values())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "started_at": started,
                "finished_at": datetime.now(UTC).isoformat(),
                "cpus": os.cpu_count(),
                "load_avg_1m": round(os.getloadavg()[0], 2),
                "passed": passed,
                "benches": results,
            },
            indent=2,
        )
    )
    print(f"\n{'all targets met' if passed else 'NOT all targets met'}; results: {args.out}")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
