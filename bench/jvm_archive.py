"""What the tests' class archive saves a short processor run, side by side in one run.

``tests/jvm_archive.py`` makes a class-data archive of Spark's jars, which the Spark
drivers the tests start map instead of loading and verifying those classes anew. This
bench runs the same processor run with and without it, ``--rounds`` times each,
alternating which goes first: ``python -m processor run`` over ``--events`` readings
from files (every query, ``available_now``) on a fresh lake, with the tests' quick JIT
tier (``tests.jvm_options``) either way. It makes the archive first if there is none.

Printed per run: wall time and the CPU of every process of the run (the processor's
Python, its JVM and the Python workers, sampled from ``/proc`` by session), then the
medians.
The last line printed is one JSON object with the figures.

Usage: ``python bench/jvm_archive.py [--events 2000] [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this folder comes first on sys.path and its producer.py would
# shadow the producer package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' helpers

from common.paths import PROJECT_ROOT  # noqa: E402
from loadtest.machine import process_cpu_s, session_pids  # noqa: E402
from processor.settings import ProcessorSettings  # noqa: E402
from tests import jvm_archive  # noqa: E402
from tests.integration.proc import service_env  # noqa: E402
from tests.jvm_options import QUICK_JIT_OPTIONS  # noqa: E402

FLEET, SEED = 20, 3


def say(msg: str) -> None:
    """A progress line on stderr."""
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def run_measured(cmd: list[str], env: dict[str, str], log: Path) -> tuple[float, float]:
    """Run ``cmd`` in a session of its own to the end of its last process.

    Returns:
        Wall seconds, and the CPU seconds of its processes: each one's last sample,
        every 0.2 s (a process that lives less than that may be missed; one that
        ended is not counted again in its parent's figure).
    """
    seen: dict[int, float] = {}
    started = time.monotonic()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd, cwd=PROJECT_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        while True:
            pids = session_pids(proc.pid)
            for pid in pids:
                try:
                    seen[pid] = process_cpu_s(pid)
                except OSError:
                    continue
            if proc.poll() is not None and not pids:
                break
            time.sleep(0.2)
    if proc.returncode != 0:
        raise SystemExit(f"[bench] the processor failed ({proc.returncode}): see {log}")
    return time.monotonic() - started, sum(seen.values())


def main() -> int:
    """Measure the processor run with and without the archive; print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2000, help="readings processed per run")
    ap.add_argument("--rounds", type=int, default=2, help="runs with and without, each")
    args = ap.parse_args()
    if jvm_archive.main([]) != 0:
        return 1
    archive = jvm_archive.archive_options()
    if not archive:
        raise SystemExit("[bench] no class archive to compare with (no java?)")
    options = {"without": QUICK_JIT_OPTIONS, "with": f"{QUICK_JIT_OPTIONS} {archive}"}
    figures: dict[str, list[tuple[float, float]]] = {"without": [], "with": []}
    with tempfile.TemporaryDirectory(prefix="bench-jvm-archive-") as tmp:
        work = Path(tmp)
        landing = work / "made"
        subprocess.run(
            jvm_archive.file_events_command(landing, args.events, FLEET, SEED),
            cwd=PROJECT_ROOT,
            env=service_env(),
            check=True,
            capture_output=True,
        )
        for r in range(args.rounds):
            order = ("without", "with") if r % 2 == 0 else ("with", "without")
            for name in order:
                run = work / f"{name}-{r}"
                env = service_env(**ProcessorSettings.env_vars(driver_java_options=options[name]))
                wall, cpu = run_measured(
                    jvm_archive.file_processor_command(landing, run / "lake", FLEET, SEED),
                    env,
                    work / "processor.log",
                )
                figures[name].append((wall, cpu))
                say(f"round {r + 1}, {name} the archive: wall {wall:.1f} s, CPU {cpu:.1f} s")
    med = {
        name: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
        for name, runs in figures.items()
    }
    result = {
        "events": args.events,
        "rounds": args.rounds,
        "wall_s_without": round(med["without"][0], 1),
        "wall_s_with": round(med["with"][0], 1),
        "cpu_s_without": round(med["without"][1], 1),
        "cpu_s_with": round(med["with"][1], 1),
        "cpu_ratio_with_to_without": round(med["with"][1] / med["without"][1], 3),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
