"""Who consumes what: implicit consumer types per namespace, named consumer types for
durable explicit subscriptions, and in-process observers per stream."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from streams.core.errors import ConfigurationError
from streams.core.ids import SequenceToken, StreamId
from streams.core.observer import EventFilter
from streams.eventtime.spec import EventTime

T = TypeVar("T", bound=type)


@dataclass(frozen=True, slots=True)
class InProcessSubscription:
    subscription_id: str
    stream_id: StreamId
    observer: Any
    token: SequenceToken | None
    filter: EventFilter | None = None  # which events it delivers (None: all)


class ConsumerRegistry:
    """The provider's table of consumers; agents consult it when a stream becomes active."""

    def __init__(self) -> None:
        self._implicit: dict[str, list[type]] = {}
        self._types: dict[str, type] = {}
        self._namespaces: dict[type, tuple[str, ...]] = {}  # types fed by several namespaces
        self._observers: dict[StreamId, dict[str, InProcessSubscription]] = {}

    # -- consumer types -------------------------------------------------------------
    def register_type(self, cls: type, name: str | None = None) -> str:
        name = name or f"{cls.__module__}.{cls.__qualname__}"
        known = self._types.get(name)
        if known is not None and known is not cls:
            raise ConfigurationError(f"consumer type name {name!r} is already registered")
        spec = getattr(cls, "event_time", None)
        if isinstance(spec, EventTime):
            spec.check_consumer(cls)
        elif not callable(getattr(cls, "on_next", None)):
            raise ConfigurationError(
                f"consumer type {cls.__qualname__} needs an on_next(batch) method, or an "
                "event_time = EventTime(...) declaration with on_window(result)"
            )
        check_constructor(cls)
        self._types[name] = cls
        cls.__headrace_consumer_name__ = name  # type: ignore[attr-defined]
        return name

    def register_implicit(self, namespace: str, cls: type) -> None:
        self.register_type(cls)
        types = self._implicit.setdefault(namespace, [])
        if cls not in types:
            types.append(cls)

    def register_keyed(self, namespaces: tuple[str, ...], cls: type) -> None:
        """``cls`` is activated once per key over all of ``namespaces`` (see
        :meth:`namespaces_of`)."""
        known = self._namespaces.get(cls)
        if known is not None and known != namespaces:
            raise ConfigurationError(
                f"{cls.__qualname__} is already implicit for {known!r}: register it once, with every namespace it reads"
            )
        check_inputs(cls, namespaces)
        for namespace in namespaces:
            self.register_implicit(namespace, cls)
        self._namespaces[cls] = namespaces

    def has_keyed(self) -> bool:
        """Some type is fed by several namespaces (one activation per key over them)."""
        return bool(self._namespaces)

    def namespaces_of(self, cls: type) -> tuple[str, ...]:
        """The namespaces a type reads with one activation per key (empty: one per stream)."""
        return self._namespaces.get(cls, ())

    def type_name(self, cls: type) -> str | None:
        name = getattr(cls, "__headrace_consumer_name__", None)
        return name if name is not None and self._types.get(name) is cls else None

    def get_type(self, name: str) -> type:
        try:
            return self._types[name]
        except KeyError:
            raise ConfigurationError(
                f"consumer type {name!r} is not registered in this process; register it with "
                "@provider.consumer() before starting the worker"
            ) from None

    def types(self) -> list[type]:
        """Every registered consumer type."""
        return list(self._types.values())

    def implicit_types(self, namespace: str) -> list[type]:
        return self._implicit.get(namespace, [])

    def implicit_namespaces(self) -> list[str]:
        """The namespaces with implicit consumer types, in order of registration."""
        return list(self._implicit)

    # -- in-process observers -------------------------------------------------------
    def add_observer(self, subscription: InProcessSubscription) -> None:
        self._observers.setdefault(subscription.stream_id, {})[subscription.subscription_id] = subscription

    def remove_observer(self, stream_id: StreamId, subscription_id: str) -> bool:
        subs = self._observers.get(stream_id)
        if not subs or subscription_id not in subs:
            return False
        del subs[subscription_id]
        if not subs:
            del self._observers[stream_id]
        return True

    def observers(self, stream_id: StreamId) -> list[InProcessSubscription]:
        subscriptions = self._observers.get(stream_id) if self._observers else None
        return [] if subscriptions is None else list(subscriptions.values())


def check_constructor(cls: type) -> None:
    """Refuse a consumer type that cannot be built as ``cls(stream_id)`` (the commonest slip:
    ``def __init__(self):``), before a worker meets it on every batch.

    >>> class Totals:
    ...     def __init__(self): self.n = 0
    >>> check_constructor(Totals)
    Traceback (most recent call last):
    ...
    streams.core.errors.ConfigurationError: consumer type Totals cannot be built for a stream: its constructor must take the stream id, def __init__(self, stream_id)
    """
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # a type Python cannot describe (a builtin's): let it try
        return
    try:
        signature.bind(None)
    except TypeError:
        raise ConfigurationError(
            f"consumer type {cls.__qualname__} cannot be built for a stream: its constructor "
            "must take the stream id, def __init__(self, stream_id)"
        ) from None


def check_inputs(cls: type, namespaces: tuple[str, ...]) -> None:
    """Refuse an event-time type whose merged ``inputs`` are not the namespaces it reads."""
    spec = getattr(cls, "event_time", None)
    if not isinstance(spec, EventTime):
        return
    if len(namespaces) > 1 and set(spec.inputs) != set(namespaces):
        raise ConfigurationError(
            f"{cls.__qualname__} reads {namespaces!r} with one clock: declare them as its "
            f"event-time inputs, EventTime(..., inputs={namespaces!r})"
        )
    if len(namespaces) == 1 and spec.inputs:
        raise ConfigurationError(
            f"{cls.__qualname__} merges inputs {spec.inputs!r}: register it for all of them, "
            f"@provider.implicit({', '.join(map(repr, spec.inputs))})"
        )


def consumer_decorator(registry: ConsumerRegistry, name: str | None) -> Callable[[T], T]:
    def decorate(cls: T) -> T:
        spec = getattr(cls, "event_time", None)
        if isinstance(spec, EventTime) and spec.inputs:  # activated per key, not per stream
            raise ConfigurationError(
                f"{cls.__qualname__} merges inputs {spec.inputs!r}, one activation per key: register "
                f"it with @provider.implicit({', '.join(map(repr, spec.inputs))}), not for subscriptions"
            )
        registry.register_type(cls, name)
        return cls

    return decorate
