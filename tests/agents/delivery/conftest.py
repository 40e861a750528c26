from __future__ import annotations

import anyio
import pytest

from streams import Event, inline


class Recorder:
    """An observer that records what reaches it."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.errors: list[BaseException] = []
        self.completed = 0
        self.batches = 0

    @inline  # never awaits: the agent calls it where the data arrives
    async def on_next(self, batch: list[Event]) -> None:
        self.batches += 1
        self.events.extend(batch)

    async def on_error(self, error: BaseException) -> None:
        self.errors.append(error)

    async def on_completed(self) -> None:
        self.completed += 1

    @property
    def values(self) -> list:
        return [e.value for e in self.events]


class GatedRecorder(Recorder):
    """A consumer stuck in its first delivery until ``gate`` is set: a slow or stalled one."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = anyio.Event()

    async def on_next(self, batch: list[Event]) -> None:
        await self.gate.wait()
        await super().on_next(batch)


@pytest.fixture
def recorder_factory():
    return Recorder


async def drained(provider, seconds: float = 10.0) -> None:
    with anyio.fail_after(seconds):
        await provider.drain()
