"""Deactivating the idle streams of one queue (Orleans' ``ActivationCollector``).

A stream with no new data for ``stream_inactivity_period``, nothing in flight and no open
window holding the checkpoint is deactivated: its consumers close, its activations end
(``on_deactivate``), and the next record of it activates it again. An activation whose
open windows and durable state are saved with the checkpoint goes too, its state kept
compactly, or only in the store, until its stream has data again (``Catalog.close``). A
consumer type with a state time to live (``state_ttl``) has its idle streams collected
after that time instead, and its idle states expired, in memory and in the store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from agents.catalog import Catalog, Spawn, StreamState, timed_of
from agents.checkpoint import Holds
from agents.context import AgentContext
from streams.adapters.protocols import QueueAdapterReceiver, StateLookup
from streams.core.clock import wall_time
from streams.core.ids import QueueId, StreamId

log = logging.getLogger("headrace.agent")


class ActivationCollector:
    """Collects the idle streams of one queue, at most once a period (see the module)."""

    __slots__ = (
        "_catalog",
        "_close_stream",
        "_context",
        "_holds",
        "_last_sweep",
        "_queue",
        "_receiver",
        "_spawn",
        "_streams",
    )

    def __init__(
        self,
        queue: QueueId,
        context: AgentContext,
        streams: Mapping[StreamId, StreamState],
        catalog: Catalog,
        holds: Holds,
        receiver: QueueAdapterReceiver,
        spawn: Spawn,
        close_stream: Callable[[StreamId], None],
    ) -> None:
        self._queue = queue
        self._context = context
        self._streams = streams  # kept in order of their last data: a sweep reads only the quiet ones
        self._catalog = catalog
        self._holds = holds
        self._receiver = receiver
        self._spawn = spawn
        self._close_stream = close_stream
        self._last_sweep = time.monotonic()

    def collect(self) -> None:
        """Deactivate the streams idle long enough and quiet (see the module's docstring)."""
        now = time.monotonic()
        catalog = self._catalog
        # A state's time to live is idle time too: its streams are swept once idle that long.
        inactivity = self._context.options.stream_inactivity_period
        period = min(inactivity, catalog.shortest_ttl)
        if now - self._last_sweep < min(period, 60.0):
            return
        self._last_sweep = now
        self._holds.refresh()
        quiet = []
        for sid, state in self._streams.items():
            idle = now - state.last_activity
            if idle < period:
                break
            if idle >= inactivity or idle >= catalog.idle_limit(state, inactivity):
                quiet.append((sid, state))  # a stream of no type with a ttl waits the whole period
        for sid, state in quiet:
            if state.opening is None and self._quiet(state):
                self._close_stream(sid)
        catalog.expire(now)
        receiver = self._receiver
        if isinstance(receiver, StateLookup):  # its parked durable states are only in the store
            for consumer, ttl in catalog.expiring_types():
                self._spawn(self._expire_stored, receiver, consumer, wall_time() - ttl)

    async def _expire_stored(self, receiver: StateLookup, consumer: str, before: float) -> None:
        try:
            gone = await receiver.expire_states(consumer, before)
        except Exception:  # the store is away: the next sweep tries again
            log.warning("%s: expiring the idle states of %s failed", self._queue, consumer, exc_info=True)
            return
        if gone:
            log.info("%s: %d idle state(s) of %s expired (their time to live passed)", self._queue, gone, consumer)

    def _quiet(self, state: StreamState) -> bool:
        # Loops, not all() and any() over generators: a fleet parks thousands a sweep.
        for consumer in state.consumers:
            if not consumer.idle:
                return False
        holds = self._holds
        for _, observer in state.activations:
            activation = timed_of(observer)
            if activation is not None and (
                holds.holds(activation) or (activation.has_state() and not activation.can_park())
            ):
                return False
        return True
