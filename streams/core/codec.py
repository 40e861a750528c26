"""The batch codec: a batch container's bytes on a queue, and the pieces its decoder shares.

A container is one msgpack array ``[MAGIC, kind, namespace, key, arrival time, values, event
times]``. Producers encode it once per batch (:func:`encode_batch`); a receiver reads only its
header and checks the rest (``BatchContainer.decode``), so routing a batch costs no per-event
work. Decoded stream ids are interned, so that tables keyed by them hash and compare by
identity.

>>> from streams.core.ids import StreamId
>>> payload = encode_batch(StreamId("sensors", "s-1"), 0, 1.5, [{"temp": 21.5}])
>>> msgpack.unpackb(payload)[:5]
['hr1', 0, 'sensors', 's-1', 1.5]
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

import msgpack
import msgspec

from streams.core.errors import DecodeError, EncodeError, EventTooLargeError
from streams.core.ids import StreamId

MAGIC = "hr1"


def _unencodable(value: Any, path: str = "value") -> str:
    """Name the first part of ``value`` msgpack cannot encode, for the error message."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, (str, int, bytes, float, bool)) and k is not None:
                return f"{path} key of type {type(k).__name__!r}"
            found = _unencodable(v, f"{path}[{k!r}]")
            if found:
                return found
        return ""
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _unencodable(v, f"{path}[{i}]")
            if found:
                return found
        return ""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return f"{path}, an int outside msgpack's 64-bit range,"
    if value is None or isinstance(value, (str, int, float, bool, bytes)):
        return ""
    return f"{path} of type {type(value).__name__!r}"


# namespace -> key -> its stream id: keyed by the key string the id holds already, where a
# (namespace, key) tuple per stream was one more object per stream id.
_STREAM_IDS: dict[str, dict[str, StreamId]] = {}
_MAX_INTERNED = 100_000  # ids a namespace's table holds before it is swept (and namespaces)
_LIMITS: dict[str, int] = {}  # a namespace whose held ids outgrew _MAX_INTERNED: its own limit


def _only_the_table() -> int:
    """What ``sys.getrefcount`` gives, in :func:`_sweep`'s loop, for an id only its table
    holds (the table, the loop's name, the call's argument: measured, not assumed)."""
    table = {"": StreamId("probe", "")}
    return [sys.getrefcount(sid) for sid in table.values()][0]  # as _sweep's loop counts


_ONLY_THE_TABLE = _only_the_table()


def stream_id_of(namespace: str, key: str) -> StreamId:
    """Decoded stream ids are interned: a busy queue repeats the same few thousand.

    >>> stream_id_of("ns", "k") is stream_id_of("ns", "k"), stream_id_of("ns", "k")
    (True, StreamId('ns', 'k'))
    """
    ids = _STREAM_IDS.get(namespace)
    if ids is None:
        if len(_STREAM_IDS) >= _MAX_INTERNED:
            _STREAM_IDS.clear()
            _LIMITS.clear()
        ids = _STREAM_IDS[namespace] = {}
    sid = ids.get(key)
    if sid is None:
        if len(ids) >= _LIMITS.get(namespace, _MAX_INTERNED):
            _sweep(namespace, ids)
        # The namespace string interned: a decoded one is a copy per record, and each id kept
        # its own (one string per stream, where a namespace has thousands of streams).
        sid = StreamId(sys.intern(namespace) if type(namespace) is str else namespace, key)
        ids[sid.key] = sid
    return sid


def _sweep(namespace: str, ids: dict[str, StreamId]) -> None:
    """Let go of the ids of a full table that nothing else holds. Those something holds (an
    activation, a cache's table) stay: a worker with more streams than the limit in a
    namespace would otherwise decode ids equal to, but not the same object as, the ones its
    tables are keyed by, and every lookup would go through ``StreamId.__eq__``. Where most
    are held, the namespace's limit grows to twice what is held, so a sweep stays rare."""
    held = [sid for sid in ids.values() if sys.getrefcount(sid) > _ONLY_THE_TABLE]
    ids.clear()
    ids.update((sid.key, sid) for sid in held)
    if len(held) > _MAX_INTERNED // 2:
        _LIMITS[namespace] = 2 * len(held)
    else:
        _LIMITS.pop(namespace, None)


def interned(stream_id: StreamId) -> StreamId:
    """The stream id object that decoding gives for ``stream_id``. A dict lookup by the very
    key object it holds skips StreamId's equality method (a Python call): caches and agents
    key their tables by these."""
    return stream_id_of(stream_id.namespace, stream_id.key)


# Payloads up to this size are decoded in one call (see BatchContainer.decode). Measured
# here: whole beats header-only up to about 300 bytes (100 ints, 127 B: 1.2 against 1.9 µs),
# and loses beyond, where building the values costs more (100 small dicts, 1.5 KB: 9.0
# against 2.6 µs).
EAGER_DECODE_LIMIT = 256

ARRAY_HEADERS = {0xDC: 2, 0xDD: 4}  # msgpack array16 and array32: bytes of the length
NIL = 0xC0


def array_length(payload: bytes, at: int) -> int:
    """The element count of the msgpack array starting at ``payload[at]``."""
    first = payload[at]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F
    size = ARRAY_HEADERS.get(first)
    if size is None:
        raise DecodeError("malformed batch container: values are not a list")
    return int.from_bytes(payload[at + 1 : at + 1 + size], "big")


def as_ext_type(code: int, data: memoryview) -> msgpack.ExtType:
    return msgpack.ExtType(code, bytes(data))


# msgspec reads a container in about half of msgpack's time; an extension type comes back
# as msgpack's ExtType, as msgpack.unpackb gives it.
_msgspec_unpack = msgspec.msgpack.Decoder(ext_hook=as_ext_type).decode


def unpack(payload: bytes) -> Any:
    """One msgpack object, as ``msgpack.unpackb(payload, raw=False, strict_map_key=False)``
    reads it; what msgspec refuses, msgpack reads (or names what is wrong with it). (A
    timestamp extension comes back as a ``datetime``, not msgpack's ``Timestamp``.)

    >>> unpack(msgpack.packb([1, {"t": 2.5}, {3: b"x"}], use_bin_type=True))
    [1, {'t': 2.5}, {3: b'x'}]
    """
    try:
        return _msgspec_unpack(payload)
    except msgspec.MsgspecError:
        return msgpack.unpackb(payload, raw=False, strict_map_key=False, use_list=True)


_PACKERS = threading.local()


def pack(value: Any) -> bytes:
    """``msgpack.packb(value, use_bin_type=True)``, by this thread's packer, made once:
    ``packb`` makes a packer a call, more than half of its time for a small value (an
    event's container, a durable state). A value it cannot pack raises as ``packb`` does,
    and the packer is left empty.

    >>> pack([1, "a", b"b"]) == msgpack.packb([1, "a", b"b"], use_bin_type=True)
    True
    """
    packer = getattr(_PACKERS, "packer", None)
    if packer is None:
        packer = _PACKERS.packer = msgpack.Packer(use_bin_type=True)
    data: bytes = packer.pack(value)
    return data


def encode_batches(
    stream_id: StreamId,
    kind: int,
    arrival_time: float,
    values: Sequence[Any],
    event_times: Sequence[float | None] | None,
    max_size: int,
) -> list[bytes]:
    """The batch containers of these events, each at most ``max_size`` bytes: one, unless the
    events do not fit in one, when they are split in halves (only containers over the limit pay
    for it). Raises :class:`~streams.core.errors.EventTooLargeError` for an event that alone
    is over it, and nothing is encoded.

    >>> sid = StreamId("s", "k")
    >>> [len(b) <= 100 for b in encode_batches(sid, 0, 0.0, ["x" * 40] * 4, None, 100)]
    [True, True, True, True]
    >>> encode_batches(sid, 0, 0.0, ["x" * 200], None, 100)
    Traceback (most recent call last):
    ...
    streams.core.errors.EventTooLargeError: an event for stream s/k is 223 bytes encoded, over max_event_size (100 bytes); nothing was enqueued
    """
    payload = encode_batch(stream_id, kind, arrival_time, values, event_times)
    if len(payload) <= max_size:
        return [payload]
    if len(values) <= 1:
        raise EventTooLargeError(
            f"an event for stream {stream_id} is {len(payload):,} bytes encoded, over max_event_size "
            f"({max_size:,} bytes); nothing was enqueued"
        )
    half = len(values) // 2
    times = (None, None) if event_times is None else (event_times[:half], event_times[half:])
    return [
        *encode_batches(stream_id, kind, arrival_time, values[:half], times[0], max_size),
        *encode_batches(stream_id, kind, arrival_time, values[half:], times[1], max_size),
    ]


def encode_batch(
    stream_id: StreamId,
    kind: int,
    arrival_time: float,
    values: Sequence[Any],
    event_times: Sequence[float | None] | None = None,
) -> bytes:
    """The bytes of a batch container with these parts (what ``BatchContainer(...).encode()``
    gives, without making the container: producers call this once per batch)."""
    if type(values) is not list:
        values = list(values)
    if event_times is not None and type(event_times) is not list:
        event_times = list(event_times)
    try:
        packed = pack([MAGIC, int(kind), stream_id.namespace, stream_id.key, arrival_time, values, event_times])
    except (TypeError, ValueError, OverflowError) as exc:
        where = _unencodable(values) or str(exc)
        raise EncodeError(
            f"cannot encode {where} for stream {stream_id}: values must be "
            "msgpack types (None, bool, int, float, str, bytes, list, dict); "
            "nothing was enqueued"
        ) from None
    return packed
