"""as_observer's wrapper: on_next kept lifted, the other hooks looked up on the target when
called (an object's own, a callable object's too; a plain function has none)."""

from __future__ import annotations

import anyio

from streams.core.observer import as_observer


class Callable_:
    def __init__(self) -> None:
        self.seen: list[object] = []

    def __call__(self, batch: list[int]) -> None:
        self.seen.append(("batch", batch))

    def on_completed(self) -> None:
        self.seen.append("completed")

    def on_error(self, error: BaseException) -> None:
        self.seen.append(("error", error))


class Observer:
    def __init__(self) -> None:
        self.seen: list[object] = []

    async def on_next(self, batch: list[int]) -> None:
        self.seen.append(("batch", batch))

    async def on_watermark(self, watermark: float) -> None:
        self.seen.append(("watermark", watermark))

    def on_error(self, error: BaseException) -> None:
        self.seen.append(("error", repr(error)))


async def test_an_object_s_hooks_are_called_and_a_missing_one_does_nothing() -> None:
    target = Observer()
    observer = as_observer(target)
    assert observer.has_on_error
    await observer.on_next([1])
    await observer.on_watermark(5.0)
    await observer.on_completed()  # it has none
    await observer.on_error(ValueError("x"))
    assert target.seen == [("batch", [1]), ("watermark", 5.0), ("error", "ValueError('x')")]


async def test_a_callable_object_is_its_on_next_and_keeps_on_completed_but_not_on_error() -> None:
    target = Callable_()
    observer = as_observer(target)
    assert not observer.has_on_error  # a callable observer's failures are not told to it
    await observer.on_next([2])
    await observer.on_completed()
    await observer.on_error(RuntimeError("y"))
    assert target.seen == [("batch", [2]), "completed"]


def test_a_function_has_no_other_hook() -> None:
    seen: list[list[int]] = []
    observer = as_observer(seen.append)

    async def main() -> None:
        await observer.on_next([3])
        await observer.on_completed()
        await observer.on_watermark(1.0)
        await observer.on_error(ValueError())

    anyio.run(main)
    assert seen == [[3]] and not observer.has_on_error
