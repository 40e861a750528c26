"""Forgetting the exactly-once marks no replay can need any more.

A handoff sink keeps a mark per source stream and key (:mod:`spark_sink.handoff`), so that a
replay after a crash does not hand a window off twice. Only a replay needs it, and a replay
reads records from the queue's checkpoint on: a mark last written before the oldest record a
restart could read again was written (the store's *replay horizon*) guards windows no replay
can make again. Left alone, marks would grow with every device that ever published; with
this they stay proportional to the streams of the last few minutes.

``margin`` allows for the clocks of the processes that enqueue records and the worker that
writes marks to differ.

>>> import sqlite3
>>> conn = sqlite3.connect(":memory:")
>>> for sql in MARKS_SCHEMA:
...     _ = conn.execute(sql)
>>> _ = conn.execute("INSERT INTO handoff_marks VALUES ('h', 'devices/a', 'C', '', 60.0, 1000.0)")
>>> _ = conn.execute("INSERT INTO handoff_marks VALUES ('h', 'devices/b', 'C', '', 60.0, 1500.0)")
>>> retention = MarkRetention(lambda conn: 1400.0, margin=100.0, interval=0.0)
>>> retention.trim(conn, now=2000.0)
1
>>> [source for (source,) in conn.execute("SELECT source FROM handoff_marks")]
['devices/b']
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

from streams.core.clock import wall_time

ReplayHorizon = Callable[[sqlite3.Connection], float | None]
"""When the oldest record a restart could read again was written (None: nothing to replay)."""

MARKS_SCHEMA: Sequence[str] = [
    "CREATE TABLE handoff_marks(handoff TEXT NOT NULL, source TEXT NOT NULL, "
    "consumer TEXT NOT NULL, key TEXT NOT NULL, last_end REAL NOT NULL, "
    "written REAL NOT NULL DEFAULT 0, "  # when the mark was last written
    "PRIMARY KEY(handoff, source, consumer, key))",
    "CREATE TABLE handoff_event_marks(handoff TEXT NOT NULL, source TEXT NOT NULL, "
    "consumer TEXT NOT NULL, mark BLOB NOT NULL, "  # EventMark.to_bytes()
    "written REAL NOT NULL DEFAULT 0, "
    "PRIMARY KEY(handoff, source, consumer))",
]


class MarkRetention:
    """Deletes the marks written more than ``margin`` seconds before the store's replay
    horizon, at most once per ``interval`` seconds: its sink trims (:meth:`trim`) when the
    wall clock has reached :attr:`due_at`, one interval after the retention was made, then
    one interval after each trim (the sink compares it, no call on an append with no trim due).

    >>> MarkRetention(lambda conn: None, interval=60.0, now=1000.0).due_at
    1060.0
    """

    MARGIN = 300.0  # [s] clocks of different processes may differ by this much
    INTERVAL = 60.0  # [s] a trim reads each queue's first record after its checkpoint

    def __init__(
        self,
        horizon: ReplayHorizon,
        *,
        margin: float | None = None,
        interval: float | None = None,
        now: float | None = None,
    ) -> None:
        self._horizon = horizon
        self.margin = self.MARGIN if margin is None else margin
        self.interval = self.INTERVAL if interval is None else interval
        self.due_at = (wall_time() if now is None else now) + self.interval  # the wall clock's

    def trim(self, conn: sqlite3.Connection, now: float) -> int:
        """In ``conn``'s write transaction: forget the marks no replay can need; how many went.
        The next trim is due one interval after ``now``."""
        self.due_at = now + self.interval
        horizon = self._horizon(conn)
        cutoff = (now if horizon is None else min(horizon, now)) - self.margin
        gone = conn.execute("DELETE FROM handoff_marks WHERE written < ?", (cutoff,)).rowcount
        gone += conn.execute("DELETE FROM handoff_event_marks WHERE written < ?", (cutoff,)).rowcount
        return gone
