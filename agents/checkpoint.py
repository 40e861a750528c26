"""What a queue's checkpoint waits for, kept proportional to the work at hand.

A pulling agent acknowledges to its queue only the positions nobody needs any more: not a
cursor in the cache or reading history, and not an event-time activation whose open windows
(or events held for a handoff, or a step still being emitted) hold the checkpoint.
:class:`Holds` keeps the activations' holds, and the time each one's next tick is due, in
heaps updated as activations step, so neither an acknowledgement nor a timer walks a hundred
thousand quiet activations. :func:`acknowledgeable` and :class:`Tokens` turn the positions
read into what the receiver is told.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import overload

from agents.activation import TimedActivation
from agents.keyed_heap import KeyedMinHeap
from agents.state import ActivationStates
from streams.core.tokens import SequenceToken


class Holds:
    """The checkpoint holds and next ticks of a queue's event-time activations.

    An activation calls :attr:`on_change` with itself after each step (its hold and next
    tick may have moved); the heaps are brought up to date at the next :meth:`refresh`.

    >>> holds = Holds()
    >>> holds.oldest(), holds.due(now=1e12)
    (None, [])
    """

    __slots__ = ("_changed", "on_change", "_holds", "_ticks", "states")

    def __init__(self) -> None:
        self._changed: set[TimedActivation] = set()  # stepped since last looked at
        self.on_change = self._changed.add  # one bound method for every activation
        self._holds: KeyedMinHeap[TimedActivation] = KeyedMinHeap()
        self._ticks: KeyedMinHeap[TimedActivation] = KeyedMinHeap()
        self.states: ActivationStates | None = None  # told of the steps, when states are saved

    def refresh(self) -> None:
        """Bring the holds and next ticks of the activations that stepped up to date."""
        changed, holds, ticks, states = self._changed, self._holds, self._ticks, self.states
        while changed:
            activation = changed.pop()
            hold = activation.checkpoint_hold()
            holds.set(activation, None if hold is None else hold.sequence_number)
            if states is not None:
                states.changed(activation)
            ticks.set(activation, activation.next_tick())

    def oldest(self) -> float | None:
        """The oldest queue position an activation holds (None: none)."""
        self.refresh()
        return self._holds.min()

    def due(self, now: float) -> list[TimedActivation]:
        """The activations whose next tick is due at wall-clock ``now`` (each then has no
        tick due until it steps again)."""
        self.refresh()
        return self._ticks.pop_until(now)

    def holds(self, activation: TimedActivation) -> bool:
        """Whether ``activation`` holds the checkpoint (as of the last refresh)."""
        return activation in self._holds

    def drop(self, activation: TimedActivation) -> None:
        """The activation ended: it holds and ticks no more."""
        self._changed.discard(activation)
        self._holds.discard(activation)
        self._ticks.discard(activation)


def acknowledgeable(unacked: deque[int], point: float) -> list[int]:
    """Take from ``unacked`` (positions read, in order) those below ``point``, the oldest
    position still needed.

    >>> read = deque([3, 4, 7])
    >>> acknowledgeable(read, 5), read
    ([3, 4], deque([7]))
    """
    if not unacked:
        return []
    if point > unacked[-1]:  # all of it: the usual case once consumers have caught up
        done = list(unacked)
        unacked.clear()
        return done
    done = []
    while unacked[0] < point:
        done.append(unacked.popleft())
    return done


class Tokens(Sequence[SequenceToken]):
    """Acknowledged queue positions as tokens, each made when the receiver reads it.

    A read can acknowledge thousands of records; a list of as many token objects, alive
    until the call returns, cost more than making them (in garbage collections), and some
    receivers only count them or read the last.

    >>> Tokens([3, 4])[-1], len(Tokens([3, 4]))
    (SequenceToken(sequence_number=4, event_index=0), 2)
    """

    __slots__ = ("_numbers",)

    def __init__(self, numbers: list[int]) -> None:
        self._numbers = numbers

    def __len__(self) -> int:
        return len(self._numbers)

    @overload
    def __getitem__(self, index: int) -> SequenceToken: ...

    @overload
    def __getitem__(self, index: slice) -> list[SequenceToken]: ...

    def __getitem__(self, index: int | slice) -> SequenceToken | list[SequenceToken]:
        if isinstance(index, slice):
            return [SequenceToken(n) for n in self._numbers[index]]
        return SequenceToken(self._numbers[index])

    def __iter__(self) -> Iterator[SequenceToken]:
        return map(SequenceToken, self._numbers)

    def __repr__(self) -> str:
        return f"Tokens({self._numbers!r})"
