"""The lake's files outside its tables (the queries' checkpoints), reached from Python.

The processor lists and deletes checkpoint files through pyarrow's file systems with
the lake's own settings (a local folder, or S3 with ``IOT_LAKE_S3_*``), not through
Spark's JVM: the same code runs on a classic session and through Spark Connect,
where the client has no JVM.
"""

from __future__ import annotations

from urllib.parse import urlparse

import pyarrow.fs as pafs

from common.cli import local_path
from common.lake_settings import LakeSettings


class LakeFiles:
    """Files and folders of one lake."""

    def __init__(self, lake: LakeSettings, *, fail_fast: bool = False) -> None:
        """Reach the lake's store as ``lake`` says (nothing is read until asked).

        Args:
            lake: The lake's settings.
            fail_fast: One try per request, with short timeouts (a check).
        """
        self._lake = lake
        self._fail_fast = fail_fast
        self._s3: pafs.FileSystem | None = None

    def _resolve(self, location: str) -> tuple[pafs.FileSystem, str]:
        """The file system and its path for a folder or file of the lake."""
        local = local_path(location)
        if local is not None:
            return pafs.LocalFileSystem(), str(local)
        parsed = urlparse(location)
        if parsed.scheme not in ("s3", "s3a"):
            raise ValueError(f"{location}: only local and S3 lakes are reached from Python")
        if self._s3 is None:
            self._s3 = _s3_filesystem(self._lake, self._fail_fast)
        return self._s3, f"{parsed.netloc}{parsed.path}".rstrip("/")

    def file_type(self, location: str) -> str:
        """``file``, ``directory`` or ``missing`` (a bucket is a directory)."""
        fs, path = self._resolve(location)
        kind = fs.get_file_info(path).type
        if kind == pafs.FileType.NotFound:
            return "missing"
        return "directory" if kind == pafs.FileType.Directory else "file"

    def names(self, folder: str) -> list[str]:
        """The names in ``folder`` (files and folders); empty when it does not exist."""
        fs, path = self._resolve(folder)
        selector = pafs.FileSelector(path, allow_not_found=True)
        return [info.base_name for info in fs.get_file_info(selector)]

    def read_text(self, location: str) -> str | None:
        """A file's text (UTF-8); None when it does not exist."""
        fs, path = self._resolve(location)
        try:
            with fs.open_input_stream(path) as stream:
                return stream.read().decode()
        except FileNotFoundError:
            return None

    def delete_file(self, location: str) -> None:
        """Delete one file."""
        fs, path = self._resolve(location)
        fs.delete_file(path)

    def delete_folder(self, location: str) -> bool:
        """Delete a folder and all it holds; True if it was there."""
        fs, path = self._resolve(location)
        if fs.get_file_info(path).type == pafs.FileType.NotFound:
            return False
        fs.delete_dir(path)
        return True


def _s3_filesystem(lake: LakeSettings, fail_fast: bool) -> pafs.S3FileSystem:
    """The S3 client of pyarrow with the lake's endpoint, region, addressing and keys."""
    endpoint = urlparse(lake.s3_endpoint) if lake.s3_endpoint else None
    options: dict[str, object] = {}
    if fail_fast:
        options |= {
            "connect_timeout": 5,
            "request_timeout": 10,
            "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=1),
        }
    if endpoint is not None:
        options["endpoint_override"] = endpoint.netloc or endpoint.path
        options["scheme"] = endpoint.scheme or "https"
    if lake.s3_region:
        options["region"] = lake.s3_region
    if lake.s3_secret_access_key is not None:
        options["access_key"] = lake.s3_access_key_id
        options["secret_key"] = lake.s3_secret_access_key.get_secret_value()
    options["force_virtual_addressing"] = not lake.s3_path_style
    # A keyword only where the lake sets it, so that pyarrow's defaults hold otherwise.
    return pafs.S3FileSystem(**options)  # type: ignore[arg-type]  # one dict of mixed values; pyarrow's stubs type each keyword
