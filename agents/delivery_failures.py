"""What happens when a delivery to a consumer fails.

A batch whose ``on_next`` raised is delivered again with back-off
(``delivery_retry_backoff``, doubling) while the delivery's ``max_event_delivery_time``
allows (``agents.redelivery.redeliver``). If no attempt succeeds, or the failure is one no
retry can mend (values that cannot be decoded, a timeout), the batch is dead-lettered with
the traceback, so it stays findable, before anyone else is told; then the consumer's own
``on_error`` (within a limit of its own) and the provider's failure handler hear of it;
then, if the subscription asked for it (``fault_on_error``; never an implicit
activation's), the subscription is faulted.

A failure is rare, so this is not part of every consumer: :class:`DeliveryFailures` is made
for the failure at hand, over the consumer it happened to (:class:`FailingConsumer`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

import anyio

from agents.activation import Activation
from agents.context import AgentContext
from agents.failure_letters import failed_letters, undecodable_letter
from agents.redelivery import redeliver
from cache.protocols import CachedBatch
from streams.core.batch import Event, EventBatch
from streams.core.errors import DecodeError, user_error
from streams.core.ids import StreamId
from streams.core.observer import DeliveryFailure

log = logging.getLogger("headrace.agent")


class FailingConsumer(Protocol):
    """What the failure path needs of the consumer it reports for (``agents.delivery``)."""

    subscription_id: str
    failures: int
    faulted: bool
    reporting: bool  # reporting a failure: the runtime's time, which the watchdog leaves alone
    deadline: float  # when the delivery in flight runs out of max_event_delivery_time

    @property
    def stream_id(self) -> StreamId: ...

    @property
    def durable(self) -> bool: ...

    @property
    def implicit(self) -> bool: ...

    @property
    def observer(self) -> Activation: ...

    @property
    def closed(self) -> bool: ...

    def count_delivered(self, batch: EventBatch) -> None: ...

    def fault(self) -> None: ...


class DeliveryFailures:
    """The failure path of one consumer's deliveries (see the module's docstring)."""

    __slots__ = ("_consumer", "_context")

    def __init__(self, consumer: FailingConsumer, context: AgentContext) -> None:
        self._consumer = consumer
        self._context = context

    async def retry(self, item: CachedBatch, batch: EventBatch, error: Exception) -> None:
        """Deliver a batch whose delivery raised again, with back-off, within the delivery's
        ``max_event_delivery_time``; dead-letter it if no attempt succeeds.

        The first failure is logged at warning with the user's traceback; the retries after
        it are quiet until one succeeds (one info line) or the batch is dead-lettered (one
        warning line, from the failure handler)."""
        if isinstance(error, DecodeError):  # its values cannot be read: no retry makes them readable
            await self.failed(item, batch, error)
            return
        consumer, options = self._consumer, self._context.options
        log.warning(
            "%s: consumer %s raised %r; retrying with back-off for up to %ss, then dead-lettering",
            consumer.stream_id,
            consumer.subscription_id,
            user_error(error),
            options.max_event_delivery_time,
            exc_info=user_error(error),
        )
        # An observer that keeps what it was given (an event-time activation's processor)
        # says so: delivering the batch again would count it twice. Asked now, not when
        # attached: an activation whose constructor raised is built by a later attempt.
        if consumer.observer.redeliverable:
            last = await redeliver(
                consumer.observer.on_next,
                batch,
                error,
                consumer.deadline,
                options.delivery_retry_backoff,
                lambda: consumer.closed,
            )
            if last is None:
                log.info("%s: consumer %s took the batch on a retry", consumer.stream_id, consumer.subscription_id)
                consumer.count_delivered(batch)
                return
            error = last
        await self.failed(item, batch, error, logged=True)

    async def failed(
        self, item: CachedBatch, batch: EventBatch | list[Event], error: Exception, *, logged: bool = False
    ) -> None:
        """Dead-letter ``batch``, tell the consumer and the failure handler, fault the
        subscription if it asks for that."""
        consumer = self._consumer
        consumer.reporting = True
        try:
            await self._report(item, batch, error, logged)
        finally:
            consumer.reporting = False

    async def _report(self, item: CachedBatch, batch: EventBatch | list[Event], error: Exception, logged: bool) -> None:
        consumer, context = self._consumer, self._context
        consumer.failures += 1
        consumer.faulted = context.options.fault_on_error and not consumer.implicit
        if isinstance(error, DecodeError):
            await self._undecodable(item, error)
            batch = []  # its values cannot be read: the raw record is what is kept
        token = batch[0].token if batch else item.message.token
        if batch:  # kept before on_error is told: whatever on_error does, they are findable
            letters = failed_letters(
                consumer.subscription_id,
                str(consumer.stream_id),
                item.message.queue.number,
                batch,
                error,
                item.container,
            )
            await context.dead_letters.add(letters)
        await self.tell_observer(error)
        await context.failure_handler.on_delivery_failure(
            DeliveryFailure(consumer.subscription_id, consumer.stream_id, token, error, consumer.faulted, logged)
        )
        if consumer.faulted:
            if consumer.durable:
                await context.pubsub.fault_subscription(consumer.subscription_id)
            consumer.fault()

    async def _undecodable(self, item: CachedBatch, error: DecodeError) -> None:
        """A batch whose header was sound but whose values are not: dead-letter the raw
        record once, whichever consumer met it first."""
        container = item.container
        if container.dead_lettered:
            return
        container.dead_lettered = True
        letter = undecodable_letter(item.message, error, str(self._consumer.stream_id))
        await self._context.dead_letters.add([letter])

    async def filter_failed(
        self, item: CachedBatch, refused: Sequence[tuple[Event, Exception]], *, first_of_run: bool
    ) -> None:
        """Dead-letter the events a subscription's filter failed on (``filter_failed``)."""
        consumer = self._consumer
        first = refused[0][1]
        if first_of_run:  # logged with its traceback; the rest of the run is in the letters
            log.warning(
                "%s: the filter of subscription %s raised %r on %d event(s) of %s; dead-lettered filter_failed",
                consumer.stream_id,
                consumer.subscription_id,
                first,
                len(refused),
                item.message.token,
                exc_info=first,
            )
        given = item.container
        letters = []
        for event, error in refused:
            letter = failed_letters(
                consumer.subscription_id, str(consumer.stream_id), item.message.queue.number, [event], error, given
            )[0]
            letters.append(replace(letter, reason="filter_failed"))
        await self._context.dead_letters.add(letters)

    async def tell_observer(self, error: Exception) -> None:
        """Tell the consumer's ``on_error``, within ``max_event_delivery_time`` of its own:
        what it raises is logged, and one that does not return in time is abandoned."""
        consumer = self._consumer
        if not consumer.observer.has_on_error:
            return
        limit = self._context.options.max_event_delivery_time
        try:
            with anyio.move_on_after(limit) as scope:
                await consumer.observer.on_error(error)
            if scope.cancelled_caught:
                log.warning(
                    "%s: on_error of %s took longer than max_event_delivery_time (%ss); abandoned",
                    consumer.stream_id,
                    consumer.subscription_id,
                    limit,
                )
        except Exception:  # a consumer's on_error must not stop its delivery either
            log.exception("%s: on_error of %s raised", consumer.stream_id, consumer.subscription_id)

    async def report_error(self, error: Exception) -> None:
        """Tell the consumer and the failure handler of an error outside a delivery
        (a cache miss when its cursor was created)."""
        consumer = self._consumer
        await self.tell_observer(error)
        await self._context.failure_handler.on_delivery_failure(
            DeliveryFailure(consumer.subscription_id, consumer.stream_id, None, error, False)
        )
