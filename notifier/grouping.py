"""The per-device rate limit: a flapping sensor's alerts go out as one message per window.

For one destination: a device's first alert goes out at once and opens a window of
``window_s``; the device's alerts within the window are held and, when it ends, go out
together as one message, which opens the next window. A window with nothing held
closes. Time is given by the caller (no clock here), so the behaviour is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from notifier.records import Received


@dataclass
class _Window:
    ends: float
    held: list[Received] = field(default_factory=list)


class RateLimiter:
    """Groups each device's alerts within ``window_s`` of its last message."""

    def __init__(self, window_s: float) -> None:
        """A limiter whose windows last ``window_s`` seconds (0: every alert at once)."""
        self.window_s = window_s
        self._windows: dict[str, _Window] = {}

    def offer(self, item: Received, now: float) -> list[Received] | None:
        """Take an alert: the message to send now, or None if held.

        The message is the alert alone, or, when its device's window has ended with
        alerts still held (the caller was busy past its end), those and this one.
        """
        if self.window_s <= 0:
            return [item]
        device = item.alert.device_id
        window = self._windows.get(device)
        if window is not None and now < window.ends:
            window.held.append(item)
            return None
        # An ended window's held alerts go out now, with this one, in one message.
        held = window.held if window is not None else []
        self._windows[device] = _Window(now + self.window_s)
        return [*held, item]

    def due(self, now: float, limit: int | None = None) -> list[list[Received]]:
        """The held groups whose window has ended, oldest window first.

        Each one sent opens its device's next window at ``now``; an ended window with
        nothing held is closed.

        Args:
            now: The caller's time.
            limit: The most groups to return; the others stay held, and due.
        """
        out: list[list[Received]] = []
        for device, window in sorted(self._windows.items(), key=lambda kv: kv[1].ends):
            if limit is not None and len(out) >= limit:
                break
            if now < window.ends:
                continue
            if window.held:
                out.append(window.held)
                self._windows[device] = _Window(now + self.window_s)
            else:
                del self._windows[device]
        return out

    def drain(self) -> list[list[Received]]:
        """Every held group, now (at shutdown or when partitions are taken away)."""
        out = [w.held for w in self._windows.values() if w.held]
        self._windows.clear()
        return out

    def next_due(self) -> float | None:
        """When the next window with held alerts ends, if any."""
        ends = [w.ends for w in self._windows.values() if w.held]
        return min(ends) if ends else None
