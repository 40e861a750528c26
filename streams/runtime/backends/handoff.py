"""A worker's handoff sinks: one per Spark handoff stream that its consumer types declare,
opened by its backend."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import spark_sink
from streams.runtime.backends.base import Backend


async def open_handoff_sinks(
    backend: Backend, consumer_types: Iterable[type], stack: contextlib.AsyncExitStack
) -> dict[str, spark_sink.HandoffSink]:
    """handoff stream name -> its sink, for every consumer type that declares a handoff
    (checked against its ``event_time``); each sink is closed when ``stack`` is.

    >>> import anyio
    >>> from streams.runtime.backends.memory import MemoryBackend
    >>> async def none_declared():
    ...     async with contextlib.AsyncExitStack() as stack:
    ...         return await open_handoff_sinks(MemoryBackend.open(), [int, str], stack)
    >>> anyio.run(none_declared)
    {}
    """
    types = list(consumer_types)
    if not any(hasattr(cls, "handoff") for cls in types):
        return {}  # nothing hands off: do not load Spark's side (pyspark, pyarrow) at all
    sinks: dict[str, spark_sink.HandoffSink] = {}
    for cls in types:
        handoff = spark_sink.handoff_of(cls)
        if handoff is None:
            continue
        spark_sink.check_handoff(cls, handoff)
        if handoff.stream in sinks:
            continue
        sink = await backend.open_handoff_sink(cls.__qualname__, handoff)
        stack.push_async_callback(sink.close)
        sinks[handoff.stream] = sink
    return sinks
