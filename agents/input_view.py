"""One input's face of an event-time activation with several inputs (``EventTime(...,
inputs=...)``): the stream of each input delivers to its own :class:`InputView`, which passes
everything on to the one activation under the input's name, its batches taking their turn in
queue order with the other inputs' (:mod:`agents.keyed`)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from agents.order import QueueOrder
from streams.core.batch import EventBatch


class InputsActivation(Protocol):
    """What an input's view passes on to (an ``agents.timed.EventTimeObserver``)."""

    target: object
    has_on_error: bool

    @property
    def waiting_on_handoff(self) -> bool: ...

    def on_next(self, batch: EventBatch, partition: str | None = None) -> Awaitable[None]: ...

    def on_error(self, error: BaseException) -> Awaitable[None]: ...

    def on_watermark(self, watermark: float, partition: str | None = None) -> Awaitable[None]: ...

    def on_completed(self, partition: str | None = None) -> Awaitable[None]: ...


class InputView:
    """One input's face of an activation with several inputs: the stream of that input
    delivers to it, and it passes everything on to the activation under the input's name,
    its batches in their turn in queue order (``agents.keyed``)."""

    __slots__ = ("activation", "name", "order")

    redeliverable = False  # the activation's windows keep what it took
    user_on_next = None  # every batch waits for its turn: never called inline

    def __init__(self, activation: InputsActivation, name: str, order: QueueOrder) -> None:
        self.activation = activation
        self.name = name
        self.order = order

    @property
    def target(self) -> object:
        return self.activation.target

    @property
    def has_on_error(self) -> bool:
        return self.activation.has_on_error

    @property
    def waiting_on_handoff(self) -> bool:
        return self.activation.waiting_on_handoff

    async def on_next(self, batch: EventBatch) -> None:
        await self.order.deliver(self._take, batch)

    def _take(self, batch: EventBatch) -> Awaitable[None]:
        return self.activation.on_next(batch, self.name)

    def on_error(self, error: BaseException) -> Awaitable[None]:
        return self.activation.on_error(error)

    async def on_watermark(self, watermark: float) -> None:
        await self.activation.on_watermark(watermark, self.name)

    async def on_completed(self) -> None:
        await self.activation.on_completed(self.name)
