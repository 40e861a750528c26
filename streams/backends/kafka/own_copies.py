"""What a Kafka worker knows of the copies in its local state store
(:class:`OwnCopies`, kept by :class:`~streams.backends.kafka.changelog.KafkaChangelog`):

- **its own queues** (loaded, not let go): the changelog's end as each one's last load or
  write left it. A queue's receiver is its partition's one writer, so while no write goes
  on, a copy at that end is still in step, and its "synced" time may move on;
- **when each copy's "synced" time was last set**, so that an idle copy, own or standby, has
  it moved on at most every :data:`REFRESH` seconds (:meth:`OwnCopies.keep_synced`);
- **the copies lost** with a file the local store found damaged in use and set aside: each
  own queue's, until it is rebuilt from the changelog in its turn. A lookup of a lost
  queue's parked state meanwhile is answered from a stand-in: the queue's states as its
  whole changelog partition gives them, read at the first such lookup.

>>> copies = OwnCopies()
>>> copies.caught_up(0, 12); copies.taken(0); copies.end_of(0)
12
>>> copies.writing(0); copies.end_of(0) is None  # records may land: the end is unsure
True
>>> copies.written(0, 15); copies.end_of(0)
15
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from concurrent.futures import ThreadPoolExecutor

import anyio

from streams.adapters.protocols import LocalStates, StateKey
from streams.core.clock import wall_time
from streams.core.errors import LocalStoreDamagedError, QueueFailedError, StoreError
from streams.core.ids import QueueId, SequenceToken
from streams.core.retry import reason_of

log = logging.getLogger("headrace.kafka")

SavedStates = dict[StateKey, tuple[SequenceToken, bytes]]
# Seconds between moving a caught-up copy's "synced" time on while it gets no writes (one row
# written): an idle queue's copy, own or standby, stays trusted past the changelog's
# ``delete.retention.ms``.
REFRESH = 60.0


class OwnCopies:
    """The worker's knowledge of its local copies (see the module)."""

    def __init__(self) -> None:
        self.own: set[int] = set()
        self._ends: dict[int, int] = {}  # an own queue -> the changelog's end; absent while unsure
        self.synced_at: dict[int, float] = {}  # a queue -> when its copy's "synced" time was last set (or tried)
        self.lost: set[int] = set()
        self._standins: dict[int, SavedStates] = {}
        self._set_aside_seen = 0  # the local store's count of files set aside, as last seen

    def caught_up(self, number: int, end: int) -> None:
        """Queue ``number``'s copy was brought to the changelog's ``end`` now."""
        self._ends[number] = end
        self.synced_at[number] = wall_time()

    def taken(self, number: int) -> None:
        """Queue ``number`` is this worker's own, its copy whole."""
        self.own.add(number)
        self.mended(number)

    def let_go(self, number: int) -> None:
        self.own.discard(number)
        self._ends.pop(number, None)

    def end_of(self, number: int) -> int | None:
        """The changelog's end an own queue's last load or write left; ``None``: unsure."""
        return self._ends.get(number)

    def writing(self, number: int) -> None:
        """A write of queue ``number`` begins: its end is unsure, and a lost copy's stand-in
        (read before the write) is read again at its next lookup."""
        self._ends.pop(number, None)
        self._standins.pop(number, None)

    def written(self, number: int, end: int) -> None:
        """A write of queue ``number`` landed, the changelog's end ``end`` after it."""
        if number in self.own:
            self._ends[number] = end

    def is_lost(self, number: int, local: LocalStates | None) -> bool:
        """Whether queue ``number``'s copy is lost (a new set-aside in ``local`` loses every
        own queue's)."""
        if local is not None and local.set_aside != self._set_aside_seen:
            self._set_aside_seen = local.set_aside
            self.lost |= self.own
            self._standins.clear()
        return number in self.lost

    def mended(self, number: int) -> None:
        self.lost.discard(number)
        self._standins.pop(number, None)

    async def keep_synced(
        self,
        local: LocalStates,
        queue: QueueId,
        turn: anyio.Lock,
        end: tuple[int, float],
        still: Callable[[], bool],
        every: float | None = None,
    ) -> None:
        """Move the "synced" time of ``queue``'s copy on, if the copy is at changelog offset
        ``at``, the changelog's end at ``asked`` (``end``: both), and the time was last moved
        ``every`` seconds before or more (:data:`REFRESH` by default): with no writes to
        follow, the copy is still in step (one row written). In the queue's ``turn``, and only
        while ``still()`` (the caller's knowledge of the end holds). A store that cannot take
        the row now is logged, not raised: its callers are reads and shutdowns."""
        (at, asked), number = end, queue.number
        if asked - self.synced_at.get(number, 0.0) < (REFRESH if every is None else every):
            return
        async with turn:
            try:
                if still() and not self.is_lost(number, local) and local.offset(number) == at:
                    await local.apply(number, ([], []), next_offset=at, after=at)
                    self.synced_at[number] = asked
            except LocalStoreDamagedError:  # set aside: the copy is rebuilt, synced then
                pass
            except StoreError as exc:  # full, read-only: a read must not fail for it
                self.synced_at[number] = asked  # the next try as after a success, not at every read
                log.warning(
                    "%s: its local copy's synced time cannot be moved on now (%s); a later read tries again, "
                    "and a copy left past the changelog's delete.retention.ms is rebuilt at its next load",
                    queue,
                    exc,
                )

    def looked_up(
        self,
        local: LocalStates,
        queue: QueueId,
        keys: Collection[StateKey],
        read: Callable[[QueueId], Awaitable[SavedStates]],
    ) -> SavedStates:
        """The states of ``keys`` of ``queue`` (a key without one left out): from ``local``,
        or, for a lost copy, from its stand-in (``read`` reads the changelog partition)."""
        if not self.is_lost(queue.number, local):
            try:
                return local.saved_states(queue.number, keys)
            except LocalStoreDamagedError:
                self.is_lost(queue.number, local)
        standin = self._standin(queue, read)
        return {key: standin[key] for key in keys if key in standin}

    def _standin(self, queue: QueueId, read: Callable[[QueueId], Awaitable[SavedStates]]) -> SavedStates:
        """A lookup is synchronous (an activation's first contact), so the partition is read
        in a thread of its own while this worker's event loop waits: rare, and exact."""
        found = self._standins.get(queue.number)
        if found is None:
            try:
                with ThreadPoolExecutor(1, thread_name_prefix="headrace-changelog") as pool:
                    found = pool.submit(anyio.run, read, queue).result()
            except Exception as exc:
                raise QueueFailedError(
                    f"{queue}: its local state store was damaged and its changelog cannot be read now "
                    f"({reason_of(exc)}); restart the worker once Kafka answers"
                ) from exc
            self._standins[queue.number] = found
        return found
