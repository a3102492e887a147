"""Local state folders for the infra tools (re-exported from ``common.paths``)."""

from common.paths import HOME_ENV, PROJECT_ROOT, state_dir

__all__ = ["HOME_ENV", "PROJECT_ROOT", "state_dir"]
