"""The event-time state of a queue's activations, saved with the queue's checkpoint.

An activation whose processor can be serialized (:mod:`streams.eventtime.snapshot`) does not
hold the checkpoint for its open windows: it holds it only at the first event it took since
its last saved snapshot. When the receiver persists a checkpoint it asks
:meth:`ActivationStates.collect` for the snapshots of the activations that stepped since, and
writes them in the same transaction (:class:`streams.eventtime.snapshot.StateRows`); once
written, those holds go. An activation in the middle of a step is left for the next
checkpoint (its hold stays). One whose state is empty has its snapshot deleted, so the
stored state stays proportional to what is open.

>>> states = ActivationStates(lambda activation: ("Counter", "ns/k"))
>>> states.pending(), states.collect()
(False, ([], []))
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from agents.activation import TimedActivation
from streams.eventtime.snapshot import SnapshotError

log = logging.getLogger(__name__)

StateKey = tuple[str, str]  # (consumer type name, stream id)
Upsert = tuple[str, str, int, int, bytes]  # key, position of the last event taken, state


class ActivationStates:
    """Which activations stepped since their last saved snapshot, and what is being written."""

    def __init__(self, key_of: Callable[[TimedActivation], StateKey]) -> None:
        self._key_of = key_of
        self._dirty: set[TimedActivation] = set()
        self._retired: list[StateKey] = []
        self._writing: list[TimedActivation] = []
        self._deleting: list[StateKey] = []

    def changed(self, activation: TimedActivation) -> None:
        if activation.snapshots and activation.unsaved:
            self._dirty.add(activation)

    def retire(self, activation: TimedActivation) -> None:
        """The activation ends (its stream was swept as quiet): its snapshot goes."""
        self._dirty.discard(activation)
        if activation.stored or activation in self._writing:
            self._retired.append(self._key_of(activation))

    def pending(self) -> bool:
        return bool(self._dirty or self._retired)

    def collect(self) -> tuple[list[Upsert], list[StateKey]]:
        """The snapshots to write with the next checkpoint, and the keys to delete."""
        upserts: list[Upsert] = []
        deletes, self._retired = self._retired, []
        self._deleting = list(deletes)
        keep: set[TimedActivation] = set()
        for activation in self._dirty:
            if activation.stepping():
                keep.add(activation)  # never mid-step: its hold stays until the next one
                continue
            try:
                position, state = activation.begin_snapshot()
            except SnapshotError as exc:
                log.warning(
                    "%s on %s: %s; its open windows hold the queue's checkpoint",
                    type(activation.target).__qualname__,
                    activation.stream_id,
                    exc,
                )
                continue
            self._writing.append(activation)
            if state is None:  # empty
                deletes.append(self._key_of(activation))
            else:
                assert position is not None
                consumer, stream = self._key_of(activation)
                upserts.append((consumer, stream, position.sequence_number, position.event_index, state))
        self._dirty = keep
        return upserts, deletes

    def written(self, ok: bool) -> None:
        """The collected snapshots were committed with the checkpoint (or were not)."""
        writing, self._writing = self._writing, []
        deleting, self._deleting = self._deleting, []
        for activation in writing:
            activation.end_snapshot(ok)
            if not ok:
                self.changed(activation)
        if not ok:
            self._retired.extend(deleting)
