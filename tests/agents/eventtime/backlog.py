"""A backlog and what the records alone give: the test helpers of the backlog tests.

A backlog is a queue holding records whose arrival times are long past (a restart after
downtime, a replay, a topic read from its start). :func:`backlog_rows` makes one (rows of one
or two streams, a few events to a record); :func:`reference` is what the records alone give
to one stream's activation (the event-time core's replay of the same arrivals, what
``headrace simulate`` runs); :func:`counting_type` declares the consumer a worker runs on
them, which records the same things: every event's outcome and every window.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import groupby

from streams import StreamId, StreamProvider
from streams.core.batch import BatchContainer, BatchKind
from streams.eventtime import Collect, EventTime, OrderingPolicy, Tumbling
from streams.eventtime.replay import ReplayOptions, Row, replay
from streams.eventtime.results import ADJUSTED, DEAD_LETTER, DROPPED, EventOutcome, WindowResult
from streams.eventtime.windows import WindowSpec

HOUR = 3600.0
YEAR = 365 * 86400.0
LATE = 5.0  # late_arrival of every policy here
WINDOW = Tumbling(10)
NAMESPACE = "meters"

Window = tuple[float, float, tuple[int, ...]]  # start, end, event indexes


def policy(action: str) -> OrderingPolicy:
    return OrderingPolicy(late_arrival=LATE, out_of_order=1.0, action=action)  # type: ignore[arg-type]


def backlog_rows(
    n: int,
    age: float,
    *,
    per_record: int = 1,
    quiet_every: int = 0,
    seed: int = 26,
    spacing: float = 0.01,
    lags: tuple[float, float] = (3.0, 30.0),
) -> list[Row]:
    """``n`` events, ``per_record`` to a record (a record's events arrive together), records
    ``spacing`` seconds apart per event, the last arrived ``age`` seconds ago. Each row's key
    is its stream's: ``busy``, or every ``quiet_every``-th record of the first half
    ``quiet`` (which then stays silent while the busy stream's records go on). Most events
    trail their arrival by up to ``lags[0]`` seconds, a third by up to ``lags[1]`` (late
    beyond ``LATE``), so every fate occurs."""
    rng = random.Random(seed)
    first = time.time() - age - n * spacing
    rows = []
    for i in range(n):
        record = i // per_record
        arrival = first + record * per_record * spacing
        quiet = quiet_every and record % quiet_every == quiet_every - 1 and i < n // 2
        key = "quiet" if quiet else "busy"
        lag = rng.uniform(0.0, lags[0]) if rng.random() < 0.67 else rng.uniform(lags[0], lags[1])
        rows.append(Row(i, arrival, arrival - lag, key))
    return rows


def records(rows: Sequence[Row]) -> list[list[Row]]:
    """The rows as records: consecutive rows of one stream and arrival time."""
    return [list(group) for _, group in groupby(rows, key=lambda row: (row.key, row.arrival_time))]


def containers(rows: Sequence[Row], *, complete: bool = True) -> list[tuple[StreamId, bytes]]:
    """The rows as the queue records a producer would have written (each event's value its
    row's index), then (``complete``) each stream's completion at the last arrival."""
    out = [
        (
            StreamId(NAMESPACE, str(record[0].key)),
            BatchContainer(
                StreamId(NAMESPACE, str(record[0].key)),
                BatchKind.DATA,
                record[0].arrival_time,
                [row.index for row in record],
                [row.event_time for row in record],
            ).encode(),
        )
        for record in records(rows)
    ]
    for key in dict.fromkeys(row.key for row in rows) if complete else ():
        sid = StreamId(NAMESPACE, str(key))
        out.append((sid, BatchContainer(sid, BatchKind.COMPLETED, rows[-1].arrival_time, []).encode()))
    return out


FATES = ("events", "adjusted", "late_arrival_dropped", "out_of_order_dropped", "window_closed")


@dataclass
class Seen:
    """What one stream's activation gave: how many events met each fate (its processor's
    counters), every window with its events, every dead letter with its reason. Together
    they say what became of each event: in which windows, or dropped or dead-lettered why
    (and how many were adjusted)."""

    fates: dict[str, int] = field(default_factory=dict)
    windows: list[Window] = field(default_factory=list)
    letters: list[tuple[int, str]] = field(default_factory=list)  # event index, reason

    def all(self) -> tuple[dict[str, int], list[Window], list[tuple[int, str]]]:
        return self.fates, self.windows, self.letters


def observations(rows: Sequence[Row], key: object) -> list[Row]:
    """What stream ``key``'s activation observes of a queue holding ``rows``: its records,
    each after a tick at the queue's clock just before it (the arrival time of the queue's
    previous record: what the other streams' records did to the clock)."""
    out: list[Row] = []
    clock = -math.inf
    for record in records(rows):
        if record[0].key == key:
            if clock > -math.inf:
                out.append(Row(-1, clock, None))
            out.extend(record)
        clock = max(clock, record[0].arrival_time)
    return out


def reference(
    rows: Sequence[Row],
    action: str,
    key: object = "busy",
    *,
    ordering: OrderingPolicy | None = None,
    window: WindowSpec = WINDOW,
    then: float | None = None,
) -> Seen:
    """What the records alone give to stream ``key``'s activation: the core's replay of the
    same arrivals (with the queue's clock before each of its records), every window closed
    at the end (the stream completes), or with ``then`` by a tick at ``then``."""
    seen = Seen(dict.fromkeys(FATES, 0))
    seen_rows = observations(rows, key) + ([Row(-1, then, None)] if then is not None else [])
    options = ReplayOptions(ordering or policy(action), window, flush=then is None)
    for item in replay(seen_rows, options):
        if isinstance(item, EventOutcome):
            index = item.record.token
            assert isinstance(index, int)
            seen.fates["events"] += 1
            if item.status == ADJUSTED:
                seen.fates["adjusted"] += 1
            elif item.status == DROPPED:
                assert item.reason is not None
                seen.fates[f"{item.reason}_dropped"] += 1
                seen.letters.append((index, item.reason))
            elif item.status == DEAD_LETTER:
                seen.fates["window_closed"] += 1
                seen.letters.append((index, "window_closed"))
        elif isinstance(item, WindowResult):
            seen.windows.append((item.start, item.end, tuple(item.value)))
    seen.letters.sort()
    return seen


def counting_type(
    provider: StreamProvider,
    action: str,
    *,
    ordering: OrderingPolicy | None = None,
    window: WindowSpec = WINDOW,
    select: str | None = None,
) -> dict[str, Seen]:
    """Declare on ``provider`` the consumer of ``NAMESPACE``; what each stream's activation
    gives is recorded under its key (``select``: the field of a value that is its index)."""
    seen: dict[str, Seen] = {}

    @provider.implicit(NAMESPACE)
    class Meter:
        event_time = EventTime(ordering or policy(action), window, Collect(), select=select)

        def __init__(self, stream_id: StreamId) -> None:
            self.seen = seen.setdefault(stream_id.key, Seen())

        def on_window(self, result: WindowResult) -> None:
            self.seen.windows.append((result.start, result.end, tuple(result.value)))

    return seen


async def collect(provider: StreamProvider, seen: dict[str, Seen]) -> None:
    """Each stream's fates (its activation's counters) and dead letters (from the
    provider's store) into ``seen``."""
    for agent in provider.agents:
        for activation in agent.event_time_activations():
            counters = activation.processor.counters.as_dict()
            seen[activation.stream_id.key].fates = {name: counters[name] for name in FATES}
    for letter in await provider.dead_letters.list(limit=10**7):
        assert letter.stream is not None
        index = letter.value["i"] if isinstance(letter.value, dict) else letter.value
        seen[StreamId.parse(letter.stream).key].letters.append((index, letter.reason))
    for one in seen.values():
        one.letters.sort()
