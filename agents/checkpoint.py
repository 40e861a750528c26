"""What a queue's checkpoint waits for, kept proportional to the work at hand, and the event-time
state saved with it.

What a queue's checkpoint waits for, kept proportional to the work at hand.

A pulling agent acknowledges to its queue only the positions nobody needs any more: not a
cursor in the cache or reading history, and not an event-time activation whose open windows
(or events held for a handoff, or a step still being emitted) hold the checkpoint.
:class:`Holds` keeps the activations' holds, and the time each one's next tick is due, in
heaps updated as activations step, so neither an acknowledgement nor a timer walks a hundred
thousand quiet activations. :func:`acknowledgeable` and :class:`Tokens` turn the positions
read into what the receiver is told.

A min-heap of one value per key, for what an agent must find the smallest of among many
activations without walking them all: the checkpoint holds, the next tick due.

Setting a key's value pushes an entry; entries a later value replaced stay in the heap
until they reach its top, where they are recognised as stale and dropped (cheaper than
finding and removing them). The heap is rebuilt when stale entries outnumber live ones.

The event-time state of a queue's activations, saved with the queue's checkpoint.

An activation whose processor can be serialized (:mod:`streams.eventtime.snapshot`) does not
hold the checkpoint for its open windows: it holds it only at the first event it took since
its last saved snapshot. When the receiver persists a checkpoint it asks
:meth:`ActivationStates.collect` for the snapshots of the activations that stepped since, and
writes them in the same transaction (:class:`streams.eventtime.snapshot.StateRows`); once
written, those holds go. An activation in the middle of a step is left for the next
checkpoint (its hold stays). One whose state is empty has its snapshot deleted, so the
stored state stays proportional to what is open.

>>> states = ActivationStates(lambda activation: ("Counter", "ns/k"))
>>> states.pending(), states.collect()
(False, ([], []))
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from agents.activation import TimedActivation
from streams.core.ids import SequenceToken, lowest
from streams.core.lazy import LazySequence
from streams.core.state import StateError
from streams.eventtime.snapshot import SnapshotError

log = logging.getLogger(__name__)

StateKey = tuple[str, str]  # (consumer type name, stream id)
Upsert = tuple[str, str, int, int, bytes]  # key, position of the last event taken, state


class ActivationStates:
    """Which activations stepped since their last saved snapshot, and what is being written."""

    def __init__(self, key_of: Callable[[TimedActivation], StateKey]) -> None:
        self._key_of = key_of
        self._dirty: set[TimedActivation] = set()
        self._retired: list[StateKey] = []
        self._writing: list[TimedActivation] = []
        self._deleting: list[StateKey] = []
        self._refused: set[StateKey] = set()  # whose last save was refused (logged once)

    def changed(self, activation: TimedActivation) -> None:
        if activation.snapshots and activation.unsaved:
            self._dirty.add(activation)

    def retire(self, activation: TimedActivation) -> None:
        """The activation ends (its stream was swept as quiet): its snapshot goes."""
        self._dirty.discard(activation)
        if activation.stored or activation in self._writing:
            self._retired.append(self._key_of(activation))

    def expire(self, key: StateKey) -> None:
        """A parked activation's state outlived its time to live: delete it from the store."""
        self._retired.append(key)

    def deleting(self, key: StateKey) -> bool:
        """A deletion of ``key``'s saved state is on its way to the store."""
        return key in self._retired or key in self._deleting

    def pending(self) -> bool:
        return bool(self._dirty or self._retired)

    def collect(self) -> tuple[list[Upsert], list[StateKey]]:
        """The snapshots to write with the next checkpoint, and the keys to delete."""
        upserts: list[Upsert] = []
        deletes, self._retired = self._retired, []
        self._deleting = list(deletes)
        keep: set[TimedActivation] = set()
        for activation in self._dirty:
            if activation.stepping():
                keep.add(activation)  # never mid-step: its hold stays until the next one
                continue
            try:
                position, state = activation.begin_snapshot()
            except StateError as exc:
                key = self._key_of(activation)
                if key not in self._refused:  # once until it saves again, not at every checkpoint
                    self._refused.add(key)
                    holds = (
                        "its open windows hold the queue's checkpoint"  # for good: snapshots are off
                        if isinstance(exc, SnapshotError)
                        else "its state holds the queue's checkpoint until it can be saved"
                    )
                    log.warning(
                        "%s on %s: %s; %s", type(activation.target).__qualname__, activation.stream_id, exc, holds
                    )
                if activation.snapshots:
                    keep.add(activation)  # tried again at the next checkpoint
                continue
            if self._refused:
                self._refused.discard(self._key_of(activation))
            self._writing.append(activation)
            if state is None:  # empty
                deletes.append(self._key_of(activation))
            else:
                assert position is not None
                consumer, stream = self._key_of(activation)
                upserts.append((consumer, stream, position.sequence_number, position.event_index, state))
        self._dirty = keep
        return upserts, deletes

    def written(self, ok: bool) -> None:
        """The collected snapshots were committed with the checkpoint (or were not)."""
        writing, self._writing = self._writing, []
        deleting, self._deleting = self._deleting, []
        for activation in writing:
            activation.end_snapshot(ok)
            if not ok:
                self.changed(activation)
        if not ok:
            self._retired.extend(deleting)


class SavedUnit:
    """What an activation whose state is saved with the checkpoint keeps of it (an
    ``agents.event_time_observer.EventTimeObserver``, an ``agents.durable.DurableActivation``): the first
    event taken since its last save, and while a save is being written, the first one that
    save covers; both hold the checkpoint until the save is written."""

    __slots__ = ("stored", "unsaved", "_storing", "_since_snapshot", "_saving")

    def __init__(self) -> None:
        self.stored = False  # a save of it is in the store
        self.unsaved = False  # stepped since its last save was taken
        self._storing = False  # the save being written has state (not a deletion)
        self._since_snapshot: SequenceToken | None = None
        self._saving: SequenceToken | None = None

    def _changed(self) -> None: ...

    def _save_begun(self, storing: bool) -> None:
        """A save is taken now (``storing``: a state, not a deletion): what it covers holds
        until :meth:`end_snapshot`."""
        self._saving = lowest(self._saving, self._since_snapshot)
        self._since_snapshot = None
        self.unsaved = False
        self._storing = storing

    def end_snapshot(self, ok: bool) -> None:
        """The save taken was written with the checkpoint (``ok``), or was not: then what it
        covered holds again, and it is taken again at the next checkpoint."""
        if ok:
            self.stored = self._storing  # written, or deleted when it was empty
        else:
            self._since_snapshot = lowest(self._since_snapshot, self._saving)
            self.unsaved = True
        self._saving = None
        self._changed()


K = TypeVar("K", bound=Hashable)


class KeyedMinHeap(Generic[K]):
    """The smallest value over keys whose values change.

    >>> heap = KeyedMinHeap()
    >>> heap.set("a", 5.0); heap.set("b", 3.0); heap.set("b", 7.0)
    >>> heap.min(), len(heap)
    (5.0, 2)
    >>> heap.pop_until(6.0), heap.min()
    (['a'], 7.0)
    >>> heap.set("b", None); heap.min() is None
    True
    """

    __slots__ = ("_values", "_heap", "_order")

    def __init__(self) -> None:
        self._values: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._order = itertools.count()  # ties never compare keys

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def set(self, key: K, value: float | None) -> None:
        """Give ``key`` a value, or none (``None``: it no longer counts)."""
        if value is None:
            self._values.pop(key, None)
            return
        if self._values.get(key) == value:
            return
        self._values[key] = value
        heap = self._heap
        heapq.heappush(heap, (value, next(self._order), key))
        if len(heap) > 2 * len(self._values) + 64:
            self._heap = [(v, next(self._order), k) for k, v in self._values.items()]
            heapq.heapify(self._heap)

    def discard(self, key: K) -> None:
        self._values.pop(key, None)

    def min(self) -> float | None:
        """The smallest value of any key, or None when no key has one."""
        top = self.min_item()
        return None if top is None else top[1]

    def min_item(self) -> tuple[K, float] | None:
        """The key with the smallest value and its value (the first set, of equal ones), or
        None when no key has one.

        >>> heap = KeyedMinHeap(); heap.set("a", 5.0); heap.set("b", 3.0)
        >>> heap.min_item()
        ('b', 3.0)
        """
        heap, values = self._heap, self._values
        while heap:
            value, _, key = heap[0]
            if values.get(key) == value:
                return key, value
            heapq.heappop(heap)
        return None

    def pop_until(self, limit: float) -> list[K]:
        """Remove and return the keys whose value is at most ``limit``, smallest first."""
        heap, values = self._heap, self._values
        keys = []
        while heap and heap[0][0] <= limit:
            value, _, key = heapq.heappop(heap)
            if values.get(key) == value:
                del values[key]
                keys.append(key)
        return keys


class Holds:
    """The checkpoint holds and next ticks of a queue's event-time activations.

    An activation calls :attr:`on_change` with itself after each step (its hold and next
    tick may have moved); the heaps are brought up to date at the next :meth:`refresh`.

    >>> holds = Holds()
    >>> holds.oldest(), holds.due(now=1e12)
    (None, [])
    """

    __slots__ = ("_changed", "on_change", "_holds", "_ticks", "states")

    def __init__(self) -> None:
        self._changed: set[TimedActivation] = set()  # stepped since last looked at
        self.on_change = self._changed.add  # one bound method for every activation
        self._holds: KeyedMinHeap[TimedActivation] = KeyedMinHeap()
        self._ticks: KeyedMinHeap[TimedActivation] = KeyedMinHeap()
        self.states: ActivationStates | None = None  # told of the steps, when states are saved

    def refresh(self) -> None:
        """Bring the holds and next ticks of the activations that stepped up to date."""
        changed, holds, ticks, states = self._changed, self._holds, self._ticks, self.states
        # A value of None is KeyedMinHeap.set's pop, done here: most activations that
        # stepped hold nothing and have no tick (a fleet's first contact steps thousands).
        held, ticking = holds._values, ticks._values
        while changed:
            activation = changed.pop()
            hold = activation.checkpoint_hold()
            if hold is None:
                held.pop(activation, None)
            else:
                holds.set(activation, hold.sequence_number)
            if states is not None:
                states.changed(activation)
            tick = activation.next_tick()
            if tick is None:
                ticking.pop(activation, None)
            else:
                ticks.set(activation, tick)
        # Emptied by pop(), a set keeps its table: one that took a burst of thousands of
        # streams would keep that room for good. clear() lets it go.
        changed.clear()

    def oldest(self) -> float | None:
        """The oldest queue position an activation holds (None: none)."""
        self.refresh()
        return self._holds.min()

    def holder(self) -> tuple[TimedActivation, int] | None:
        """The activation holding the oldest position, and that position (None: none holds)."""
        self.refresh()
        top = self._holds.min_item()
        return None if top is None else (top[0], int(top[1]))

    def due(self, now: float) -> list[TimedActivation]:
        """The activations whose next tick is due at wall-clock ``now`` (each then has no
        tick due until it steps again)."""
        self.refresh()
        return self._ticks.pop_until(now)

    def holds(self, activation: TimedActivation) -> bool:
        """Whether ``activation`` holds the checkpoint (as of the last refresh)."""
        return activation in self._holds._values  # (a heap's own table: no call a stream parked)

    def drop(self, activation: TimedActivation) -> None:
        """The activation ended: it holds and ticks no more."""
        self._changed.discard(activation)
        self._holds._values.pop(activation, None)  # discard, without a call each (a fleet parks in bulk)
        self._ticks._values.pop(activation, None)


def acknowledgeable(unacked: deque[int], point: float) -> list[int]:
    """Take from ``unacked`` (positions read, in order) those below ``point``, the oldest
    position still needed.

    >>> read = deque([3, 4, 7])
    >>> acknowledgeable(read, 5), read
    ([3, 4], deque([7]))
    """
    if not unacked:
        return []
    if point > unacked[-1]:  # all of it: the usual case once consumers have caught up
        done = list(unacked)
        unacked.clear()
        return done
    done = []
    while unacked[0] < point:
        done.append(unacked.popleft())
    return done


class Tokens(LazySequence[int, SequenceToken]):
    """Acknowledged queue positions as tokens, each made when the receiver reads it.

    A read can acknowledge thousands of records; a list of as many token objects, alive
    until the call returns, cost more than making them (in garbage collections), and some
    receivers only count them or read the last.

    >>> Tokens([3, 4])[-1], len(Tokens([3, 4]))
    (SequenceToken(sequence_number=4, event_index=0), 2)
    """

    __slots__ = ()
    # The positions are in queue order (as read): a receiver that needs only the newest reads
    # ``tokens[-1]``, making one token, not one a record.
    ascending = True

    def __init__(self, numbers: list[int]) -> None:
        super().__init__(numbers, SequenceToken)

    def __repr__(self) -> str:
        return f"Tokens({self.source!r})"
