"""An activation whose consumer could not be built yet: its constructor raised.

A constructor is user code like ``on_next``, and fails the same way (a bad key, a resource
away a moment): the batch that needed it is retried with the delivery back-off, dead-lettered
``activation_failed`` if every attempt fails, and the stream's next batch tries again. Until
the instance exists nothing of the stream is taken, so redelivery counts nothing twice; once
it exists, every call goes to the real activation.

>>> import anyio
>>> from streams.core.observer import as_observer
>>> attempts = []
>>> def build():
...     attempts.append(1)
...     if len(attempts) < 2:
...         raise ValueError("not yet")
...     return as_observer(seen.extend)
>>> seen = []
>>> pending = PendingActivation(build, "Totals")
>>> try:
...     anyio.run(pending.on_next, [1])
... except ActivationError as exc:
...     print(exc)
Totals could not be built: ValueError('not yet')
>>> anyio.run(pending.on_next, [2]); seen, pending.built is not None
([2], True)
"""

from __future__ import annotations

from collections.abc import Callable

from agents.activation import Activation
from streams.core.batch import EventBatch
from streams.core.errors import ActivationError

__all__ = ["ActivationError", "PendingActivation"]


class PendingActivation:
    """Stands for an activation whose constructor raised; builds it at each delivery until
    it can (``build()`` makes the real one), then delivers to it."""

    __slots__ = ("_build", "name", "built")

    def __init__(self, build: Callable[[], Activation], name: str) -> None:
        self._build = build
        self.name = name  # the consumer type, for the error's message
        self.built: Activation | None = None

    def activation(self) -> Activation:
        """The real activation, built now if it was not (raises :class:`ActivationError`
        with the constructor's error as its cause)."""
        built = self.built
        if built is None:
            try:
                built = self.built = self._build()
            except Exception as exc:
                raise ActivationError(f"{self.name} could not be built: {exc!r}") from exc
        return built

    @property
    def target(self) -> object:
        return None if self.built is None else self.built.target

    @property
    def has_on_error(self) -> bool:
        return self.built is not None and self.built.has_on_error

    @property
    def redeliverable(self) -> bool:
        # Unbuilt, it has taken nothing: a retry cannot count anything twice.
        return self.built is None or self.built.redeliverable

    @property
    def waiting_on_handoff(self) -> bool:
        return self.built is not None and self.built.waiting_on_handoff

    @property
    def user_on_next(self) -> Callable[[EventBatch], object] | None:
        return None  # delivered by the consumer's task, which retries and times it

    async def on_next(self, batch: EventBatch) -> None:
        await self.activation().on_next(batch)

    async def on_error(self, error: BaseException) -> None:
        if self.built is not None:
            await self.built.on_error(error)

    async def on_completed(self) -> None:
        await self.activation().on_completed()

    async def on_watermark(self, watermark: float) -> None:
        await self.activation().on_watermark(watermark)
