"""Compiled inner loops of the simulator: readings and their JSON, one reading at a time.

``producer.signals.make_reading`` defines an event; these numba kernels do the same
arithmetic, with the same random draws in the same order, at machine speed:

* ``simulate`` advances every device's state by one reading per event, drawing from a
  Mersenne Twister (``Twister``) that continues CPython's ``random.Random`` word for
  word, and writes the readings as columns (``producer.readings.Readings``);
* ``encode`` writes the JSON text of a batch of readings into one byte buffer (the
  bytes ``orjson.dumps`` gives for the reading's dict) and says where each one ends,
  copying the fixed fragments 8 bytes at a time (``_copy8``).

``log``, ``sqrt``, ``sin`` and ``cos`` compile to the C library's, which CPython's
``math`` also calls, so the doubles are the same; rounding to 3 places is exact
(``round3``). Whatever a kernel cannot do exactly (a non-finite or huge value, a
year outside 1000..9999) is flagged and done in Python by the caller.
"""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np
from llvmlite import ir
from numba import njit, objmode, types
from numba.extending import intrinsic

_N: Final = 624
_M: Final = 397
_NEAR_HALF: Final = 0.4999
_TWO_PI: Final = 2.0 * math.pi
_DAY_S: Final = 86400.0
_ONLINE, _DEGRADED, _OFFLINE = 0, 1, 2
_INT_DIGITS: Final = 7  # a metric of 10 million or more is left to the caller (orjson)
WORD_SLACK: Final = 8  # bytes past its end that ``_put`` may read or write in an array
_HEX: Final = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


class Twister:
    """A Mersenne Twister state the kernels draw from: 624 words and a position.

    Attributes:
        state: The 624 32-bit words (CPython's ``random.getstate()[1][:624]``).
        pos: ``[index of the next word, gauss_next or NaN for None]`` as float64.

    """

    def __init__(self, internal: tuple[int, ...], gauss_next: float | None) -> None:
        """Continue ``random.Random``'s state (``getstate()[1]`` and its ``gauss_next``)."""
        self.state = np.array(internal[:_N], dtype=np.uint32)
        self.pos = np.array([float(internal[_N]), np.nan if gauss_next is None else gauss_next])


@njit(cache=True, inline="always")
def _word(mt: np.ndarray, pos: np.ndarray) -> np.uint32:
    """The next 32-bit output (CPython's ``genrand_uint32``)."""
    i = int(pos[0])
    if i >= _N:
        for kk in range(_N):
            y = (mt[kk] & np.uint32(0x80000000)) | (mt[(kk + 1) % _N] & np.uint32(0x7FFFFFFF))
            v = mt[(kk + _M) % _N] ^ (y >> np.uint32(1))
            if y & np.uint32(1):
                v ^= np.uint32(0x9908B0DF)
            mt[kk] = v
        i = 0
    y = mt[i]
    pos[0] = i + 1
    y ^= y >> np.uint32(11)
    y ^= (y << np.uint32(7)) & np.uint32(0x9D2C5680)
    y ^= (y << np.uint32(15)) & np.uint32(0xEFC60000)
    y ^= y >> np.uint32(18)
    return y


@njit(cache=True, inline="always")
def _random(mt: np.ndarray, pos: np.ndarray) -> float:
    """``random.random()``: 53 bits from two words."""
    a = _word(mt, pos) >> np.uint32(5)
    b = _word(mt, pos) >> np.uint32(6)
    return (float(a) * 67108864.0 + float(b)) * (1.0 / 9007199254740992.0)


@njit(cache=True, inline="always")
def _gauss(mt: np.ndarray, pos: np.ndarray) -> float:
    """``random.gauss(0.0, 1.0)``'s ``z`` (a pair per two calls, as CPython caches it)."""
    z = pos[1]
    pos[1] = np.nan
    if math.isnan(z):
        x2pi = _random(mt, pos) * _TWO_PI
        g2rad = math.sqrt(-2.0 * math.log(1.0 - _random(mt, pos)))
        z = math.cos(x2pi) * g2rad
        pos[1] = math.sin(x2pi) * g2rad
    return z


@njit(cache=True)
def round3(x: float) -> float:
    """``round(x, 3)``, exactly as CPython rounds (correctly, ties to even)."""
    a = abs(x)
    if not a < 1e12:  # huge (x * 1000 may round twice) or not finite: leave it to CPython
        with objmode(y="float64"):
            y = round(x, 3)
        return y
    t = x * 1000.0
    r = np.rint(t)
    if r != 0.0 and abs(t - r) < _NEAR_HALF:
        return r / 1000.0
    if a == 0.0:
        return x
    # |x| = mi * 2**-sh exactly; round mi * 1000 * 2**-sh to an integer, ties to even.
    m, e = math.frexp(a)
    mi = np.int64(m * 9007199254740992.0)
    sh = 53 - e
    big = mi * 1000
    if sh >= 64:  # sh >= 13: |x| < 1e12 < 2**40
        q = 0
    else:
        q = big >> sh
        rem = big - (q << sh)
        half = np.int64(1) << (sh - 1)
        if rem > half or (rem == half and q & 1):
            q += 1
    return math.copysign(q / 1000.0, x)


@njit(cache=True)
def simulate(
    n: int,
    k0: int,
    mt: np.ndarray,
    pos: np.ndarray,
    us: np.ndarray,
    battery_powered: np.ndarray,
    n_metrics: np.ndarray,
    baseline: np.ndarray,
    amplitude: np.ndarray,
    noise: np.ndarray,
    drift_noise: np.ndarray,
    clamp: np.ndarray,
    values_state: np.ndarray,
    drift_state: np.ndarray,
    battery_state: np.ndarray,
    seq_state: np.ndarray,
    status_state: np.ndarray,
    dev_out: np.ndarray,
    seq_out: np.ndarray,
    status_out: np.ndarray,
    eid_out: np.ndarray,
    battery_out: np.ndarray,
    values_out: np.ndarray,
) -> None:
    """Make readings ``k0 .. k0 + n - 1`` (``make_reading`` for device ``k % nd``).

    The ``*_state`` arrays (one row per device) are updated in place; the ``*_out``
    arrays get one row per reading. ``us`` holds the event times (epoch µs).
    """
    nd = len(seq_state)
    for p in range(n):
        i = (k0 + p) % nd
        dev_out[p] = i
        seq = seq_state[i] + 1
        seq_state[i] = seq
        seq_out[p] = seq
        phase = (us[p] / 1_000_000 % _DAY_S) / _DAY_S
        cycle = math.sin(_TWO_PI * (phase - 0.25))
        st = status_state[i]
        if st == _ONLINE:
            if _random(mt, pos) < 0.002:
                st = _DEGRADED
        elif st == _DEGRADED:
            if _random(mt, pos) < 0.05:
                st = _ONLINE
            elif _random(mt, pos) < 0.01:
                st = _OFFLINE
        elif _random(mt, pos) < 0.08:
            st = _ONLINE
        status_state[i] = st
        status_out[p] = st
        # getrandbits(128): four words, least significant first; then the UUID's version bits.
        w0 = _word(mt, pos)
        w1 = (_word(mt, pos) & np.uint32(0x3FFFFFFF)) | np.uint32(0x80000000)
        w2 = (_word(mt, pos) & np.uint32(0xFFFF0FFF)) | np.uint32(0x4000)
        w3 = _word(mt, pos)
        at = 0
        for w in (w3, w2, w1, w0):
            for s in range(28, -4, -4):
                if at == 8 or at == 13 or at == 18 or at == 23:
                    eid_out[p, at] = 45  # -
                    at += 1
                eid_out[p, at] = _HEX[(w >> np.uint32(s)) & np.uint32(15)]
                at += 1
        if battery_powered[i]:
            b = battery_state[i] - (0.0 + 0.002 * _random(mt, pos))
            b = b if b > 0.0 else 0.0
            battery_state[i] = b
            battery_out[p] = round3(b)
        else:
            battery_out[p] = 0.0
        for j in range(n_metrics[i]):
            dr = drift_state[i, j] + (0.0 + _gauss(mt, pos) * drift_noise[i, j])
            drift_state[i, j] = dr
            target = baseline[i, j] + amplitude[i, j] * cycle + dr
            v = values_state[i, j]
            v = v + (0.05 * (target - v) + (0.0 + _gauss(mt, pos) * noise[i, j]))
            values_state[i, j] = v
            if clamp[i, j] and v < 0.0:
                v = 0.0
            values_out[p, j] = round3(v)
        for j in range(n_metrics[i], values_out.shape[1]):
            values_out[p, j] = 0.0


@intrinsic
def _copy8(typingctx: Any, dst: Any, dst_at: Any, src: Any, src_at: Any) -> Any:
    """Copy 8 bytes ``src[src_at:src_at + 8]`` to ``dst[dst_at:]`` (no alignment needed)."""
    sig = types.void(dst, types.intp, src, types.intp)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> None:
        d = context.make_array(signature.args[0])(context, builder, args[0])
        s = context.make_array(signature.args[2])(context, builder, args[2])
        word = ir.IntType(64).as_pointer()
        value = builder.load(builder.bitcast(builder.gep(s.data, [args[3]]), word), align=1)
        builder.store(value, builder.bitcast(builder.gep(d.data, [args[1]]), word), align=1)

    return sig, codegen


@njit(cache=True, inline="always")
def _put(buf: np.ndarray, at: int, src: np.ndarray, a: int, b: int) -> int:
    """Copy ``src[a:b]`` to ``buf[at:]`` by 8-byte words; return the end in ``buf``.

    Up to 7 bytes past either end are read or written: both arrays need ``WORD_SLACK``
    bytes to spare, and what is written past the end is overwritten by what follows.
    """
    q = a
    while q < b:
        _copy8(buf, at + q - a, src, q)
        q += 8
    return at + b - a


@njit(cache=True, inline="always")
def _put_int(buf: np.ndarray, at: int, x: int, width: int) -> int:
    """Write non-negative ``x`` in decimal, zero-padded to ``width`` (0: no padding)."""
    digits = 1
    t = x
    while t >= 10:
        t //= 10
        digits += 1
    if digits < width:
        digits = width
    for q in range(digits - 1, -1, -1):
        buf[at + q] = 48 + x % 10
        x //= 10
    return at + digits


@njit(cache=True, inline="always")
def _put_float(buf: np.ndarray, at: int, v: float) -> int:
    """The text orjson writes for a value already rounded to 3 places (-1: out of reach)."""
    a = abs(v) * 1000.0
    if not a < 10.0 ** (_INT_DIGITS + 3) - 1.0:
        return -1
    r = np.int64(np.rint(a))
    if math.copysign(1.0, v) < 0.0:
        buf[at] = 45
        at += 1
    at = _put_int(buf, at, r // 1000, 0)
    buf[at] = 46
    fp = r % 1000
    buf[at + 1] = 48 + fp // 100
    at += 2
    rest = fp % 100
    if rest != 0:
        buf[at] = 48 + rest // 10
        at += 1
        if rest % 10 != 0:
            buf[at] = 48 + rest % 10
            at += 1
    return at


@njit(cache=True, inline="always")
def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day number since 1970-01-01 (proleptic Gregorian)."""
    z = days + 719468
    era = (z if z >= 0 else z - 146096) // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (1 if m <= 2 else 0), m, d


@njit(cache=True)
def encode(
    dev: np.ndarray,
    seq: np.ndarray,
    us: np.ndarray,
    status: np.ndarray,
    eid: np.ndarray,
    battery: np.ndarray,
    values: np.ndarray,
    battery_powered: np.ndarray,
    n_metrics: np.ndarray,
    text: np.ndarray,
    dev_at: np.ndarray,
    key_at: np.ndarray,
    consts: np.ndarray,
    buf: np.ndarray,
    ends: np.ndarray,
    slow: np.ndarray,
) -> int:
    """Write each reading's JSON into ``buf``, each followed by a newline.

    Reading ``p`` spans ``buf[ends[p - 1] + 1 : ends[p]]`` (from 0 for the first).

    ``text`` holds every fragment; ``dev_at[i]`` spans device ``i``'s
    ``","device_id":"…","seq":``, ``key_at[i, j]`` its metric ``j``'s ``,"name":``, and
    ``consts`` the fixed pieces (see ``producer.readings.FleetLayout``): rows of
    ``(start, end)`` for the head, the time key, the status key, the battery key and
    the three status names. A reading the kernel cannot write exactly is flagged in
    ``slow`` and written as nothing (its line is empty). Returns the bytes written.
    """
    at = 0
    prefix = np.zeros(32, dtype=np.uint8)
    prefix_len = 0
    last_sec = np.int64(-(2**62))
    year_ok = False
    for p in range(len(dev)):
        start = at
        i = dev[p]
        at = _put(buf, at, text, consts[0, 0], consts[0, 1])
        for q in range(36):
            buf[at + q] = eid[p, q]
        at += 36
        at = _put(buf, at, text, dev_at[i, 0], dev_at[i, 1])
        at = _put_int(buf, at, seq[p], 0)
        at = _put(buf, at, text, consts[1, 0], consts[1, 1])
        sec = us[p] // 1_000_000
        if sec != last_sec:  # neighbouring readings share the second: write it once
            last_sec = sec
            days = sec // 86400
            tod = sec - days * 86400
            y, mo, d = _civil(days)
            year_ok = 1000 <= y <= 9999
            q = _put_int(prefix, 0, y, 4)
            prefix[q] = 45
            q = _put_int(prefix, q + 1, mo, 2)
            prefix[q] = 45
            q = _put_int(prefix, q + 1, d, 2)
            prefix[q] = 84  # T
            q = _put_int(prefix, q + 1, tod // 3600, 2)
            prefix[q] = 58
            q = _put_int(prefix, q + 1, tod // 60 % 60, 2)
            prefix[q] = 58
            q = _put_int(prefix, q + 1, tod % 60, 2)
            prefix[q] = 46
            prefix_len = q + 1
        ok = year_ok
        at = _put(buf, at, prefix, 0, prefix_len)
        at = _put_int(buf, at, us[p] % 1_000_000 // 1000, 3)
        at = _put(buf, at, text, consts[2, 0], consts[2, 1])
        s = status[p]
        at = _put(buf, at, text, consts[4 + s, 0], consts[4 + s, 1])
        if battery_powered[i]:
            at = _put(buf, at, text, consts[3, 0], consts[3, 1])
            at = _put_float(buf, at, battery[p])
            ok = ok and at >= 0
        for j in range(n_metrics[i]):
            if not ok:
                break
            at = _put(buf, at, text, key_at[i, j, 0], key_at[i, j, 1])
            at = _put_float(buf, at, values[p, j])
            ok = at >= 0
        if ok:
            buf[at] = 125  # }
            at += 1
        else:
            slow[p] = True
            at = start
        ends[p] = at
        buf[at] = 10  # JSON text never holds a raw newline
        at += 1
    return at


@njit(cache=True)
def skew(us: np.ndarray, dev: np.ndarray, skewed: np.ndarray, offset: np.ndarray) -> None:
    """Shift the event times of skewed devices' readings by their clock's offset (µs).

    The time is cut to whole milliseconds first, as its text would be read back.
    """
    for p in range(len(us)):
        i = dev[p]
        if skewed[i]:
            us[p] = us[p] - us[p] % 1000 + offset[i]
