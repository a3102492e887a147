"""Health check of a service that logs when it is ready: ``python log_ready.py SERVICE LINE``.

Exits 0 when the service's log (``common.cli.log_path``: ``<IOT_PULSE_HOME>/logs/
<SERVICE>.log``, appended to by every run) holds LINE after its last ``start:`` line and
no ``exit`` line after that; else 1, with what is missing on stdout (``docker inspect``
shows it). The bridge's image uses it with ``[bridge] forwarding``, the line it logs once
it has subscribed on MQTT and checked Kafka.
"""

from __future__ import annotations

import sys

from common.cli import log_path


def ready(log: str, service: str, line: str) -> str | None:
    """None when ``line`` follows the last start of ``service`` in ``log``; else why not."""
    start = log.rfind(f": start: {service}")
    if start < 0:
        return f"{service} has not started"
    since = log[start:].splitlines()[1:]
    if any(": exit " in entry for entry in since):
        return f"{service} has exited"
    if not any(line in entry for entry in since):
        return f"{service} started, not ready yet (no {line!r} in its log)"
    return None


def main(argv: list[str]) -> int:
    """Check ``SERVICE LINE``; print the answer and return the exit code."""
    service, line = argv
    path = log_path(service)
    try:
        log = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        print(f"no log at {path} ({exc.strerror})")
        return 1
    problem = ready(log, service, line)
    print(problem or f"ready: {line!r} in {path}")
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
