"""librdkafka without a Python object per message: the Kafka sink's transport.

``KafkaSink`` calls librdkafka (the copy confluent-kafka ships) through ctypes, one
``rd_kafka_produce_batch`` per batch, with each message pointing into the batch's
encoded buffer (no copy), and counts delivery reports in a compiled callback
(``_on_delivery``, a numba ``cfunc``) that writes into one shared array
(``Shared``): acknowledged messages, a latency sample every N, and each failure's
(batch slot, message, error). Python looks at that array after each poll.

A batch's buffers stay referenced (``KafkaSink._inflight``) until every one of its
messages has a delivery report, since librdkafka reads the payloads in place.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
from typing import Any, Final

import numpy as np
from numba import carray, cfunc, types

# rd_kafka_message_t: err@0 (int32), rkt@8, partition@16 (int32), payload@24, len@32,
# key@40, key_len@48, offset@56, _private@64; 72 bytes, nine 64-bit words.
MSG_WORDS: Final = 9
PAYLOAD, LEN, KEY, KEY_LEN, PRIVATE = 3, 4, 5, 6, 8
PARTITION_UA: Final = -1
QUEUE_FULL: Final = -184  # RD_KAFKA_RESP_ERR__QUEUE_FULL
PURGE_QUEUE, PURGE_INFLIGHT = 0x1, 0x2

# The shared array: a header, then pending counts per batch slot, failures, samples.
ACKED, N_FAILED, N_SAMPLES, SAMPLE_EVERY, SEEN, FAIL_CAP, SAMPLE_CAP, SLOTS = range(8)
FAIL_AT, SAMPLE_AT = 8, 9
HEADER: Final = 16

_latency_us = types.ExternalFunction(
    "rd_kafka_message_latency", types.int64(types.CPointer(types.int64))
)


_DR_SIGNATURE = types.void(types.voidptr, types.CPointer(types.int64), types.CPointer(types.int64))


def _on_delivery(_rk: Any, msg: Any, opaque: Any) -> None:
    """Librdkafka's ``dr_msg_cb``: runs inside ``rd_kafka_poll``/``flush``, in our thread."""
    head = carray(opaque, HEADER)
    st = carray(opaque, HEADER + head[SLOTS] + 3 * head[FAIL_CAP] + head[SAMPLE_CAP])
    words = carray(msg, MSG_WORDS)
    err = np.int32(words[0] & 0xFFFFFFFF)
    private = words[PRIVATE]
    slot = private >> 32
    st[HEADER + slot] -= 1
    if err == 0:
        st[ACKED] += 1
        st[SEEN] += 1
        if st[SEEN] >= st[SAMPLE_EVERY]:
            st[SEEN] = 0
            latency = _latency_us(msg)
            if latency >= 0 and st[N_SAMPLES] < st[SAMPLE_CAP]:
                st[st[SAMPLE_AT] + st[N_SAMPLES]] = latency
                st[N_SAMPLES] += 1
    else:
        k = st[N_FAILED]
        if k < st[FAIL_CAP]:
            at = st[FAIL_AT] + 3 * k
            st[at] = slot
            st[at + 1] = private & 0xFFFFFFFF
            st[at + 2] = err
        st[N_FAILED] = k + 1


def library_path() -> str:
    """The librdkafka shared library: confluent-kafka's own copy, else the system's.

    Raises:
        RuntimeError: No librdkafka was found.

    """
    try:
        import confluent_kafka

        base = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
        found = sorted(glob.glob(os.path.join(base, "confluent_kafka.libs", "librdkafka*.so*")))
        if found:
            return found[0]
    except ImportError:
        pass
    name = ctypes.util.find_library("rdkafka")
    if name is None:
        raise RuntimeError("librdkafka was not found: pip install confluent-kafka")
    return name


@functools.cache
def lib() -> ctypes.CDLL:
    """librdkafka, loaded once per process, with the signatures this module calls."""
    import llvmlite.binding as llvm

    path = library_path()
    llvm.load_library_permanently(path)  # the compiled callback calls it by name
    so = ctypes.CDLL(path)
    p, i, sz, c = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
    sigs: dict[str, tuple[Any, list[Any]]] = {
        "rd_kafka_conf_new": (p, []),
        "rd_kafka_conf_destroy": (None, [p]),
        "rd_kafka_conf_set": (i, [p, c, c, c, sz]),
        "rd_kafka_conf_set_dr_msg_cb": (None, [p, p]),
        "rd_kafka_conf_set_throttle_cb": (None, [p, p]),
        "rd_kafka_conf_set_stats_cb": (None, [p, p]),
        "rd_kafka_conf_set_oauthbearer_token_refresh_cb": (None, [p, p]),
        "rd_kafka_conf_set_opaque": (None, [p, p]),
        "rd_kafka_new": (p, [i, p, c, sz]),
        "rd_kafka_destroy": (None, [p]),
        "rd_kafka_topic_new": (p, [p, c, p]),
        "rd_kafka_topic_destroy": (None, [p]),
        "rd_kafka_produce_batch": (i, [p, ctypes.c_int32, i, p, i]),
        "rd_kafka_poll": (i, [p, i]),
        "rd_kafka_flush": (i, [p, i]),
        "rd_kafka_purge": (i, [p, i]),
        "rd_kafka_err2name": (c, [i]),
        "rd_kafka_err2str": (c, [i]),
        "rd_kafka_oauthbearer_set_token": (i, [p, c, ctypes.c_int64, c, p, sz, c, sz]),
        "rd_kafka_oauthbearer_set_token_failure": (i, [p, c]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(so, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return so


def err_name(code: int) -> str:
    """Librdkafka's name of an error code, e.g. ``MSG_SIZE_TOO_LARGE``."""
    return lib().rd_kafka_err2name(code).decode()


THROTTLE_CB = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int, ctypes.c_void_p
)
OAUTH_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
# stats_cb(rk, json, json_len, opaque); returning 0 lets librdkafka free the JSON.
STATS_CB = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p
)


class ConfigError(ValueError):
    """librdkafka refused a configuration property."""


def conf_value(value: Any) -> str:
    """A config value as librdkafka's text (``true``/``false`` for booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def conf_true(value: Any) -> bool:
    """Whether librdkafka reads a boolean config value as true (``true``, ``t`` or ``1``)."""
    return conf_value(value).lower() in ("true", "t", "1")


class Shared:
    """The array the delivery callback writes: header, pending per slot, failures, samples."""

    def __init__(self, slots: int, fail_cap: int, sample_cap: int, sample_every: int) -> None:
        self.slots = slots
        self.array = np.zeros(HEADER + slots + 3 * fail_cap + sample_cap, dtype=np.int64)
        a = self.array
        a[SLOTS], a[FAIL_CAP], a[SAMPLE_CAP] = slots, fail_cap, sample_cap
        a[SAMPLE_EVERY] = sample_every
        a[FAIL_AT] = HEADER + slots
        a[SAMPLE_AT] = HEADER + slots + 3 * fail_cap
        self.pending = a[HEADER : HEADER + slots]
        self.failures = a[a[FAIL_AT] : a[SAMPLE_AT]].reshape(fail_cap, 3)
        self.samples = a[a[SAMPLE_AT] :]

    @property
    def address(self) -> int:
        """Where the array is (the callback's ``opaque``)."""
        return self.array.ctypes.data

    @property
    def acked(self) -> int:
        """Messages acknowledged so far."""
        return int(self.array[ACKED])

    def take_failures(self) -> tuple[np.ndarray, int]:
        """The failures reported since the last call.

        Returns:
            ``(slot, message, error)`` rows, and how many more failures there were than
            the record holds (their messages are unknown).

        """
        a = self.array
        n = int(a[N_FAILED])
        a[N_FAILED] = 0
        kept = min(n, len(self.failures))
        return self.failures[:kept].copy(), n - kept

    def take_samples(self) -> np.ndarray:
        """Latency samples (µs) since the last call."""
        a = self.array
        n = int(a[N_SAMPLES])
        a[N_SAMPLES] = 0
        return self.samples[:n].copy()


@functools.cache
def _callback() -> Any:
    lib()  # librdkafka's symbols must be loaded before the callback is compiled or loaded
    return cfunc(_DR_SIGNATURE, cache=True)(_on_delivery)


def callback_address() -> int:
    """Address of the compiled delivery-report callback (compiled once, kept for good)."""
    return _callback().address
