"""The first contact of new streams, read together.

A queue read that brings a worker many streams it does not serve yet (a fleet coming online,
a replay of a day of devices) would cost a pub-sub read and a state lookup a stream. The
catalog reads both for all of the read's new streams at once, in one query each, and each
activation then takes its part from here; a stream or key not read together (a timer waking
one stream, an activation keyed across namespaces) is read alone, as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager

from agents.checkpoint import StateKey
from agents.registry import ConsumerRegistry
from streams.adapters.protocols import StateLookup
from streams.core.ids import SequenceToken, StreamId
from streams.core.pubsub import PubSubStore, SubscriptionRecord
from streams.core.state import is_stateful

Saved = tuple[SequenceToken, bytes]


class FirstContact:
    """The subscriptions (by stream) and saved durable states (by key; None: none saved) of
    the new streams of the read being taken in. Each is taken once, as used."""

    __slots__ = ("_registry", "_pubsub", "subscriptions", "states")

    def __init__(self, registry: ConsumerRegistry, pubsub: PubSubStore) -> None:
        self._registry = registry
        self._pubsub = pubsub
        # Read by the catalog directly (a stream's first contact outside a read pays no call).
        self.subscriptions: dict[StreamId, list[SubscriptionRecord]] = {}
        self.states: dict[StateKey, Saved | None] = {}

    @asynccontextmanager
    async def reading(self, sids: Collection[StreamId], lookup: StateLookup | None) -> AsyncIterator[None]:
        """Within: ``sids``' subscriptions and (with a ``lookup`` store) the durable states
        of their implicit types, read in one query each."""
        found = await self._pubsub.subscriptions_of(sids)
        self.subscriptions = {sid: found.get(sid, []) for sid in sids}
        keys = self._durable_keys(sids) if lookup is not None else []
        if lookup is not None and keys:
            saved = lookup.saved_states(keys)
            self.states = {key: saved.get(key) for key in keys}
        try:
            yield
        finally:
            self.subscriptions, self.states = {}, {}

    def _durable_keys(self, sids: Collection[StreamId]) -> list[StateKey]:
        """The state keys of the durable implicit activations ``sids`` would have (not of
        types fed by several namespaces, whose activations are keyed otherwise)."""
        names: dict[str, list[str]] = {}  # namespace -> its durable types' names, found once
        keys: list[StateKey] = []
        for sid in sids:
            of_namespace = names.get(sid.namespace)
            if of_namespace is None:
                of_namespace = names[sid.namespace] = self._durable_types(sid.namespace)
            if of_namespace:
                stream = str(sid)
                keys += [(name, stream) for name in of_namespace]
        return keys

    def _durable_types(self, namespace: str) -> list[str]:
        registry = self._registry
        return [
            registry.type_name(cls) or cls.__qualname__
            for cls in registry.implicit_types(namespace)
            if is_stateful(cls) and not registry.namespaces_of(cls)
        ]
