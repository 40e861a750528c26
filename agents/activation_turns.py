"""One step at a time per activation, costing nothing while no one waits.

An activation may be delivered to by several subscriptions, and ticked by its agent (a
window's timeout, a timer), so its steps take turns, as an Orleans grain's calls do. A lock
object with its waiter queue per activation would be most of a quiet activation's memory;
:class:`Turns` holds a flag, and makes a queue only for a caller that has to wait.
"""

from __future__ import annotations

from collections import deque
from types import TracebackType

import anyio

__all__ = ["Turns"]


class Turns:
    """An async context manager letting one caller in at a time, in arrival order.

    >>> import anyio
    >>> async def main():
    ...     turns, order = Turns(), []
    ...     async def step(name):
    ...         async with turns:
    ...             order.append(name); await anyio.sleep(0); order.append(name)
    ...     async with anyio.create_task_group() as tg:
    ...         tg.start_soon(step, "a"); tg.start_soon(step, "b")
    ...     return order
    >>> anyio.run(main)
    ['a', 'a', 'b', 'b']
    """

    __slots__ = ("_held", "_waiters")

    def __init__(self) -> None:
        self._held = False
        self._waiters: deque[anyio.Event] | None = None

    def locked(self) -> bool:
        return self._held

    def take_now(self) -> bool:
        """Take the turn without waiting, if no one holds it (True: taken; give it back with
        :meth:`give_back`): for a caller that cannot wait, as the agent delivering inline.

        >>> turns = Turns()
        >>> turns.take_now(), turns.take_now(), turns.give_back(), turns.locked()
        (True, False, None, False)
        """
        if self._held:
            return False
        self._held = True
        return True

    def give_back(self) -> None:
        """End a turn :meth:`take_now` took: the next waiter, if any, goes on."""
        waiters = self._waiters
        if waiters:
            waiters.popleft().set()
        else:
            self._held = False
            self._waiters = None

    async def __aenter__(self) -> None:
        if not self._held:
            self._held = True
            return
        if self._waiters is None:
            self._waiters = deque()
        turn = anyio.Event()
        self._waiters.append(turn)
        try:
            await turn.wait()  # the one leaving hands the turn over: _held stays True
        except BaseException:
            if turn.is_set():
                self.give_back()  # handed the turn while being cancelled: give it on
            else:
                self._waiters.remove(turn)
            raise

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.give_back()
