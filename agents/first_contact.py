"""The first contact of new streams, read together.

A queue read that brings a worker many streams it does not serve yet (a fleet coming online,
a replay of a day of devices) would cost a pub-sub read and a state lookup a stream. The
catalog reads both for all of the read's new streams at once, in one query each, and each
activation then takes its part from here; a stream or key not read together (a timer waking
one stream, an activation keyed across namespaces) is read alone, as before. What an
activation asks of its consumer type (its name, whether it has durable state, the
namespaces it reads) is asked once a type (:class:`ConsumerTypes`), not once a stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager

from agents.checkpoint import StateKey
from agents.counters import FateCounts, Tally
from agents.registry import ConsumerRegistry
from streams.adapters.protocols import StateLookup
from streams.core.ids import SequenceToken, StreamId
from streams.core.pubsub import PubSubStore, SubscriptionRecord
from streams.core.state import is_stateful

Saved = tuple[SequenceToken, bytes]


class TypeFacts:
    """What an activation asks of its consumer type, asked once a type.

    >>> facts = TypeFacts("app.Meter", int, ())
    >>> facts.name, facts.stateful, facts.subscription_id
    ('app.Meter', False, 'implicit:app.Meter')
    """

    __slots__ = ("name", "registered", "stateful", "namespaces", "subscription_id", "tally")

    def __init__(self, registered: str | None, cls: type, namespaces: tuple[str, ...]) -> None:
        self.registered = registered  # its registered name (None: not registered)
        self.name = registered or cls.__qualname__  # its saved states' and counters' name
        self.stateful = is_stateful(cls)  # durable fields or timers
        self.namespaces = namespaces  # fed by several namespaces: one activation per key
        self.subscription_id = f"implicit:{registered}"  # of its implicit activations
        self.tally: Tally | None = None  # its consumers' events out, once one is attached


class ConsumerTypes:
    """The :class:`TypeFacts` of the consumer types activated on one queue: a registered
    type's are asked once (its name and namespaces stay as registered); one not registered
    (yet) is asked again at each activation."""

    __slots__ = ("_registry", "_fates", "_known")

    def __init__(self, registry: ConsumerRegistry, fates: FateCounts) -> None:
        self._registry = registry
        self._fates = fates  # where the consumers of each type count their events out
        self._known: dict[type, TypeFacts] = {}

    def of(self, cls: type) -> TypeFacts:
        facts = self._known.get(cls)
        if facts is None:
            registry = self._registry
            facts = TypeFacts(registry.type_name(cls), cls, registry.namespaces_of(cls))
            if facts.registered is not None:
                self._known[cls] = facts
        return facts

    def tally(self, cls: type | None) -> Tally:
        """What the consumers of ``cls`` count their events out in (``FateCounts.tally``)."""
        if cls is None:
            return self._fates.tally(None)
        facts = self.of(cls)
        if facts.tally is None:
            facts.tally = self._fates.tally(facts.registered)
        return facts.tally


class FirstContact:
    """The subscriptions (by stream) and saved durable states (by key; None: none saved) of
    the new streams of the read being taken in. Each is taken once, as used."""

    __slots__ = ("_registry", "_types", "_pubsub", "subscriptions", "states")

    def __init__(self, registry: ConsumerRegistry, types: ConsumerTypes, pubsub: PubSubStore) -> None:
        self._registry = registry
        self._types = types
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
        facts = [self._types.of(cls) for cls in self._registry.implicit_types(namespace)]
        return [f.name for f in facts if f.stateful and not f.namespaces]
