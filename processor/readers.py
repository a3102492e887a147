"""Whether the lake's readers can read a table: the dashboard and ``loadtest verify``.

They read through delta-rs, whose reader supports fewer Delta table features than
delta-spark writes (deletion vectors, for one). The processor creates its tables with
``common.lake.READER_TABLE_PROPERTIES``; a table that exists already, made by an
earlier run on a cluster with other defaults or by another tool, is checked here, by
asking delta-rs itself, before any query starts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from deltalake.exceptions import DeltaProtocolError

from common.delta_table import open_delta_table

_FEATURES_RE = re.compile(r"\{([^}]*)\}")


class TableUnreadableError(RuntimeError):
    """A table uses a Delta feature the dashboard's and verify's reader cannot read."""


def check_readable(path: str, storage_options: Mapping[str, str] | None = None) -> None:
    """Raise ``TableUnreadableError`` if delta-rs cannot read the table at ``path``.

    Args:
        path: The table's location.
        storage_options: How delta-rs reaches it (``LakeSettings.storage_options``).
    """
    try:
        open_delta_table(path, storage_options).to_pyarrow_dataset()
    except DeltaProtocolError as exc:
        found = _FEATURES_RE.search(str(exc))
        features = found.group(1).replace("'", "") if found else "a reader feature"
        hint = ""
        if "deletionVectors" in features:
            hint = (
                " (ALTER TABLE ... SET TBLPROPERTIES ('delta.enableDeletionVectors' = false), "
                "REORG TABLE ... APPLY (PURGE), then ALTER TABLE ... DROP FEATURE "
                "deletionVectors)"
            )
        raise TableUnreadableError(
            f"the table at {path} uses the Delta feature {features}, which the dashboard and "
            f"loadtest verify (delta-rs) cannot read: write to a new lake (IOT_LAKE_ROOT), or "
            f"remove the feature from the table{hint}"
        ) from None
