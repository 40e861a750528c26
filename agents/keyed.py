"""Activations shared by the streams of one key (Orleans: a grain implicitly subscribed to
several namespaces).

A consumer type registered with ``@provider.implicit("tolls", "prices")`` has one activation
per key on a queue, attached to ``tolls/<key>`` and ``prices/<key>`` alike. The agent keeps
its usual per-stream tables and asks this one for the activation of a (type, key); an
activation is deactivated when the last of its streams closes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from streams.ids import StreamId


class _Shared:
    __slots__ = ("observer", "instance", "streams")

    def __init__(self, observer: Any, instance: Any) -> None:
        self.observer = observer
        self.instance = instance
        self.streams: set[StreamId] = set()


class KeyedActivations:
    """The activations of multi-namespace consumer types, by (type, key).

    >>> table = KeyedActivations()
    >>> table.add(dict, StreamId("tolls", "k"), "observer", "instance")
    >>> table.join(dict, StreamId("prices", "k"))
    'observer'
    >>> table.leave(StreamId("tolls", "k")), table.leave(StreamId("prices", "k"))
    ([], ['instance'])
    """

    def __init__(self) -> None:
        self._by_key: dict[tuple[type, str], _Shared] = {}
        self._types_of: dict[StreamId, list[type]] = {}

    def join(self, cls: type, sid: StreamId) -> Any:
        """The observer of ``cls``'s activation for ``sid``'s key, now also fed by ``sid``;
        None when there is none yet."""
        shared = self._by_key.get((cls, sid.key))
        if shared is None:
            return None
        self._note(shared, cls, sid)
        return shared.observer

    def add(self, cls: type, sid: StreamId, observer: Any, instance: Any) -> None:
        """A new activation of ``cls`` for ``sid``'s key."""
        shared = self._by_key[(cls, sid.key)] = _Shared(observer, instance)
        self._note(shared, cls, sid)

    def _note(self, shared: _Shared, cls: type, sid: StreamId) -> None:
        if sid not in shared.streams:
            shared.streams.add(sid)
            self._types_of.setdefault(sid, []).append(cls)

    def leave(self, sid: StreamId) -> list[Any]:
        """``sid`` closed: the instances whose last stream it was (to deactivate)."""
        ended = []
        for cls in self._types_of.pop(sid, ()):
            shared = self._by_key[(cls, sid.key)]
            shared.streams.discard(sid)
            if not shared.streams:
                del self._by_key[(cls, sid.key)]
                ended.append(shared.instance)
        return ended


def one_turn(on_next: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Awaitable[None]]:
    """``on_next`` made to take one batch at a time: an activation fed by several streams
    (each delivered by its own task) sees its batches one after another, as a grain does."""
    lock = anyio.Lock()

    async def call(batch: Any) -> None:
        async with lock:
            await on_next(batch)

    return call
