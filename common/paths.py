"""Where local state lives: one git-ignored folder, ``.local/`` or ``$IOT_PULSE_HOME``.

The packages may also run from a zip (``spark-submit --py-files``, on a cluster's
driver and executors): there ``PROJECT_ROOT`` is the working directory, and
``package_file`` gives a package's data file as a real file all the same.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from importlib import resources
from pathlib import Path

HOME_ENV = "IOT_PULSE_HOME"
_PACKAGES_DIR = Path(__file__).resolve().parent.parent
PROJECT_ROOT = _PACKAGES_DIR if _PACKAGES_DIR.is_dir() else Path.cwd()


def state_dir() -> Path:
    """Return the root folder for local state (jars, broker data, lake, logs).

    Only the path: whatever writes under it creates its own folder, so that a default
    that is only read (a report a page shows) never needs a writable code folder.
    """
    return Path(os.environ.get(HOME_ENV) or PROJECT_ROOT / ".local")


def package_file(package: str, name: str) -> Path:
    """A data file of ``package`` as a file on disk, which a JVM or ``open`` can read.

    From an installed or checked-out package, the file itself; from a zip, a copy in
    this user's own folder under the temp folder (mode 0700), named by its content's
    hash, written atomically, and written again if what is there differs.

    Args:
        package: The package, e.g. ``processor``.
        name: The file's name in it, e.g. ``log4j2.xml``.
    """
    resource = resources.files(package) / name
    if isinstance(resource, Path):
        return resource
    data = resource.read_bytes()
    folder = _private_temp_dir() / hashlib.sha256(data).hexdigest()[:16]
    target = folder / name
    if not target.is_file() or target.read_bytes() != data:
        folder.mkdir(mode=0o700, exist_ok=True)
        tmp = folder / f".{name}.{os.getpid()}"
        tmp.write_bytes(data)
        tmp.replace(target)
    return target


def _private_temp_dir() -> Path:
    """``<temp>/iot-pulse-<uid>``, owned by this user and closed to others; else a new one."""
    folder = Path(tempfile.gettempdir()) / f"iot-pulse-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
        if not folder.is_symlink() and info.st_uid == os.getuid() and not info.st_mode & 0o077:
            return folder
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="iot-pulse-"))
