"""Faults on purpose: what goes wrong between a device and the broker.

The injector turns readings into the messages that are sent, and on the way, at
seeded per-reading rates:

* ``duplicate``: the message is sent again, 1..``duplicate_max_gap`` readings later,
  with the same bytes (same ``event_id``);
* ``late``: the message is held back and sent once the stream's clock has moved
  ``delay`` seconds past its ``event_time`` (``delay`` from ``late_delay``);
* ``out_of_order``: the message is held back until 1..``out_of_order_max`` more
  readings of the same device have been made, so a higher ``seq`` overtakes it;
* malformed payloads, which replace the reading's message: ``broken_json`` (the
  JSON cut short), ``wrong_type`` (a number or time sent as ``"n/a"``),
  ``missing_field`` (a required field left out), ``unknown_device`` (a device id
  outside the fleet), ``oversized`` (padded past the 1 MB message limit, so the
  client or broker rejects it); the payload's format makes them
  (``producer.wire_format``: Avro has its own for the first three);
* ``clock_skew``: a share of the devices have clocks off by up to
  ``clock_skew_max_s`` seconds either way, for all their readings.

At most one malformed kind hits a reading, and a malformed reading is neither
late, out of order nor duplicated; a late reading is not also out of order.
Everything else combines. Which readings are hit depends only on the seed and
the reading's position in the stream, never on batching or timing, so the same
seed gives the same messages. Each injected fault becomes a manifest record.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np

from common.fleet import Fleet
from producer.sampling import NEVER, Hits, sub_rng
from producer.simulation import Clock, Readings
from producer.wire_format import JsonFormat, WireFormat

MALFORMED_KINDS = ("broken_json", "wrong_type", "missing_field", "unknown_device", "oversized")
PER_READING_KINDS = ("duplicate", "late", "out_of_order", *MALFORMED_KINDS)

# A message: key, value, device index in the source's fleet, seq, event_id, tag.
# tag is None for the first send of a valid reading, "duplicate" for a resend, "raw"
# for a replayed line that is not a reading, or the fault record of a malformed payload.
Message = tuple[bytes, bytes, int, int, str, Any]


def parse_delay(spec: str) -> Callable[[random.Random], float]:
    """Parse a delay distribution spec into a sampler of seconds.

    Args:
        spec: ``fixed:S``, ``uniform:MIN:MAX``, ``exponential:MEAN`` or
            ``lognormal:MEDIAN:SIGMA`` (seconds; sigma of the log).

    Returns:
        A function drawing one delay (>= 0) from a generator.

    Raises:
        ValueError: The spec is malformed; the message shows the expected form.

    """
    kind, _, rest = spec.strip().partition(":")
    try:
        args = [float(x) for x in rest.split(":")] if rest else []
    except ValueError:
        args = []
        kind = "?"
    if kind == "fixed" and len(args) == 1 and args[0] >= 0:
        s = args[0]
        return lambda _rng: s
    if kind == "uniform" and len(args) == 2 and 0 <= args[0] <= args[1]:
        lo, hi = args
        return lambda rng: rng.uniform(lo, hi)
    if kind == "exponential" and len(args) == 1 and args[0] > 0:
        mean = args[0]
        return lambda rng: rng.expovariate(1.0 / mean)
    if kind == "lognormal" and len(args) == 2 and args[0] > 0 and args[1] >= 0:
        mu, sigma = math.log(args[0]), args[1]
        return lambda rng: rng.lognormvariate(mu, sigma)
    raise ValueError(
        f"bad delay distribution {spec!r}: use fixed:SECONDS, uniform:MIN:MAX, "
        "exponential:MEAN or lognormal:MEDIAN:SIGMA (seconds, all >= 0)"
    )


@dataclass(frozen=True)
class FaultConfig:
    """Which faults to inject and how often (rates are shares of readings).

    Attributes:
        duplicate: Readings sent twice.
        late: Readings held back by a delay drawn from ``late_delay``.
        out_of_order: Readings overtaken by later readings of the same device.
        broken_json: Readings sent as cut-short JSON.
        wrong_type: Readings with one field of the wrong type.
        missing_field: Readings without one required field.
        unknown_device: Readings from a device id outside the fleet.
        oversized: Readings padded past ``oversized_bytes``.
        clock_skew: Share of devices whose clock is off.
        late_delay: Delay distribution of late readings (see ``parse_delay``).
        late_delay_max_s: Cap on a late reading's delay.
        duplicate_max_gap: A resend follows within this many readings.
        out_of_order_max: At most this many same-device readings overtake one.
        clock_skew_max_s: Largest clock offset, either way.
        oversized_bytes: Size of an oversized payload.

    """

    duplicate: float = 0.0
    late: float = 0.0
    out_of_order: float = 0.0
    broken_json: float = 0.0
    wrong_type: float = 0.0
    missing_field: float = 0.0
    unknown_device: float = 0.0
    oversized: float = 0.0
    clock_skew: float = 0.0
    late_delay: str = "exponential:60"
    late_delay_max_s: float = 3600.0
    duplicate_max_gap: int = 50
    out_of_order_max: int = 3
    clock_skew_max_s: float = 120.0
    oversized_bytes: int = 1_100_000

    @property
    def active(self) -> bool:
        """True if any fault has a non-zero rate."""
        return any(getattr(self, k) for k in (*PER_READING_KINDS, "clock_skew"))


class FaultInjector:
    """Turns readings into messages, injecting faults on the way.

    Attributes:
        records: Fault records for the manifest (clock skews first, then in stream order).
        clock_skew_s: Device id -> clock offset in seconds, for the skewed devices.

    """

    def __init__(
        self,
        fleet: Fleet,
        seed: int,
        config: FaultConfig,
        clock: Clock,
        wire: WireFormat | None = None,
    ) -> None:
        """Prepare the seeded draws.

        Args:
            fleet: The simulator's devices, in the simulator's order.
            seed: The run's seed (each fault kind derives its own generator).
            config: Rates and shapes.
            clock: The simulator's clock (late readings are released by its time).
            wire: The payloads' format, which makes the malformed ones (default: JSON).

        """
        if config.duplicate_max_gap < 1 or config.out_of_order_max < 1:
            raise ValueError("duplicate_max_gap and out_of_order_max must be at least 1")
        self.fleet = fleet
        self.config = config
        self.clock = clock
        self.wire: WireFormat = wire or JsonFormat()
        self._n = len(self.fleet)
        self._delay = parse_delay(config.late_delay)
        self._hits = [
            (kind, Hits(getattr(config, kind), sub_rng(seed, f"fault:{kind}")))
            for kind in PER_READING_KINDS
        ]
        self._detail = sub_rng(seed, "fault:detail")
        self._next_hit = min(h.next for _, h in self._hits)
        self.records: list[dict[str, Any]] = []
        self.clock_skew_s: dict[str, float] = {}
        self._skew_us: dict[int, int] = {}
        skew_rng = sub_rng(seed, "fault:clock_skew")
        n_skewed = round(config.clock_skew * self._n)
        skewed = sorted(skew_rng.sample(range(self._n), n_skewed))
        for i, device in zip(
            skewed, self.fleet.device_ids(np.array(skewed, dtype=np.int64)), strict=True
        ):
            seconds = round(skew_rng.uniform(0.5, 1.0) * config.clock_skew_max_s, 3)
            seconds = seconds if skew_rng.random() < 0.5 else -seconds
            self._skew_us[i] = round(seconds * 1_000_000)
            self.clock_skew_s[device] = seconds
            self.records.append({"kind": "clock_skew", "device_id": device, "skew_s": seconds})
        self._skew_off: np.ndarray | None = None
        if self._skew_us:
            self._skew_off = np.zeros(self._n, dtype=np.int64)
            for i, offset in self._skew_us.items():
                self._skew_off[i] = offset
        self._emitted = 0  # readings seen (the index the per-reading rates apply to)
        self._held: list[tuple[int, int, Message, dict[str, Any] | None]] = []
        self._held_by_time: list[tuple[int, int, Message, dict[str, Any] | None]] = []
        self._order = 0
        self._last_k = -1

    @property
    def held(self) -> int:
        """Messages held back (late, out of order, resends) not yet released."""
        return len(self._held) + len(self._held_by_time)

    def skew(self, r: Readings) -> None:
        """Shift the event times of the skewed devices' readings, in place."""
        if self._skew_off is not None:
            r.us += self._skew_off[r.dev]

    def process(self, r: Readings, payloads: list[bytes]) -> list[Message]:
        """Turn one batch of readings into the messages to send now.

        Args:
            r: Readings (after ``skew`` and anomalies), in stream order.
            payloads: Their payloads (``self.wire``'s encoding of ``EventBuilder.events``).

        Returns:
            Messages in send order, including held-back ones that are now due.

        """
        n = len(r)
        if n == 0:
            return []
        devs, ks = r.dev.tolist(), r.k.tolist()
        keys = [i.encode() for i in self.fleet.device_ids(r.dev)]
        seqs, ids = r.seq.tolist(), r.event_id
        msgs = list(zip(keys, payloads, devs, seqs, ids, repeat(None, n), strict=True))
        out: list[Message] = []
        held = self._held
        e0 = self._emitted
        pos = 0
        while pos < n:
            # Plain readings up to the next fault hit or the next release point.
            rel_pos = bisect.bisect_left(ks, held[0][0], pos) if held else n
            end = min(n, self._next_hit - e0, rel_pos)
            if end > pos:
                out += msgs[pos:end]
                pos = end
                if pos >= n:
                    break
            # One reading that is hit by a fault, or after which held messages are due.
            k = ks[pos]
            if e0 + pos == self._next_hit:
                self._faulty(msgs[pos], k, e0 + pos, out)
            else:
                out.append(msgs[pos])
            if held and k >= held[0][0]:
                self._release(k, out)
            pos += 1
        self._emitted = e0 + n
        self._last_k = ks[-1]
        if self._held_by_time:
            self._release_by_time(self.clock.micros(self._last_k), out)
        return out

    def _faulty(self, msg: Message, k: int, e: int, out: list[Message]) -> None:
        """A reading hit by one or more per-reading faults."""
        kinds = []
        for kind, hits in self._hits:
            if hits.next == e:
                hits.advance()
                kinds.append(kind)
        self._next_hit = min(h.next for _, h in self._hits)
        i, seq, eid = msg[2], msg[3], msg[4]
        ev = self.wire.decode(msg[1])
        malformed = next((kd for kd in kinds if kd in MALFORMED_KINDS), None)
        if malformed is not None:
            out.append(self._malformed(malformed, ev, i))
            return
        base = {"device_id": ev["device_id"], "event_id": eid, "seq": seq}
        release_k = k
        due_us = 0
        if "late" in kinds:
            delay = min(self._delay(self._detail), self.config.late_delay_max_s)
            event_us = self.clock.micros(k)
            due_us = event_us + round(delay * 1_000_000)
            rec = {"kind": "late", **base, "event_time": ev["event_time"],
                   "delay_s": round(delay, 6)}  # fmt: skip
            self.records.append(rec)
            rec["_event_us"] = event_us
            due_k = self.clock.index_at(due_us)
            if due_k is None:
                self._order += 1
                heapq.heappush(self._held_by_time, (due_us, self._order, msg, rec))
                release_k = NEVER
            else:
                release_k = max(due_k, k)
                self._hold(release_k, msg, rec)
        elif "out_of_order" in kinds:
            m = self._detail.randint(1, self.config.out_of_order_max)
            rec = {"kind": "out_of_order", **base, "event_time": ev["event_time"],
                   "overtaken_by": m}  # fmt: skip
            self.records.append(rec)
            release_k = k + m * self._n
            self._hold(release_k, msg, rec)
        else:
            out.append(msg)
        if "duplicate" in kinds:
            gap = self._detail.randint(1, self.config.duplicate_max_gap)
            dup = {"kind": "duplicate", **base, "gap": gap}
            self.records.append(dup)
            resend: Message = (msg[0], msg[1], i, seq, eid, "duplicate")
            if release_k == NEVER:  # late by wall-clock time: resend right after it
                self._order += 1
                heapq.heappush(self._held_by_time, (due_us, self._order, resend, dup))
            else:
                self._hold(release_k + gap, resend, dup)

    def _hold(self, release_k: int, msg: Message, rec: dict[str, Any] | None) -> None:
        self._order += 1
        heapq.heappush(self._held, (release_k, self._order, msg, rec))

    def _release(self, k: int, out: list[Message]) -> None:
        held = self._held
        while held and held[0][0] <= k:
            _, _, msg, rec = heapq.heappop(held)
            if rec is not None:
                self._sent_late(rec, self.clock.micros(k))
            out.append(msg)

    def _release_by_time(self, now_us: int, out: list[Message]) -> None:
        held = self._held_by_time
        while held and held[0][0] <= now_us:
            _, _, msg, rec = heapq.heappop(held)
            if rec is not None:
                self._sent_late(rec, now_us)
            out.append(msg)

    @staticmethod
    def _sent_late(rec: dict[str, Any], now_us: int) -> None:
        if "_event_us" in rec:
            rec["sent_after_s"] = round((now_us - rec.pop("_event_us")) / 1_000_000, 6)

    def drain(self) -> list[Message]:
        """Release every held-back message, in due order (the stream is ending)."""
        out: list[Message] = []
        now_us = self.clock.micros(max(self._last_k, 0))
        while self._held:
            _, _, msg, rec = heapq.heappop(self._held)
            if rec is not None:
                self._sent_late(rec, now_us)
                rec["cut_short"] = True
            out.append(msg)
        while self._held_by_time:
            _, _, msg, rec = heapq.heappop(self._held_by_time)
            if rec is not None:
                self._sent_late(rec, now_us)
                rec["cut_short"] = True
            out.append(msg)
        return out

    def _malformed(self, kind: str, ev: dict[str, Any], i: int) -> Message:
        rng = self._detail
        key = self.fleet[i].device_id.encode()
        rec: dict[str, Any] = {
            "kind": kind,
            "device_id": ev["device_id"],
            "event_id": ev["event_id"],
            "seq": ev["seq"],
            "event_time": ev["event_time"],
        }
        if kind == "unknown_device":
            unknown = f"dev-unregistered-{rng.randrange(100000):05d}"
            ev = ev | {"device_id": unknown}
            key = unknown.encode()
            rec["sent_device_id"] = unknown
        payload, said = self.wire.malformed(kind, ev, rng, self.config.oversized_bytes)
        rec |= said
        rec["bytes"] = len(payload)
        self.records.append(rec)
        return (key, payload, i, ev["seq"], ev["event_id"], rec)
