"""What a worker says as it starts: which application, which store, which consumer types.

``headrace worker`` logs these lines before it joins the cluster, so the log of every run
says what ran: the ``--app`` it imported, where its queues are, and its consumer types by
namespace. A worker with no consumer type registered reads its queues and delivers to
nothing, which is almost always a mistake (the module that registers them was not the one
imported): that is a warning.
"""

from __future__ import annotations

import logging

from streams.runtime.provider import StreamProvider

log = logging.getLogger("headrace.worker")

NO_CONSUMERS = (
    "no consumer types are registered: this worker reads its queues and delivers to nothing; "
    "register them with @provider.implicit(...) in the module --app imports"
)


def startup_lines(provider: StreamProvider, app: str) -> list[tuple[int, str]]:
    """``(level, message)`` of each start-up line.

    >>> provider = StreamProvider.memory(queues=2)
    >>> @provider.implicit("sensors")
    ... class Average:
    ...     def __init__(self, stream_id): ...
    ...     def on_next(self, batch): ...
    >>> for level, line in startup_lines(provider, "myapp:provider"):
    ...     print(logging.getLevelName(level), line)
    INFO app myapp:provider: memory queues (2), no local store
    INFO consumer types: sensors: Average
    """
    kind = type(provider.backend).__name__.removesuffix("Backend").lower() or "custom"
    queues = len(provider.mapper.get_all_queues())
    where = f"store {provider.store.path.resolve()}" if provider.store is not None else "no local store"
    lines = [(logging.INFO, f"app {app}: {kind} queues ({queues}), {where}")]
    registry = provider.registry
    by_namespace = [
        f"{namespace}: {', '.join(cls.__qualname__ for cls in registry.implicit_types(namespace))}"
        for namespace in registry.implicit_namespaces()
    ]
    implicit = {cls for namespace in registry.implicit_namespaces() for cls in registry.implicit_types(namespace)}
    durable = [cls.__qualname__ for cls in registry.types() if cls not in implicit]
    if durable:
        by_namespace.append(f"for subscriptions: {', '.join(durable)}")
    if by_namespace:
        lines.append((logging.INFO, f"consumer types: {'; '.join(by_namespace)}"))
    else:
        lines.append((logging.WARNING, NO_CONSUMERS))
    return lines


def log_startup(provider: StreamProvider, app: str) -> None:
    """Log :func:`startup_lines` (the metrics address is logged as its server binds)."""
    for level, line in startup_lines(provider, app):
        log.log(level, "%s: %s", provider.worker_name, line)
