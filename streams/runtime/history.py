"""A worker's recent past for its status page: lag, throughput, watermark delay and the dead
letters by reason, sampled every few seconds into a ring buffer that holds the last hour.

The samples come from :func:`~streams.runtime.snapshot.take_snapshot`, read on the
worker's event loop from counters the runtime keeps anyway, and the store's dead letters
counted by reason (as the metrics count them), so keeping a history costs one snapshot and
one count every ``every`` seconds and ``span / every`` small rows of memory, whatever the
load.

>>> from streams.runtime.snapshot import WorkerSnapshot
>>> history = StatusHistory(every=5.0, span=15.0)       # three samples kept
>>> for t in (0.0, 5.0, 10.0, 15.0):
...     _ = history.sample(WorkerSnapshot("w1", 1000.0 + t, ()))
>>> [s["t"] for s in history.as_dict()["samples"]]
[1005.0, 1010.0, 1015.0]
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import anyio

from streams.core.errors import ConfigurationError, HeadraceError
from streams.runtime.provider import StreamProvider
from streams.runtime.snapshot import WorkerSnapshot, dead_letter_counts, take_snapshot

log = logging.getLogger("headrace.page")

SAMPLE_EVERY = 5.0  # seconds between samples
SPAN = 3600.0  # seconds of history kept


@dataclass(frozen=True, slots=True)
class Sample:
    """The worker at ``t`` (POSIX s): records read but not yet delivered to the slowest
    consumer of each queue (``lag``, summed over its queues), events read and delivered per
    second since the sample before (None for the first, or after an agent restarted), the
    highest watermark delay of its queues (None without a running event-time stream), and
    the dead letters the store keeps, by reason (the reasons with some; None: not counted,
    the store could not be read then)."""

    t: float
    lag: int
    in_per_s: float | None
    out_per_s: float | None
    watermark_delay: float | None
    dead_letters: dict[str, int] | None = None


class StatusHistory:
    """The last ``span`` seconds of a worker, a :class:`Sample` every ``every`` seconds."""

    def __init__(self, every: float = SAMPLE_EVERY, span: float = SPAN) -> None:
        if not every > 0 or not span >= every:
            raise ConfigurationError(
                f"a history samples every positive seconds over a longer span, not {every!r} over {span!r}"
            )
        self.every = every
        self.span = span
        self._samples: deque[Sample] = deque(maxlen=math.ceil(span / every))
        self._last: tuple[float, int, int] | None = None  # time, events read, events delivered

    def sample(self, snapshot: WorkerSnapshot, dead_letters: Mapping[str, int] | None = None) -> Sample:
        """Add the sample of ``snapshot`` and the ``dead_letters`` counted by reason then
        (the oldest sample goes when the buffer is full)."""
        read = sum(q.events_read for q in snapshot.queues)
        delivered = sum(q.events_delivered for q in snapshot.queues)
        in_rate = out_rate = None
        if self._last is not None:
            t, read_before, delivered_before = self._last
            span = snapshot.taken_at - t
            # Counters restart with an agent (a queue that moved and came back): no rate then.
            if span > 0 and read >= read_before and delivered >= delivered_before:
                in_rate, out_rate = (read - read_before) / span, (delivered - delivered_before) / span
        self._last = (snapshot.taken_at, read, delivered)
        delays = [q.event_time.delay for q in snapshot.queues if q.event_time.delay is not None]
        sample = Sample(
            t=snapshot.taken_at,
            lag=sum(max((c.behind for c in q.slowest), default=0) for q in snapshot.queues),
            in_per_s=in_rate,
            out_per_s=out_rate,
            watermark_delay=max(delays) if delays else None,
            dead_letters=None if dead_letters is None else {r: n for r, n in dead_letters.items() if n},
        )
        self._samples.append(sample)
        return sample

    def as_dict(self) -> dict[str, object]:
        """Plain JSON: ``every``, ``span`` and the samples, oldest first."""
        return {"every": self.every, "span": self.span, "samples": [asdict(s) for s in self._samples]}

    async def run(self, provider: StreamProvider) -> None:
        """Sample ``provider``'s worker every ``every`` seconds until cancelled."""
        while True:
            try:
                letters: dict[str, int] | None = await dead_letter_counts(provider.dead_letters)
            except HeadraceError as exc:  # the store cannot be read now: this sample has no count
                log.debug("the status history could not count the dead letters: %s", exc)
                letters = None
            self.sample(take_snapshot(provider), letters)
            await anyio.sleep(self.every)
