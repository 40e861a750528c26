"""An event-time activation's saved unit: its windows, held events, durable fields and timers.

With a store that saves states with the checkpoint (the embedded store's transaction, Kafka's
changelog, the harness's memory queues), an activation's open windows do not hold the
checkpoint: a snapshot of them does, taken at a checkpoint and restored before the first
event after a restart or a move (the events it reflects are skipped). Without one, the
checkpoint is held at the oldest event still in an open window and a restart rebuilds the
windows from the queue. A type with durable fields or timers (``streams.core.state``), or
whose events wait for the watermark (a windowless handoff, a merge of several inputs), is
saved as one unit with its windows. A parked activation is this unit, kept compactly or only
in the store, until its stream has data again.
"""

from __future__ import annotations

from agents.durable import warn_not_saved
from agents.event_time_emitter import EventTimeEmitter
from streams.core.ids import SequenceToken, lowest
from streams.core.state import pack_unit, unpack_unit
from streams.eventtime.snapshot import can_snapshot, held_snapshot, is_empty, restore_held


class EventTimeUnit(EventTimeEmitter):
    """Saving and restoring an event-time activation, and what it holds of the checkpoint
    meanwhile (see the module)."""

    __slots__ = ()

    def next_tick(self) -> float | None:
        """When a tick would next change it (the activation's; see ``EventTimeObserver``)."""
        raise NotImplementedError

    def stepping(self) -> bool:
        """In a step (its state may be half emitted): no snapshot now."""
        return self._lock.locked() or self._emitting is not None

    def checkpoint_hold(self) -> SequenceToken | None:
        """The oldest queue position this activation still needs (None: none)."""
        return lowest(lowest(self._held(), self._emitting), self._unfinished)

    def holding(self) -> tuple[str, str | None]:
        """Why it holds :meth:`checkpoint_hold` (``headrace status``), and with several
        inputs, the input whose event is held there (None: not one input's)."""
        hold = self.checkpoint_hold()
        at = None if hold is None else (hold.sequence_number, hold.event_index)
        oldest = None if self._merge is None else self._merge.oldest_input()
        input_name, why = (str(oldest[0]), oldest[2]) if oldest is not None and oldest[1] == at else (None, None)
        saved = lowest(self._since_snapshot, self._saving) if self.snapshots else None
        for token, because in (
            (self._emitting, "an emit in flight"),
            (self._unfinished, "an emit that did not finish"),
            (saved, "events since its last save"),
        ):
            if token is not None and token == hold:
                return because, input_name
        return why or ("held events" if self._release else "open windows"), input_name

    def enable_snapshots(self) -> bool:
        """The store saves states with the checkpoint: snapshot this activation if its kind
        of state can be (True when it will)."""
        # A merge whose imported input's event in force must be replayed (the user's own
        # fields, not saved, rebuild from it) keeps holding the checkpoint instead.
        self.snapshots = (self._merge is None or not self._merge.references) and can_snapshot(self.processor)
        if self._unit and not self.snapshots:
            warn_not_saved(type(self.target), "a merge with an imported input, whose event in force is replayed")
        return self.snapshots

    def begin_snapshot(self) -> tuple[SequenceToken | None, bytes | None]:
        """``(last event taken, state)`` to save (state None: empty, delete it); the hold
        of what it covers stays until :meth:`end_snapshot`. Raises ``SnapshotError``
        (snapshots then stay off for this activation)."""
        held = self._held_events()
        unit = self._durable or held is not None  # fields, timers, held events: with the watermarks
        try:
            state = self.processor.snapshot() if unit or not is_empty(self.processor) else None
        except Exception:
            self.snapshots = False
            raise
        if unit:  # (StateError: it holds, and tries again at the next checkpoint)
            state = pack_unit(self.target, state, self.timers, held)
        self._save_begun(state is not None)
        return self._taken, state

    def restore(self, position: SequenceToken, state: bytes) -> None:
        """Resume from a saved snapshot: events at or below ``position`` are in it."""
        windows: bytes | None = state
        held = None
        if self._unit:
            windows, held = unpack_unit(self.target, state, self.timers)
        if windows is not None:
            self.processor.restore(windows)
        holding = self._release if self._release is not None else self._merge
        if held is not None and holding is not None:
            restore_held(holding, held)
        if self._join_left is not None:  # every left event up to here is emitted, or held in the state
            self._join_seen = (position.sequence_number, position.event_index)
        self._skip_to = self._taken = position
        if self._user_watermark is not None:
            self._last_watermark = self.processor.watermark
        self.stored = True
        self._changed()

    def has_state(self) -> bool:
        return self._durable or not is_empty(self.processor) or bool(self._release) or bool(self._merge)

    def _held_events(self) -> bytes | None:
        """The events a windowless activation holds for the watermark (of one input for a
        handoff, or of several), as saved (None: none)."""
        holding = self._release if self._release is not None else self._merge
        return held_snapshot(holding) if holding else None

    def can_park(self) -> bool:
        """Whether it can be deactivated with its windows open: the store has its state as
        it stands (nothing taken or ticked since the last saved snapshot, nothing being
        emitted or written) and no tick would change it, so its stream's next data can
        restore it from that state (:meth:`park`) with nothing lost or counted twice."""
        return (
            self.snapshots
            and self.stored
            and not self.unsaved
            and self._saving is None
            and self._taken is not None
            and self._unfinished is None
            and not self.stepping()
            and self.next_tick() is None
        )

    def park(self) -> tuple[SequenceToken, bytes]:
        """``(last event taken, state)``: what :meth:`restore` resumes from (see
        :meth:`can_park`); the same state as the stored snapshot, kept compact in memory."""
        assert self._taken is not None
        if not self._unit:
            return self._taken, self.processor.snapshot()
        return self._taken, pack_unit(self.target, self.processor.snapshot(), self.timers, self._held_events())

    def _held(self) -> SequenceToken | None:
        # With no snapshot saved or being saved, a restart rebuilds the windows from the
        # queue (held at their oldest event); with one, it restores it and replays what
        # came after (held at the first event it does not have).
        if not self.stored and self._saving is None:
            return self._window_held()
        own = lowest(self._since_snapshot, self._saving)
        return own if self.snapshots else lowest(own, self._window_held())

    def _window_held(self) -> SequenceToken | None:
        token = self.processor.held_since()
        token = token if isinstance(token, SequenceToken) else None
        oldest = self._release.oldest() if self._release is not None else None
        if self._merge is not None:
            oldest = self._merge.oldest()
        return lowest(token, SequenceToken(*oldest) if oldest is not None else None)
