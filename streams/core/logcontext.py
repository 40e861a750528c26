"""The logging context: the worker, queue and stream that records logged here are about.

A context variable, so it follows the code into the tasks and worker threads it starts.
:class:`streams.runtime.logs.LogContextFilter` reads it; the runtime sets it around
every delivery (:data:`LOG_CONTEXT`, to a stream's :class:`DeliveryFields`), so any logger a
consumer uses names them.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from streams.core.errors import ConfigurationError
from streams.core.ids import QueueId, StreamId

FIELDS = ("worker", "queue", "stream")

LOG_CONTEXT: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "headrace_log_context",
    default=MappingProxyType({}),  # read-only: never mutated in place
)
"""The log fields in force. The delivery path sets a stream's :class:`DeliveryFields` here
directly (``LOG_CONTEXT.set(fields)``, ``LOG_CONTEXT.reset(token)``: a call into C, once per
batch), all of them at once, with none of :func:`log_context`'s merging or checking."""


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Name the worker, queue or stream of every record logged inside the block (and in
    the tasks and worker threads started from it).

    >>> with log_context(worker="w1", stream=StreamId("tolls", "plaza-1")):
    ...     pass
    """
    check_fields(fields)
    token = LOG_CONTEXT.set({**LOG_CONTEXT.get(), **fields})
    try:
        yield
    finally:
        LOG_CONTEXT.reset(token)


class DeliveryFields(Mapping[str, Any]):
    """``worker``, ``queue`` and ``stream`` as a read-only mapping: three slots where a dict
    was three times the size. A worker keeps one per active stream: the stream's
    ``agents.catalog.StreamState`` is one.

    >>> fields = DeliveryFields("w1", QueueId(2), StreamId("ns", "k"))
    >>> dict(fields) == {"worker": "w1", "queue": QueueId(2), "stream": StreamId("ns", "k")}
    True
    >>> fields["queue"], fields.get("other"), len(fields)
    (QueueId(number=2), None, 3)
    """

    __slots__ = ("worker", "queue", "stream")

    def __init__(self, worker: str | None, queue: QueueId, stream: StreamId) -> None:
        self.worker = worker
        self.queue = queue
        self.stream = stream

    def __getitem__(self, name: str) -> Any:
        if name == "worker":
            return self.worker
        if name == "queue":
            return self.queue
        if name == "stream":
            return self.stream
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(FIELDS)

    def __len__(self) -> int:
        return len(FIELDS)


def current_fields() -> Mapping[str, Any]:
    """The fields set by the innermost :func:`log_context` or delivery here."""
    return LOG_CONTEXT.get()


def check_fields(fields: Mapping[str, Any]) -> None:
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise ConfigurationError(f"the log fields are {', '.join(FIELDS)}, not {unknown[0]!r}")
