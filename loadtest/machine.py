"""How fast this machine runs code right now, so that figures from two runs compare.

A benchmark figure (events/s, cores, latency) moves with the machine as much as with
the code: the same commit measured 21,000-27,000 events/s on one day and 5,900 on a
later one, on a machine of the same size. ``cpu_stamp`` times a fixed piece of pure
Python work; a bench prints it beside its figures, and two figures are comparable
only when their stamps are close.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

import psutil

# The fixed work: summing this many integers in the interpreter.
STAMP_WORK = 10_000_000


def cpu_stamp(repeats: int = 3) -> float:
    """Seconds one core takes for the fixed work (the best of ``repeats`` runs).

    The best run is the machine's speed with the least interference. Lower is faster.
    """
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        sum(range(STAMP_WORK))
        best = min(best, time.perf_counter() - t0)
    return round(best, 3)


def process_cpu_s(pid: int, exited_children: bool = False) -> float:
    """CPU seconds (user + system) the running process ``pid`` has used so far.

    Args:
        pid: The process.
        exited_children: Add what its children that have ended used (once waited for,
            with what their own ended children used): summed over a process tree's live
            processes, this counts the processes that ended too.

    Raises:
        OSError: the process is gone.
    """
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.NoSuchProcess as exc:
        raise ProcessLookupError(f"no process {pid}") from exc
    used = times.user + times.system
    if exited_children:
        used += times.children_user + times.children_system
    return used


def processes_cpu_s(pids: Iterable[int]) -> float:
    """CPU seconds the live processes ``pids`` used so far, each with its ended children.

    A process that is gone by the time it is read counts nothing.
    """
    total = 0.0
    for pid in pids:
        try:
            total += process_cpu_s(pid, exited_children=True)
        except OSError:
            continue
    return total


def session_pids(session: int) -> list[int]:
    """The live processes of a session (a process started with ``start_new_session``)."""
    pids = []
    for pid in psutil.pids():
        try:
            if os.getsid(pid) == session:
                pids.append(pid)
        except (ProcessLookupError, PermissionError):
            continue
    return pids
