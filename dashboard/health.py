"""``python -m dashboard.health``: exit 0 when every dashboard page renders without an error.

A container healthcheck (docker-compose.yml). Streamlit's own ``/_stcore/health``
answers as soon as the server runs, even when every page raises; this renders each
page of ``dashboard/app.py`` with Streamlit's AppTest, in this process, with the
dashboard's settings from the environment, and fails on an uncaught exception, an
error box, or a table the page cannot read (the lake unreachable, a table's columns
missing: the page says so in a warning and goes on). The live alert feed is left out:
it is a Kafka consumer of its own, which the page shows without it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

APP = Path(__file__).resolve().parent / "app.py"
RENDER_TIMEOUT_S = 60.0
HEALTHY, UNHEALTHY = 0, 1


def page_problems(timeout_s: float = RENDER_TIMEOUT_S) -> list[str]:
    """Render every page; return one line per exception, error box or unreadable table.

    Args:
        timeout_s: Seconds each page may take to render.
    """
    os.environ.setdefault("IOT_DASHBOARD_LIVE_ALERTS", "false")
    from streamlit.testing.v1 import AppTest

    from dashboard.pages import PAGES
    from dashboard.ui import UNREADABLE_ICON

    problems = []
    # One line says what failed; Streamlit's own log (on stderr) would add a trace per page.
    with _stderr_silenced():
        at = AppTest.from_file(str(APP), default_timeout=timeout_s)
        for path, title, _, _ in PAGES:
            at.switch_page(path)
            at.run()
            problems += [f"{title}: {e.message}".splitlines()[0] for e in at.exception]
            problems += [f"{title}: {e.value}".splitlines()[0] for e in at.error]
            problems += [
                f"{title}: {w.value}".splitlines()[0]
                for w in at.warning
                if w.proto.icon == UNREADABLE_ICON
            ]
    return problems


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """File descriptor 2 to /dev/null for the block (log handlers hold their own stream)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def main(argv: list[str] | None = None) -> int:
    """Print one line on the dashboard's health; return 0 if every page renders."""
    parser = argparse.ArgumentParser(prog="python -m dashboard.health", description=__doc__)
    parser.parse_args(argv)
    problems = page_problems()
    if problems:
        print(
            f"unhealthy: {problems[0]}"
            + (f" (and {len(problems) - 1} more)" if problems[1:] else "")
        )
        return UNHEALTHY
    print("healthy: every page renders")
    return HEALTHY


if __name__ == "__main__":
    sys.exit(main())
