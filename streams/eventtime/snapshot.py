"""An event-time processor's state as bytes, and back: what lets a checkpoint pass open windows.

A processor of one input (with or without substreams) is serialized with msgpack: its
input's clock, watermark and idle bookkeeping, the merged watermark, every window store
(open panes with each key's accumulator and first token, the scheduled windows; or the open
sessions with theirs, and each key's last emitted session while it matters), the
substream lanes and the counters. A ``Count`` pane keeps a number, a ``Collect`` pane its
values: the state is proportional to what is open.

What cannot be encoded raises :class:`SnapshotError`; the runtime then keeps that
activation's windows holding the queue's checkpoint, as without snapshots. A processor of
several merged inputs is not snapshotted (:func:`can_snapshot`).

>>> from types import SimpleNamespace as Ev
>>> from streams.eventtime import OrderingPolicy, Processor, Tumbling
>>> p = Processor(OrderingPolicy(), Tumbling(10), group_by="k")
>>> _ = p.on_events([Ev(value={"k": "a"}, event_time=1.0, arrival_time=1.0, token=None)])
>>> q = Processor(OrderingPolicy(), Tumbling(10), group_by="k")
>>> restore(q, snapshot(p))
>>> [(w.key, w.value) for w in q.on_events([Ev(value={"k": "a"}, event_time=12.0, arrival_time=2.0, token=None)]).windows]
[('a', 1)]
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import Any, Protocol

import msgpack

from streams.core.batch import Event
from streams.core.ids import SequenceToken, StreamId
from streams.core.record_batch import RecordEvent
from streams.core.state import OLD_TIMES, StateError
from streams.eventtime.aggregates import _Sequenced
from streams.eventtime.counted import CountStore
from streams.eventtime.flow import WatermarkFlow
from streams.eventtime.joins import JoinStore
from streams.eventtime.parts import Input, Store
from streams.eventtime.results import COUNTER_NAMES, EventOutcome
from streams.eventtime.sessions import SessionStore
from streams.eventtime.sliding import SlidingStore
from streams.eventtime.watermark import Watermark
from streams.eventtime.windows import WindowStore

__all__ = ["SnapshotError", "can_snapshot", "held_snapshot", "is_empty", "restore", "restore_held", "snapshot"]

FORMAT = 2  # 2: every time in integer microseconds (streams.core.micros); 1 had float seconds


class SnapshotError(StateError):
    """The processor's state cannot be serialized (an accumulator or key msgpack cannot encode)."""


class Snapshottable(Protocol):
    """A processor as its snapshot sees it: all its state is in its watermark flow."""

    @property
    def _flow(self) -> WatermarkFlow: ...


def can_snapshot(processor: Snapshottable) -> bool:
    """Whether this processor's kind of state is serializable at all: every kind is (one
    input or several, windows, sessions, a join, or none: its watermarks)."""
    return True


def is_empty(processor: Snapshottable) -> bool:
    """No open pane and no dedup key held: nothing a restart would need beyond the
    watermarks (which the next events regenerate as they would have)."""
    flow = processor._flow
    if flow.dedup is not None and flow.dedup.entries():
        return False
    return not any(store.has_data() for store in flow.stores())


def snapshot(processor: Snapshottable) -> bytes:
    """The processor's state, as bytes :func:`restore` reads back."""
    flow = processor._flow
    inp = flow.inputs[0]
    reducer = flow.shape.reducer
    seq = None
    if isinstance(reducer, _Sequenced):
        seq = next(reducer._seq)
        reducer._seq = itertools.count(seq)  # peeked, not consumed
    # One input has no merge of its own (its watermark is the merge's value): written as
    # the merge of one input was, so a saved state reads back either way.
    state = {
        "format": FORMAT,
        "input": _input(inp),
        "merged": [inp.mark.value, [inp.mark.value]],
        "store": None if flow.store is None else _store(flow.store),
        "lanes": [
            [key, _mark(mark), None if store is None else _store(store)] for key, (mark, store) in flow.lanes.items()
        ],
        "counters": [getattr(flow.counters, name) for name in COUNTER_NAMES],
        "seq": seq,
    }
    if flow.dedup is not None:  # the keys seen within the horizon: a retry after a restart is dropped
        state["dedup"] = flow.dedup.state()
    if flow.shape.multi:  # every input's clock and watermark, and their merge
        assert flow.merged is not None
        values = flow.merged.values()
        state["inputs"] = [[i.name, _input(i)] for i in flow.inputs]
        state["merged"] = [flow.merged.value, [values[i.name] for i in flow.inputs]]
    try:
        data: bytes = msgpack.packb(state, default=_default)
    except (TypeError, ValueError, OverflowError) as exc:
        raise SnapshotError(f"the window state cannot be serialized: {exc}") from exc
    return data


def restore(processor: Snapshottable, data: bytes) -> None:
    """Put the state :func:`snapshot` wrote into a new processor of the same declaration."""
    state = msgpack.unpackb(data, strict_map_key=False, ext_hook=_ext)
    if state.get("format") == 1:
        raise SnapshotError(OLD_TIMES)
    if state.get("format") != FORMAT:
        raise SnapshotError(f"unknown snapshot format {state.get('format')!r}")
    flow = processor._flow
    _restore_inputs(flow, state)
    if state["store"] is not None and flow.store is not None:
        _set_store(flow.store, state["store"])
    flow.lanes.clear()
    for key, mark_state, store_state in state["lanes"]:
        mark, store = flow.new_lane(flow.inputs[0], _hashable(key))
        _set_mark(mark, mark_state)
        if store is not None and store_state is not None:
            _set_store(store, store_state)
    counters = flow.counters
    # Counters added since (at the end) stay 0 in an older snapshot.
    for name, value in zip(COUNTER_NAMES, state["counters"], strict=False):
        setattr(counters, name, value)
    if flow.dedup is not None:
        flow.dedup.set_state(state.get("dedup", []), _hashable)
    if state["seq"] is not None and isinstance(flow.shape.reducer, _Sequenced):
        flow.shape.reducer._seq = itertools.count(state["seq"])


def _restore_inputs(flow: WatermarkFlow, state: dict[str, Any]) -> None:
    """The inputs' watermarks and clocks, and with several the merged watermark."""
    if "inputs" not in state:
        if flow.shape.multi:
            raise SnapshotError("the snapshot is of one input, this processor has several")
        _set_input(flow.inputs[0], state["input"])  # the one input's watermark is what "merged" repeats
        return
    if not flow.shape.multi or [name for name, _ in state["inputs"]] != [i.name for i in flow.inputs]:
        raise SnapshotError("the snapshot's inputs are not this processor's")
    for i, (_, input_state) in zip(flow.inputs, state["inputs"], strict=True):
        _set_input(i, input_state)
    merged = flow.merged
    assert merged is not None
    value, values = state["merged"]
    for i, mark_value in zip(flow.inputs, values, strict=True):
        merged._values[i.name] = mark_value
    merged.value = value
    merged.holder = min(merged._values, key=merged._values.__getitem__)


class Holding(Protocol):
    """What holds events for the watermark: a windowless handoff's :class:`TimestampOrder`,
    or the :class:`MergedRelease` of several inputs."""

    def state(self) -> list[Any]: ...

    def set_state(self, state: list[Any]) -> None: ...


def held_snapshot(order: Holding) -> bytes:
    """The events held for the watermark, as bytes :func:`restore_held` reads back."""
    try:
        data: bytes = msgpack.packb(order.state(), default=_default)
    except (TypeError, ValueError, OverflowError) as exc:
        raise SnapshotError(f"the held events cannot be serialized: {exc}") from exc
    return data


def restore_held(order: Holding, data: bytes) -> None:
    order.set_state(msgpack.unpackb(data, strict_map_key=False, ext_hook=_ext))


def _input(inp: Input) -> list[Any]:
    return [inp.clock, inp.idle_check, inp.completed, inp.floor_close, _mark(inp.mark)]


def _set_input(inp: Input, state: list[Any]) -> None:
    inp.clock, inp.idle_check, inp.completed, inp.floor_close, mark = state
    _set_mark(inp.mark, mark)


def _mark(mark: Watermark) -> list[Any]:
    return [mark.value, mark.max_timestamp, mark.last_ingest, mark._count, mark._mark]


def _set_mark(mark: Watermark, state: list[Any]) -> None:
    mark.value, mark.max_timestamp, mark.last_ingest, mark._count, mark._mark = state


def _store(store: Store) -> list[Any]:
    if isinstance(store, SessionStore):
        return ["sessions", *store.state()]
    if isinstance(store, JoinStore):
        return ["join", *store.state()]
    if isinstance(store, CountStore):
        return ["counted", *store.state()]
    if isinstance(store, SlidingStore):
        return ["sliding", *store.state()]
    assert isinstance(store, WindowStore)
    panes = [
        [pane, [[key, acc, token] for key, (acc, token) in bucket.items()]] for pane, bucket in store.panes.items()
    ]
    state = [panes, store.watermark, store.next_close, list(store._due or ()), store.order]
    if store.early is not None:  # the updates' revisions: a restart goes on from them
        state.append(store.early.state())
    return state


def _set_store(store: Store, state: list[Any]) -> None:
    kind = state[0] if state and isinstance(state[0], str) else "windows"
    mine = (
        "sessions"
        if isinstance(store, SessionStore)
        else "join"
        if isinstance(store, JoinStore)
        else "counted"
        if isinstance(store, CountStore)
        else "sliding"
        if isinstance(store, SlidingStore)
        else "windows"
    )
    if kind != mine:
        raise SnapshotError(f"the snapshot holds {kind}, this processor {mine}")
    if not isinstance(store, WindowStore):  # a store that writes its own state
        store.set_state(state[1:], _hashable)
        return
    assert isinstance(store, WindowStore)
    panes, store.watermark, store.next_close, due, store.order = state[:5]
    if store.early is not None and len(state) > 5:  # saved by a store that emits updates
        store.early.set_state(state[5], _hashable)
    store.panes = {pane: {_hashable(key): [acc, token] for key, acc, token in bucket} for pane, bucket in panes}
    if due:
        store._due = list(due)
        heapq.heapify(store._due)
        store._scheduled = dict.fromkeys(due) if store.assigner.per_window > 1 else None
    else:
        store._due = store._scheduled = None


_TOKEN = 1
_OUTCOME = 2  # an event held in a join: the event and what the policy made of it


def _default(value: Any) -> Any:
    if isinstance(value, SequenceToken):
        return msgpack.ExtType(_TOKEN, msgpack.packb([value.sequence_number, value.event_index]))
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, EventOutcome):
        return msgpack.ExtType(_OUTCOME, msgpack.packb(_outcome(value), default=_default))
    raise TypeError(f"cannot serialize {type(value).__name__}")


def _ext(code: int, data: bytes) -> Any:
    if code == _TOKEN:
        return SequenceToken(*msgpack.unpackb(data))
    if code == _OUTCOME:
        return _set_outcome(msgpack.unpackb(data, strict_map_key=False, ext_hook=_ext))
    return msgpack.ExtType(code, data)


def _outcome(outcome: EventOutcome) -> list[Any]:
    record = outcome.record
    if isinstance(record, RecordEvent):
        kept: list[Any] = [1, *_event(record), list(record.headers), record.offset, record._read_at]
    elif isinstance(record, Event):
        kept = [0, *_event(record)]
    else:
        raise TypeError(f"cannot serialize an event of {type(record).__name__}")
    return [kept, outcome.partition, outcome.key, outcome.event_time, outcome.timestamp, outcome.status, outcome.reason]


def _event(event: Event) -> list[Any]:
    sid = event.stream_id
    return [event.value, event.event_time, event.arrival_time, sid.namespace, sid.key, event._sequence, event._index]


def _set_outcome(state: list[Any]) -> EventOutcome:
    kept, partition, key, event_time, timestamp, status, reason = state
    kind, value, at, arrival, namespace, stream_key, sequence, index = kept[:8]
    sid = StreamId(namespace, stream_key)
    record: Event
    if kind == 1:
        record = RecordEvent._at(value, at, arrival, sequence, index, sid)
        assert isinstance(record, RecordEvent)
        headers, record.offset, record._read_at = kept[8:]
        record.headers = tuple((name, bytes(data)) for name, data in headers)
    else:
        record = Event._at(value, at, arrival, sequence, index, sid)
    return EventOutcome(record, partition, _hashable(key), event_time, timestamp, status, reason)


def _hashable(key: Any) -> Hashable:
    """A key as it was: msgpack turns tuples into lists."""
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    hashable: Hashable = key
    return hashable
