"""The fault matrix's scenario: one consumer type reading two streams, ``ns/good`` and
``ns/bad``, with one of its hooks failing (raising, hanging past ``max_event_delivery_time``,
or returning what the runtime cannot use) for one unit of the bad stream only: the batch,
event or window holding the poison event, or the bad stream's activation. What the run
leaves (each stream's output, the dead letters, the log's warnings) is what a user sees."""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anyio

from streams import StreamId, StreamProvider
from streams.eventtime import EventTime, OrderingPolicy, Tumbling

T0 = 1_700_000_000.0
LIMIT = 0.25  # max_event_delivery_time of these runs
FAST = {"max_event_delivery_time": LIMIT, "delivery_retry_backoff": 0.01}
EVENTS = 20  # per stream, in batches of 5; the bad stream's event 7 is the poison
BATCH = 5
POISON = 7

# hook -> the consumer's shape: "plain" (on_next), "windowed" (on_window), "events" (on_events)
HOOKS: dict[str, str] = {
    "constructor": "windowed",
    "on_next": "plain",
    "on_window": "windowed",
    "on_events": "events",
    "on_error": "plain",
    "on_completed": "plain",
    "on_watermark": "windowed",
    "timestamp_by": "windowed",
    "group_by": "windowed",
    "select": "windowed",
    "aggregate": "windowed",
}
FAILURES = ("raises", "hangs", "nonsense")
# sync user code cannot be cut short: its "hang" is a stall past the limit that then returns
SYNC = {"constructor", "timestamp_by", "group_by", "select", "aggregate"}


class Fault:
    """Where and how the hook fails: only for the poison's unit of the bad stream."""

    def __init__(self, hook: str, failure: str) -> None:
        self.hook, self.failure = hook, failure
        self.calls = 0

    def hit(self, hook: str, bad: bool) -> bool:
        if hook != self.hook or not bad:
            return False
        self.calls += 1
        return True

    def sync(self, hook: str, bad: bool, nonsense: Any, normal: Any) -> Any:
        """A sync hook's return: raises, stalls then returns normally, or ``nonsense``."""
        if not self.hit(hook, bad):
            return normal
        if self.failure == "raises":
            raise ValueError(f"{hook} failed on the poison")
        if self.failure == "hangs":
            if self.calls == 1:
                time.sleep(LIMIT * 1.5)
            return normal
        return nonsense

    async def async_(self, hook: str, bad: bool, nonsense: Any = None) -> Any:
        if not self.hit(hook, bad):
            return None
        if self.failure == "raises":
            raise ValueError(f"{hook} failed on the poison")
        if self.failure == "hangs":
            await anyio.sleep_forever()
        return nonsense


def is_poison(value: Any) -> bool:
    return isinstance(value, dict) and value.get("poison", False)


@dataclass
class Run:
    """What one run left."""

    outputs: dict[str, list[Any]] = field(default_factory=dict)
    letters: Counter[str] = field(default_factory=Counter)  # reason -> letters of the bad stream
    other_letters: int = 0  # letters of the good stream (none, ever)
    counted: dict[str, int] = field(default_factory=dict)  # events accounted per stream
    warnings: list[str] = field(default_factory=list)
    tracebacks: int = 0
    alive: bool = False


def consumer_type(shape: str, fault: Fault, outputs: dict[str, list[Any]]) -> type:
    class Counting:  # a custom aggregate: counts the events (its add may fail)
        def init(self) -> int:
            return 0

        def add(self, acc: int, value: Any) -> Any:
            counted = acc + 1 if value["n"] is not None else acc  # a value select did not make fails here
            return fault.sync("aggregate", is_poison(value), None, counted)  # None: a forgotten return

        def merge(self, a: int, b: int) -> int:
            return a + b

        def result(self, acc: int) -> int:
            return acc

    def timestamp_by(event: Any) -> Any:
        value = event.value
        return fault.sync("timestamp_by", is_poison(value), "yesterday", value["t"])

    def group_by(event: Any) -> Any:
        value = event.value
        return fault.sync("group_by", is_poison(value), ["unhashable"], value["n"] % 2)

    def select(event: Any) -> Any:
        value = event.value
        return fault.sync("select", is_poison(value), object(), value)

    policy = OrderingPolicy(timestamp_by=timestamp_by)

    class Base:
        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key
            self.bad = stream_id.key == "bad"
            outputs.setdefault(self.key, [])
            return fault.sync("constructor", self.bad, 42, None)  # type: ignore[no-any-return]  # 42: __init__ returning a value

    if shape == "plain":

        class Plain(Base):
            async def on_next(self, batch: Any) -> Any:
                poisoned = self.bad and any(is_poison(e.value) for e in batch)
                if fault.hook == "on_error" and poisoned:
                    raise RuntimeError("on_next failed on the poison: on_error is told")
                result = await fault.async_("on_next", poisoned, nonsense=42)
                outputs[self.key].extend(e.value["n"] for e in batch)
                return result

            async def on_error(self, error: BaseException) -> Any:
                return await fault.async_("on_error", self.bad, nonsense=42)

            async def on_completed(self) -> Any:
                result = await fault.async_("on_completed", self.bad, nonsense=42)
                outputs[self.key].append("completed")
                return result

        return Plain

    if shape == "events":

        class Events(Base):
            event_time = EventTime(policy)

            async def on_events(self, outcomes: Any) -> Any:
                poisoned = self.bad and any(is_poison(o.record.value) for o in outcomes)
                result = await fault.async_("on_events", poisoned, nonsense=42)
                outputs[self.key].extend(o.record.value["n"] for o in outcomes)
                return result

        return Events

    class Windowed(Base):
        event_time = EventTime(policy, Tumbling(10, origin=T0), Counting(), group_by=group_by, select=select)

        async def on_window(self, result: Any) -> Any:
            poisoned = self.bad and result.start == T0 and result.key == POISON % 2
            outcome = await fault.async_("on_window", poisoned, nonsense=42)
            outputs[self.key].append((result.key, result.start - T0, result.value))
            return outcome

        async def on_watermark(self, watermark: float) -> Any:
            first = self.bad and math.isfinite(watermark) and watermark < T0 + BATCH  # the first batch's
            return await fault.async_("on_watermark", first, nonsense=42)

    return Windowed


def events(bad: bool) -> list[dict[str, Any]]:
    return [{"n": n, "t": T0 + n, **({"poison": True} if bad and n == POISON else {})} for n in range(EVENTS)]


async def run(provider: StreamProvider, hook: str | None, failure: str, caplog: Any, shape: str | None = None) -> Run:
    """Run the scenario on ``provider`` (``hook`` None: nothing fails, with a consumer of
    ``shape``) and say what it left."""
    fault = Fault(hook or "", failure)
    found = Run()
    cls = consumer_type(shape or HOOKS[hook or "on_window"], fault, found.outputs)
    provider.implicit("ns")(cls)
    with caplog.at_level(logging.INFO, logger="headrace"):
        async with provider:
            for key in ("bad", "good"):
                stream = provider.get_stream(StreamId("ns", key))
                values = events(key == "bad")
                for start in range(0, EVENTS, BATCH):
                    await stream.on_next_batch(values[start : start + BATCH])
                await stream.on_completed()
            with anyio.fail_after(30):
                await provider.drain()
            letters = await provider.dead_letters.list(limit=1000)
            # still alive: a stream published now is consumed
            after = provider.get_stream(StreamId("ns", "after"))
            await after.on_next_batch(events(False)[:BATCH])
            await after.on_completed()
            with anyio.fail_after(30):
                await provider.drain()
            found.alive = bool(found.outputs.get("after")) and all(provider_agent_running(a) for a in provider.agents)
    for letter in letters:
        if letter.stream == "ns/bad":
            found.letters[letter.reason] += 1
        else:
            found.other_letters += 1
    found.warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    found.tracebacks = sum(1 for r in caplog.records if r.exc_info)
    for key in ("good", "bad"):
        found.counted[key] = accounted(found.outputs.get(key, []), [x for x in letters if x.stream == f"ns/{key}"])
    return found


def provider_agent_running(agent: Any) -> bool:
    return agent._tg is not None  # noqa: SLF001 - the agent's task group runs while it does


def accounted(output: list[Any], letters: list[Any]) -> int:
    """Events accounted for: counted into windows (delivered, or in a window_failed letter),
    delivered, or in one event letter each."""
    total = 0
    for item in output:
        if isinstance(item, tuple):
            total += item[2] if isinstance(item[2], int) else 0
        elif isinstance(item, int):
            total += 1
    for letter in letters:
        if letter.reason == "window_failed":
            total += letter.value["value"]
        else:
            total += 1
    return total
