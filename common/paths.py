"""Where local state lives: one git-ignored folder, ``.local/`` or ``$IOT_PULSE_HOME``."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "IOT_PULSE_HOME"
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def state_dir() -> Path:
    """Return the root folder for local state (jars, broker data, lake), creating it."""
    root = Path(os.environ.get(HOME_ENV) or PROJECT_ROOT / ".local")
    root.mkdir(parents=True, exist_ok=True)
    return root
