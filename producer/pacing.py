"""How many readings the send loop sends now to hold a rate profile.

The loop is closed on what was actually sent: at every step it sends what the
profile's integral says is due by now, so a slow step is made up by the next ones.
When it falls behind by more than ``MAX_LAG_S`` seconds of work (the sink is slower
than the target), the excess is forgiven and counted in ``Pacer.forgiven``.
"""

from __future__ import annotations

from dataclasses import dataclass

from producer.rate import RateProfile

MAX_LAG_S = 2.0  # behind the target by more than this much work: forgive the rest
MAX_SLEEP_S = 0.05
# At a set rate, send at most one batch per this many seconds of the target (or per
# ``batch_size`` readings): a batch per reading costs a vectorised step each, and at
# a few thousand readings/s that alone would keep a core busy.
MIN_STEP_S = 0.01
MIN_SLEEP_S = 0.0002


@dataclass(frozen=True)
class Step:
    """What the loop does next: send ``send`` readings, or wait ``wait_s`` seconds first."""

    send: int = 0
    wait_s: float = 0.0


@dataclass
class Pacer:
    """The send loop's pacing for one run.

    Attributes:
        profile: Target rate over time (constant 0 = as fast as possible).
        batch_size: Most readings sent per step.
        forgiven: Readings the run fell behind by and no longer tries to send.
    """

    profile: RateProfile
    batch_size: int = 512
    forgiven: float = 0.0

    def step(self, elapsed: float, sent: int, left: int | None = None) -> Step:
        """The next step, ``elapsed`` seconds into the run with ``sent`` readings sent.

        Args:
            elapsed: Seconds since the clock started.
            sent: Readings sent so far.
            left: Readings the run may still make (a count limit), None without one.
        """
        if self.profile.unlimited:
            n = self.batch_size
        else:
            due = self.profile.cumulative(elapsed) - self.forgiven - sent
            rate = self.profile.rate_at(elapsed)
            size = min(max(1.0, rate * MIN_STEP_S), self.batch_size)
            if left is not None:
                size = max(1.0, min(size, left))
            if due < size:
                wait = (size - due) / rate if rate > 0 else MAX_SLEEP_S
                return Step(wait_s=min(max(wait, MIN_SLEEP_S), MAX_SLEEP_S))
            lag_cap = max(rate * MAX_LAG_S, self.batch_size)
            if due > lag_cap:
                self.forgiven += due - lag_cap
                due = lag_cap
            n = min(int(due), self.batch_size)
        return Step(send=n if left is None else min(n, left))
