"""The logging context: the worker, queue and stream that records logged here are about.

A context variable, so it follows the code into the tasks and worker threads it starts.
:class:`streams.runtime.logs.LogContextFilter` reads it; the runtime sets it around
every delivery (:func:`enter_fields`), so any logger a consumer uses names them.
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

_context: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "headrace_log_context",
    default=MappingProxyType({}),  # read-only: never mutated in place
)


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Name the worker, queue or stream of every record logged inside the block (and in
    the tasks and worker threads started from it).

    >>> with log_context(worker="w1", stream=StreamId("tolls", "plaza-1")):
    ...     pass
    """
    check_fields(fields)
    token = _context.set({**_context.get(), **fields})
    try:
        yield
    finally:
        _context.reset(token)


class DeliveryFields(Mapping[str, Any]):
    """``worker``, ``queue`` and ``stream`` as a read-only mapping: three slots where a dict
    was three times the size, and a worker keeps one per active stream.

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


def delivery_fields(worker: str | None, queue: QueueId, stream: StreamId) -> Mapping[str, Any]:
    """The fields of every record logged while a batch of ``stream`` is delivered: made once
    per stream, entered around each delivery with :func:`enter_fields`."""
    return DeliveryFields(worker, queue, stream)


def enter_fields(fields: Mapping[str, Any]) -> contextvars.Token[Mapping[str, Any]]:
    """Make ``fields`` (worker, queue and stream: all of them) the log context until
    :func:`leave_fields`: what :func:`log_context` does, without merging or checking, for
    the delivery path, where it runs once per batch.

    >>> token = enter_fields(delivery_fields("w1", QueueId(2), StreamId("ns", "k")))
    >>> leave_fields(token)
    """
    return _context.set(fields)


def leave_fields(token: contextvars.Token[Mapping[str, Any]]) -> None:
    _context.reset(token)


def current_fields() -> Mapping[str, Any]:
    """The fields set by the innermost :func:`log_context` or :func:`enter_fields` here."""
    return _context.get()


def check_fields(fields: Mapping[str, Any]) -> None:
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise ConfigurationError(f"the log fields are {', '.join(FIELDS)}, not {unknown[0]!r}")
