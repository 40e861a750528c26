"""Delivery to one subscription: its cursor, one batch at a time, awaited.

A slow consumer slows only its own cursor; the others keep their own pace. A consumer that
raises is told through ``on_error``, the failure handler hears of it, the batch is
dead-lettered with reason ``delivery_failed`` (so it stays findable), and delivery goes on,
unless the subscription is faulted (``fault_on_error``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import anyio

from cache.protocols import CachedBatch, QueueCacheCursor
from streams.batch import BatchKind, Event, EventBatch
from streams.deadletters import DeadLetter
from streams.errors import DecodeError, DeliveryTimeoutError
from streams.failures import DeliveryFailure
from streams.ids import StreamId
from streams.tokens import SequenceToken

from .context import AgentContext

log = logging.getLogger("headrace.agent")


class StreamConsumer:
    """One subscription on one stream, in the agent that owns the stream's queue."""

    def __init__(
        self,
        subscription_id: str,
        stream_id: StreamId,
        observer: Any,
        cursor: QueueCacheCursor,
        context: AgentContext,
        *,
        start_token: SequenceToken | None = None,
        durable: bool = False,
    ) -> None:
        self.subscription_id = subscription_id
        self.stream_id = stream_id
        self.observer = observer
        self.cursor = cursor
        self.durable = durable
        self.delivered_batches = 0
        self.failures = 0
        self.faulted = False
        self.detached = 0
        self._context = context
        self._start_token = start_token
        self._wake = anyio.Event()
        self._closed = False
        self._delivering = False
        self._scope: anyio.CancelScope | None = None
        self._deadline = 0.0
        self._timed_out = False

    @property
    def idle(self) -> bool:
        """Caught up (or closed) and not in the middle of a delivery."""
        return not self._delivering and (self._closed or self.cursor.current() is None)

    def wake(self) -> None:
        self._wake.set()

    def close(self) -> None:
        """Stop delivering. An idle consumer stops at once; a busy one after its batch."""
        if self._closed:
            return
        self._closed = True
        self.cursor.close()
        if self._scope is not None and not self._delivering:
            self._scope.cancel()
        self._wake.set()

    def check_deadline(self, now: float) -> None:
        """Called by the agent's timer: cancel a delivery past ``max_event_delivery_time``.

        A watchdog instead of a timeout around every batch: a deadline costs one float per
        delivery, where a timer per batch cost a quarter of the agent's time."""
        if self._delivering and now > self._deadline and self._scope is not None:
            self._timed_out = True
            self._scope.cancel()

    async def run(self) -> None:
        while not self._closed:
            with anyio.CancelScope() as scope:
                self._scope = scope
                await self._deliver_all()
            if self._timed_out:
                self._timed_out = self._delivering = False
                item = self.cursor.current()
                if item is not None:
                    await self._failed(item, self._batch_of(item), DeliveryTimeoutError(
                        f"consumer {self.subscription_id} on {self.stream_id} took longer than "
                        f"max_event_delivery_time ({self._context.options.max_event_delivery_time}s)"
                    ))
                    self.cursor.advance()

    async def _deliver_all(self) -> None:
        limit = self._context.options.max_event_delivery_time
        while not self._closed:
            cursor = self.cursor
            item = cursor.current()
            if item is None:
                if getattr(cursor, "needs_fill", False):
                    await cursor.fill()  # type: ignore[attr-defined]
                    continue
                await self._idle()
                continue
            self._deadline = time.monotonic() + limit
            self._delivering = True
            await self._deliver(item)
            self._delivering = False
            cursor.advance()

    async def _idle(self) -> None:
        """Wait for data; an event-time consumer meanwhile ticks on the agent's period, so a
        silent stream's watermark still advances (late-arrival rule, idle timeouts)."""
        tick = getattr(self.observer, "on_tick", None)
        if tick is None:
            await self._wake.wait()
        else:
            with anyio.move_on_after(self._context.options.get_queue_msgs_timer_period):
                await self._wake.wait()
            if not self._wake.is_set():
                await tick(time.time())
                return
        self._wake = anyio.Event()

    def detach(self, make_cursor: Callable[[int], QueueCacheCursor]) -> None:
        """Move this consumer off the cache onto a cursor of its own over the durable queue,
        from the batch it still needs (``make_cursor(sequence_number)``)."""
        item = self.cursor.current()
        if item is None or self._closed:
            return
        # Mid-delivery, the batch is being finished: the new cursor starts after it.
        start = item.message.sequence_number + (1 if self._delivering else 0)
        old, self.cursor = self.cursor, make_cursor(start)
        old.close()
        self.detached += 1
        self._wake.set()

    async def _deliver(self, item: CachedBatch) -> None:
        kind = item.kind
        observer = self.observer
        batch: EventBatch | list[Event] = []
        try:
            if kind is BatchKind.DATA:
                batch = self._batch_of(item)
                if batch:
                    await observer.on_next(batch)
            elif kind is BatchKind.COMPLETED:
                await observer.on_completed()
            elif kind is BatchKind.WATERMARK:
                await observer.on_watermark(float(item.container.values[0]))
            self.delivered_batches += 1
        except Exception as exc:  # a consumer's bug must not stop the agent
            await self._failed(item, batch, exc)

    def _batch_of(self, item: CachedBatch) -> EventBatch:
        events = item.events
        start = self._start_token
        if start is not None:
            self._start_token = None
            if start.sequence_number == item.message.sequence_number and start.event_index:
                return events.from_index(start.event_index)
        return events

    async def _failed(self, item: CachedBatch, batch: EventBatch | list[Event], error: Exception) -> None:
        self.failures += 1
        options = self._context.options
        self.faulted = options.fault_on_error
        if isinstance(error, DecodeError):
            await self._undecodable(item, error)
            batch = []  # its values cannot be read: the raw record is what is kept
        token = batch[0].token if batch else item.message.token
        await self._tell_observer(error)
        if batch:
            await self._context.dead_letters.add(
                [
                    DeadLetter(
                        "delivery_failed",
                        stream=str(self.stream_id),
                        queue=item.message.queue.number,
                        sequence_number=e.token.sequence_number,
                        value=e.value,
                        event_time=e.event_time,
                        detail=f"{self.subscription_id}: {error!r}",
                    )
                    for e in batch
                ]
            )
        await self._context.failure_handler.on_delivery_failure(
            DeliveryFailure(self.subscription_id, self.stream_id, token, error, self.faulted)
        )
        if self.faulted:
            if self.durable:
                await self._context.pubsub.fault_subscription(self.subscription_id)
            self._closed = True
            self.cursor.close()

    async def _undecodable(self, item: CachedBatch, error: DecodeError) -> None:
        """A batch whose header was sound but whose values are not: dead-letter the raw
        record once, whichever consumer met it first."""
        container = item.container
        if container.dead_lettered:
            return
        container.dead_lettered = True
        await self._context.dead_letters.add(
            [
                DeadLetter(
                    "undecodable",
                    stream=str(self.stream_id),
                    queue=item.message.queue.number,
                    sequence_number=item.message.sequence_number,
                    payload=item.message.payload,
                    detail=str(error),
                )
            ]
        )

    async def _tell_observer(self, error: Exception) -> None:
        if getattr(self.observer, "has_on_error", True):
            try:
                await self.observer.on_error(error)
            except Exception:  # a consumer's on_error must not stop its delivery either
                log.exception("on_error of %s raised", self.subscription_id)

    async def report_error(self, error: Exception) -> None:
        """Tell the consumer and the failure handler of an error outside a delivery
        (a cache miss when its cursor was created)."""
        await self._tell_observer(error)
        await self._context.failure_handler.on_delivery_failure(
            DeliveryFailure(self.subscription_id, self.stream_id, None, error, False)
        )
