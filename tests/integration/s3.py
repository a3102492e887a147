"""An S3-compatible object store for tests: moto's server (PyPI), one process per use.

``moto_server`` starts ``python -m moto.server`` on a free local port and stops it
(with everything it holds, in memory) on exit. Its keys are dummies: moto accepts any.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common.lake_settings import LakeSettings
from infra.daemons import free_ports

# moto takes any key; these are the dummy values its documentation uses.
ACCESS_KEY_ID = SECRET_ACCESS_KEY = "testing"
REGION = "us-east-1"


@contextlib.contextmanager
def moto_server(log: Path, timeout_s: float = 60) -> Iterator[str]:
    """Run moto's S3 server on a free port; yield its endpoint URL (``http://127.0.0.1:PORT``)."""
    port = free_ports("127.0.0.1")[0]
    endpoint = f"http://127.0.0.1:{port}"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto's server exited ({proc.returncode}): {log.read_text()}")
            try:
                with urllib.request.urlopen(endpoint + "/", timeout=2):
                    break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"moto's server did not answer in {timeout_s:.0f} s"
                    ) from None
                time.sleep(0.2)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def create_bucket(endpoint: str, bucket: str) -> None:
    """Create ``bucket`` (moto takes an unsigned request)."""
    request = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200, response.status


def _client(endpoint: str) -> Any:
    """A boto3 S3 client of the server at ``endpoint``."""
    import boto3  # moto's own dependency

    return boto3.client(
        "s3", endpoint_url=endpoint, region_name=REGION,
        aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY,
    )  # fmt: skip


def list_keys(endpoint: str, bucket: str, prefix: str) -> list[str]:
    """Every key under ``prefix`` in ``bucket``."""
    pages = (
        _client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    )
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def download(endpoint: str, bucket: str, prefix: str, dest: Path) -> int:
    """Copy every object under ``prefix/`` into ``dest``, keys as relative paths.

    Returns:
        How many objects were copied.
    """
    client = _client(endpoint)
    # S3A marks the folders it makes with empty objects whose keys end in "/".
    keys = [k for k in list_keys(endpoint, bucket, prefix.rstrip("/") + "/") if not k.endswith("/")]
    for key in keys:
        target = dest / key.removeprefix(prefix.rstrip("/") + "/")
        target.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(bucket, key, str(target))
    return len(keys)


def _lake_values(endpoint: str, root: str) -> dict[str, object]:
    return {
        "root": root, "s3_endpoint": endpoint, "s3_region": REGION, "s3_path_style": True,
        "s3_access_key_id": ACCESS_KEY_ID, "s3_secret_access_key": SECRET_ACCESS_KEY,
    }  # fmt: skip


def lake_env(endpoint: str, root: str) -> dict[str, str]:
    """The ``IOT_LAKE_*`` variables of a lake at ``root`` on the server at ``endpoint``."""
    return LakeSettings.env_vars(**_lake_values(endpoint, root))


def lake_settings(endpoint: str, root: str) -> LakeSettings:
    """The settings ``lake_env`` gives a child process, for reading the lake here."""
    return LakeSettings(_env_file=None, **_lake_values(endpoint, root))  # type: ignore[arg-type]
