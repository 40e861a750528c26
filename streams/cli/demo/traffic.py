"""Toll traffic for the demo: one producer per toll plaza, one stream per plaza.

Each plaza's booths report the cars that pass (booth, vehicle class, toll, ``time``) in small
batches, as a roadside unit does. Most reports arrive within half a second of the passage;
a realistic share does not:

- *out of order*: the uplink buffered the report for 1–6 s, so it arrives after newer ones;
- *late*: the booth was offline and sends its backlog 20–45 s after the passages;
- *early*: a booth whose clock runs ten minutes ahead;
- *no time*: a report that lost its ``time`` field;
- *corrupt*: a few records that are not batch containers at all (a buggy producer), written
  to the queue as raw bytes.

The ordering policy the demo's consumer declares (:data:`POLICY`) adjusts the first two,
drops the early ones and dead-letters the rest, so every kind of fate shows up.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from streams.core.ids import StreamId
from streams.eventtime import OrderingPolicy
from streams.runtime.provider import StreamProvider

NAMESPACE = "tolls"

# Out of order up to 2 s is normal jitter; beyond 15 s an event is late; more than 60 s
# ahead of its arrival, the clock is wrong.
POLICY = OrderingPolicy(timestamp_by="time", out_of_order=2, late_arrival=15, early_arrival=60, action="adjust")

# (vehicle class, toll): cars, vans, lorries, coaches
CLASSES: tuple[tuple[str, float], ...] = (("1", 2.10), ("2", 3.40), ("3", 5.80), ("4", 8.90))
CLASS_WEIGHTS = (80, 12, 6, 2)


@dataclass(frozen=True, slots=True)
class Shares:
    """The share of reports in each kind of trouble (the rest are on time)."""

    out_of_order: float = 0.08
    late: float = 0.01
    early: float = 0.002
    no_time: float = 0.001


@dataclass(slots=True)
class Published:
    """What the producers published, by kind (each report counts once)."""

    events: int = 0  # every report, with or without a time
    out_of_order: int = 0
    late: int = 0
    early: int = 0
    no_time: int = 0
    corrupt: int = 0  # raw records that are not batch containers (not events)
    streams: int = 0


class TollTraffic:
    """Cars at ``plazas`` toll plazas of ``booths`` booths each, ``rate`` reports per second
    in all, published to ``provider``; ``corrupt`` raw records spread over the run.

    >>> traffic = TollTraffic(plazas=2, booths=2, rate=10.0, seed=1)
    >>> [str(s) for s in traffic.streams]
    ['tolls/plaza-01', 'tolls/plaza-02']
    """

    TICK = 0.1  # seconds between two reports of a plaza

    def __init__(self, plazas: int, booths: int, rate: float, *, shares: Shares = Shares(), seed: int = 7) -> None:
        self.streams = [StreamId(NAMESPACE, f"plaza-{p:02d}") for p in range(1, plazas + 1)]
        self.booths = booths
        self.rate = rate
        self.shares = shares
        self.published = Published(streams=plazas)
        self._seed = seed

    async def run(self, provider: StreamProvider, duration: float, corrupt: int) -> None:
        """Publish for ``duration`` seconds, then return (the streams stay open)."""
        until = time.monotonic() + duration
        async with anyio.create_task_group() as tg:
            for number, stream_id in enumerate(self.streams):
                tg.start_soon(self._plaza, provider, stream_id, random.Random(self._seed * 1000 + number), until)
            tg.start_soon(self._corrupt_records, provider, corrupt, duration, random.Random(self._seed))

    async def complete(self, provider: StreamProvider) -> None:
        """End every stream: its last windows close (a final watermark)."""
        for stream_id in self.streams:
            await provider.get_stream(stream_id).on_completed()

    async def _plaza(self, provider: StreamProvider, stream_id: StreamId, rng: random.Random, until: float) -> None:
        stream = provider.get_stream(stream_id)
        booths = [f"{stream_id.key[-2:]}-{b}" for b in range(1, self.booths + 1)]
        per_tick = self.rate * self.TICK / len(self.streams)
        owed = rng.random()  # plazas do not all report at the same instant
        next_tick = time.monotonic()
        while next_tick < until:
            owed += per_tick
            count, owed = int(owed), owed - int(owed)
            if count:
                now = time.time()
                await stream.on_next_batch([self._report(rng, booths, now) for _ in range(count)])
            next_tick += self.TICK
            await anyio.sleep(max(0.0, next_tick - time.monotonic()))

    def _report(self, rng: random.Random, booths: Sequence[str], now: float) -> dict[str, Any]:
        published, shares = self.published, self.shares
        published.events += 1
        vehicle, toll = rng.choices(CLASSES, CLASS_WEIGHTS)[0]
        report: dict[str, Any] = {"booth": rng.choice(booths), "class": vehicle, "toll": toll}
        roll = rng.random()
        if roll < shares.no_time:
            published.no_time += 1
            return report
        roll -= shares.no_time
        if roll < shares.early:
            published.early += 1
            delay = -600.0
        elif roll - shares.early < shares.late:
            published.late += 1
            delay = rng.uniform(20, 45)
        elif roll - shares.early - shares.late < shares.out_of_order:
            published.out_of_order += 1
            delay = rng.uniform(1, 6)
        else:
            delay = rng.uniform(0, 0.5)
        report["time"] = round(now - delay, 3)
        return report

    async def _corrupt_records(self, provider: StreamProvider, count: int, duration: float, rng: random.Random) -> None:
        """Raw bytes straight into the queues, as a buggy producer would write them."""
        if count <= 0:
            return
        adapter = await provider.factory.create_adapter()  # the provider's own (one per factory)
        for n in range(count):
            await anyio.sleep(duration / (count + 1))
            stream_id = rng.choice(self.streams)
            queue = provider.mapper.get_queue_for_stream(stream_id)
            await adapter.queue_message_batch(queue, stream_id, b"\x00corrupt %d " % n + rng.randbytes(12))
            self.published.corrupt += 1
