"""Which offsets may be committed: those whose alerts every destination has finished.

An offset is committed (as the next one to read) only when it and every offset before
it on its partition are done, so that a restart redelivers whatever was not.
"""

from __future__ import annotations


class OffsetTracker:
    """Offsets read and not yet done, per partition."""

    def __init__(self) -> None:
        """Nothing read yet."""
        self._open: dict[int, dict[int, int]] = {}  # partition -> offset -> destinations left
        self._read: dict[int, int] = {}  # partition -> the highest offset read
        self._committed: dict[int, int] = {}

    def add(self, partition: int, offset: int, waiting: int) -> None:
        """An offset read, which ``waiting`` destinations have still to finish."""
        self._read[partition] = max(offset, self._read.get(partition, -1))
        if waiting > 0:
            self._open.setdefault(partition, {})[offset] = waiting

    def done(self, partition: int, offset: int) -> None:
        """One destination finished the offset (delivered it or dead-lettered it)."""
        left = self._open.get(partition, {})
        if offset not in left:
            return
        left[offset] -= 1
        if left[offset] <= 0:
            del left[offset]

    def committable(self) -> dict[int, int]:
        """Partition -> the offset to commit (next to read), where it moved on."""
        out = {}
        for partition, highest in self._read.items():
            left = self._open.get(partition)
            position = min(left) if left else highest + 1
            if position > self._committed.get(partition, -1):
                out[partition] = position
        return out

    def committed(self, positions: dict[int, int]) -> None:
        """Record what the broker took."""
        self._committed.update(positions)

    def forget(self, partitions: list[int]) -> None:
        """Drop partitions no longer assigned."""
        for p in partitions:
            self._open.pop(p, None)
            self._read.pop(p, None)
            self._committed.pop(p, None)
