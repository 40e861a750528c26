"""Group commit: concurrent writers share one transaction.

Each ``on_next`` awaiting its own SQLite transaction pays a thread hop and a commit per call.
Here a caller that finds no write running becomes the *leader*: it writes its batch in one
call of ``write`` (one transaction). Callers arriving meanwhile join the next open batch and
wait; when the write ends, the leader hands that batch to one of its waiters, who leads it.
Every caller returns only once its own items are written, so durability is unchanged, and a
leader writes one batch only, so no caller is held up by a steady stream of others.

The one group commit of headrace: the embedded queues' appends and the handoff log's
(:class:`streams.backends.embedded.handoff_commit.GroupAppender`) both ride on :class:`GroupCommitter`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import anyio
import anyio.to_thread

Item = TypeVar("Item")


class _Batch(Generic[Item]):
    __slots__ = ("items", "done", "written", "error", "waiters", "needs_leader")

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.done = anyio.Event()  # set when written, failed, or handed on for a leader
        self.written = False
        self.error: Exception | None = None
        self.waiters = 0  # callers waiting on it (its leader excluded)
        self.needs_leader = False


class GroupCommitter(Generic[Item]):
    """Coalesces concurrent :meth:`submit` calls into calls of ``await write(items)``, one at
    a time. ``write`` must not be abandoned once it has begun (as ``anyio.to_thread.run_sync``
    is not): a cancellation may land only before it begins, so whether a batch was written is
    never left unknown.

    >>> import anyio
    >>> written = []
    >>> committer = GroupCommitter.threaded(written.append)
    >>> anyio.run(committer.submit, [1, 2])
    >>> written
    [[1, 2]]
    """

    def __init__(self, write: Callable[[list[Item]], Awaitable[object]]) -> None:
        self._write = write
        self._open: _Batch[Item] | None = None
        self._writing = False

    @classmethod
    def threaded(cls, write: Callable[[list[Item]], object]) -> GroupCommitter[Item]:
        """A committer whose ``write`` blocks: each call runs in a worker thread."""

        async def in_thread(items: list[Item]) -> None:
            await anyio.to_thread.run_sync(write, items)

        return cls(in_thread)

    async def submit(self, items: Sequence[Item]) -> None:
        """Return once ``items`` are written; raise what ``write`` raised for their batch."""
        if not items:
            return
        if self._open is None:
            self._open = _Batch()
        batch = self._open
        batch.items.extend(items)
        if not self._writing:
            await self._lead(batch)
        else:
            await self._wait(batch)
        if batch.error is not None:
            raise batch.error

    async def _wait(self, batch: _Batch[Item]) -> None:
        batch.waiters += 1
        counted = True
        try:
            while not (batch.written or batch.error):
                if batch.needs_leader:
                    batch.needs_leader = False
                    batch.done = anyio.Event()  # the other waiters now wait for our write
                    batch.waiters -= 1
                    counted = False
                    await self._lead(batch)
                else:
                    await batch.done.wait()
        finally:
            if counted:
                batch.waiters -= 1
                if batch.needs_leader and batch.waiters == 0:
                    # Handed to us, but we were cancelled first: elect again.
                    batch.needs_leader = False
                    self._elect(None)

    async def _lead(self, batch: _Batch[Item]) -> None:
        self._writing = True
        if self._open is batch:
            self._open = None
        try:
            # ``write`` is never abandoned once begun, so ``written`` is never left unknown;
            # a cancellation can only land before the write begins.
            await self._write(batch.items)
            batch.written = True
        except Exception as exc:
            batch.error = exc
        finally:
            finished = batch.written or batch.error is not None
            batch.done.set()
            self._elect(None if finished else batch)

    def _elect(self, unwritten: _Batch[Item] | None) -> None:
        """Hand the unwritten batch (our caller was cancelled), else the open one, to one of
        its waiters; batches nobody waits for any more belong to cancelled callers: drop."""
        for candidate in (unwritten, self._open):
            if candidate is None:
                continue
            if candidate is self._open:
                self._open = None
            if candidate.waiters > 0:
                candidate.needs_leader = True
                candidate.done.set()
                return  # still writing: the woken waiter leads
        self._writing = False
