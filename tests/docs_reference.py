"""The documentation's reference hook (``docs/hooks/reference.py``) as a module for tests.

MkDocs loads the hook by its path; tests load it the same way, once.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
HOOK = ROOT / "docs" / "hooks" / "reference.py"


@functools.cache
def reference() -> ModuleType:
    """The hook module, imported from its file."""
    spec = importlib.util.spec_from_file_location("iot_pulse_docs_reference", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and annotations look the module up
    spec.loader.exec_module(module)
    return module
