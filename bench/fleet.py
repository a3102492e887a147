"""How long a fleet takes to build, and what it holds, in the producer and the processor.

Each figure comes from a fresh child process, so that one size's memory and caches do not
carry into the next:

* **producer**: from the child's start (before the producer's modules are imported) to
  its first batch of readings in the ``realistic`` scenario (``producer.launch.make_source``
  then ``next_batch``): ``producer_first_reading_s_<n>``; and the peak resident memory
  then, less the peak after the imports alone: ``producer_fleet_mb_<n>`` (the fleet's
  profiles, the simulation's state, the fault and anomaly injectors).
* **processor**: the device dimension written to a fresh lake by the processor's own
  ``processor.lake_setup.write_devices``, timed once the Spark session is up and has
  written one small table (so that the JIT's first Delta write is not counted):
  ``processor_dimension_s_<n>``.

With ``--pipeline SIZE:RATE:SECONDS,...`` it also runs the whole pipeline for each fleet,
through ``python -m loadtest run`` (a local broker, the processor, the producer in the
``realistic`` scenario, then ``verify``), and reads from the load test's report and the
lake's ``ops/pipeline_metrics``: whether ``verify`` found nothing lost or doubled
(``pipeline_lost_<n>``, ``pipeline_duplicated_<n>``), p95 event time to gold
(``pipeline_p95_gold_s_<n>``), the median silver micro-batch
(``pipeline_silver_batch_s_<n>``) and its trend (the median of the run's last third of
batches over its first third: ``pipeline_silver_trend_<n>``, 1 for no growth), the
deduplication's state (``pipeline_silver_state_rows_<n>``), and the median batch of each
background query (``pipeline_<query>_batch_s_<n>``).

The 50-device fleet of ``make demo`` runs beside the large ones in the same run: compare
the sizes within one run (this machine's speed moves from hour to hour).

Usage: ``python bench/fleet.py [--sizes 50,100000,1000000,10000000]
[--processor-sizes 50,1000000] [--pipeline 50:3000:600,1000000:3000:600]``. The last
line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def producer_child(size: int) -> dict[str, float]:
    """In a fresh process: time and memory of the producer's fleet, to its first reading."""
    t0 = time.perf_counter()
    sys.path.insert(0, str(ROOT))
    from producer.launch import make_source
    from producer.settings import ProducerSettings

    settings = ProducerSettings(
        _env_file=None, fleet_size=size, seed=42, transport="stdout", scenario="realistic"
    )
    base = _peak_mb()
    source = make_source(settings)
    source.prepare()
    batch = source.next_batch(1000)
    elapsed = time.perf_counter() - t0
    assert batch, "no readings"
    return {"first_reading_s": round(elapsed, 3), "fleet_mb": round(_peak_mb() - base, 1)}


def processor_child(size: int) -> dict[str, float]:
    """In a fresh process: the device dimension's write, once the Spark session is up."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from infra.jars import ensure_jar_dir
    from processor.lake_setup import write_devices
    from processor.session import build_session
    from processor.settings import ProcessorSettings

    with tempfile.TemporaryDirectory(prefix="iot-fleet-bench-") as root:
        settings = ProcessorSettings(
            _env_file=None,
            jars_dir=str(ensure_jar_dir("spark", quiet=True)),
            fleet_size=size,
            seed=42,
            lake={"root": root},
        )
        spark = build_session(settings, app_name="bench-fleet")
        spark.range(10).write.format("delta").save(f"{root}/warm-up")
        t0 = time.perf_counter()
        write_devices(spark, settings)
        elapsed = time.perf_counter() - t0
        spark.stop()
    return {"dimension_s": round(elapsed, 3)}


def pipeline(size: int, rate: int, seconds: int, out: Path) -> dict[str, float]:
    """The whole pipeline for one fleet, through the load test; its figures."""
    command = [
        sys.executable, "-m", "loadtest", "run", "--fleet-size", str(size), "--rate", str(rate),
        "--duration-s", str(seconds), "--scenario", "realistic", "--out-dir", str(out),
        "--no-dashboard-report",
    ]  # fmt: skip
    env = os.environ | {"IOT_PULSE_HOME": str(out / "home")}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    report_file = out / "report.json"
    if not report_file.is_file():
        raise SystemExit(f"bench/fleet.py: the load test of {size:,} devices wrote no report:\n"
                         f"{done.stdout[-2000:]}{done.stderr[-2000:]}")  # fmt: skip
    report = json.loads(report_file.read_text())
    verify = report["verify"]
    stages = verify["latency"].get("stages", {})
    figures = {
        "lost": float(verify["loss"]["total"]),
        "duplicated": float(verify["duplicates"]["silver_duplicated_ids"]),
        "p95_gold_s": stages.get("gold", {}).get("p95", float("nan")),
    }
    metrics = pl.read_delta(str(Path(report["lake"]) / "ops" / "pipeline_metrics"))
    for query, batches in metrics.sort("timestamp").group_by("query_name", maintain_order=True):
        seconds_each = (batches["batch_duration_ms"] / 1000).to_list()
        figures[f"{query[0]}_batch_s"] = round(statistics.median(seconds_each), 2)
        if query[0] == "silver" and len(seconds_each) >= 6:
            third = len(seconds_each) // 3
            first, last = seconds_each[1 : third + 1], seconds_each[-third:]  # past batch 0
            figures["silver_trend"] = round(statistics.median(last) / statistics.median(first), 2)
            figures["silver_state_rows"] = float(batches["state_rows"].max())
    return figures


def in_child(side: str, size: int) -> dict[str, float]:
    """Run one side for one size in a fresh interpreter; its figures."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", side, str(size)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"bench/fleet.py: the {side} at {size:,} devices failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Measure each size, print a table, then the figures as one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,100000,1000000,10000000")
    parser.add_argument("--processor-sizes", default="50,1000000")
    parser.add_argument("--pipeline", default="", help="SIZE:RATE:SECONDS,... load tests")
    parser.add_argument("--child", nargs=2, metavar=("SIDE", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        side, size = args.child[0], int(args.child[1])
        child = producer_child if side == "producer" else processor_child
        print(json.dumps(child(size)))
        return 0
    figures: dict[str, float] = {}
    for size in (int(s) for s in args.sizes.split(",") if s):
        got = in_child("producer", size)
        print(
            f"producer   {size:>11,} devices: first reading {got['first_reading_s']:7.2f} s, "
            f"fleet {got['fleet_mb']:8.1f} MB",
            flush=True,
        )
        figures[f"producer_first_reading_s_{size}"] = got["first_reading_s"]
        figures[f"producer_fleet_mb_{size}"] = got["fleet_mb"]
    for size in (int(s) for s in args.processor_sizes.split(",") if s):
        got = in_child("processor", size)
        print(f"processor  {size:>11,} devices: dimension {got['dimension_s']:7.2f} s", flush=True)
        figures[f"processor_dimension_s_{size}"] = got["dimension_s"]
    for spec in (s for s in args.pipeline.split(",") if s):
        size, rate, seconds = (int(v) for v in spec.split(":"))
        with tempfile.TemporaryDirectory(prefix="iot-fleet-pipeline-") as out:
            got = pipeline(size, rate, seconds, Path(out))
        print(
            f"pipeline   {size:>11,} devices at {rate:,}/s: "
            + ", ".join(f"{k} {v:g}" for k, v in got.items()),
            flush=True,
        )
        figures |= {f"pipeline_{k}_{size}": v for k, v in got.items()}
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
