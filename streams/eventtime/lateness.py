"""How late and how out of order events arrive: a bounded sketch of the last hour.

For a sample of the events a queue's consumer type takes, the per-event path records two
observed times (``docs/event-time.md``, "Observed lateness and disorder"):

- **lateness** ``arrival − event time``: what ``late_arrival`` must cover for an event to
  pass step 2 unadjusted;
- **disorder** ``newest event time seen − event time`` in the event's watermark lane (its
  substream with ``over``, else its partition), before the event: what ``out_of_order``
  must cover for it to stay at or above the watermark in step 3. The newest event of its
  lane so far has disorder 0.

Each goes into a :class:`Histogram` of logarithmic buckets (DDSketch's): a fixed number of
buckets, each value read back within :data:`RELATIVE_ERROR` of itself (or within
:data:`SMALLEST` s of it near zero). A :class:`LatenessSketch` keeps one pair of histograms
per :data:`SLOT` seconds of arrival time in a ring of :data:`SLOTS`, so what it reports is
the last hour (between 55 and 60 minutes of it), and its memory is fixed: it never grows with
the number of events. With substreams, it also keeps the first :data:`MAX_SUBSTREAMS`
substreams it sees apart (the others are counted, not kept), dropping one once its hour is
empty. The core samples one event in ``every``, by position (no random draw per event).

Tolerances advised from observed lateness and disorder (``headrace status --advise``).

From a consumer type's :class:`~streams.eventtime.lateness.ObservedTimes` (a sample of its
events over the last hour), for a share ``q`` of the events (99 %, 99.9 %):

- ``out_of_order`` = the ``q`` quantile of disorder: the events at or below it are at or
  above their lane's ``newest − out_of_order``, so step 3 leaves them alone;
- ``late_arrival`` = the ``q`` quantile of lateness: step 2 leaves those alone.

Each quantile is its bucket's upper bound (:func:`~streams.eventtime.lateness.upper_of`), so
the share it covers is at least ``q`` of the sample, and it is at most 4.1 % (or 1 ms) above the
exact quantile. Each tolerance alone keeps at least ``q`` of the events unadjusted by its step;
set together, at least ``2q − 1`` of them (an event is unadjusted when it passes both).

What a setting costs is its **finalization delay**: how long after a window's end (in
processing time) the watermark reaches it, so the window can close (its allowed lateness
comes on top, the same for every setting). ``W = max(newest − O, arrival − L)`` reaches an end
``e`` when an event of time ``e + O`` arrives, typically ``O + λ`` after ``e`` (``λ`` the
median lateness), or at the latest at ``e + L``: the delay is ``min(O + λ, L)`` (``O + λ``
with ``L`` off).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field

RELATIVE_ERROR = 0.02  # a quantile read back is within 2 % of a value the sketch saw (or SMALLEST s)
SMALLEST = 1e-3  # s: lateness and disorder at or below this count as 0
LARGEST = 1e6  # s (11.6 days): larger values count as this
_GAMMA = (1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)
_LOG_GAMMA = math.log(_GAMMA)
BUCKETS = math.ceil(math.log(LARGEST / SMALLEST) / _LOG_GAMMA) + 1  # bucket 0 holds 0 (and below)
SLOT = 300.0  # s of arrival time per ring slot
SLOTS = 12  # slots in the ring: one hour
MAX_SUBSTREAMS = 4  # substreams kept apart per sketch
EVERY = 256  # one event in EVERY is sampled (the runtime's default)

# Quantiles that status shows (p50, p99, p99.9).
SHOWN = (0.5, 0.99, 0.999)


_TOP = BUCKETS - 1
_PER_LOG = 1 / _LOG_GAMMA
_BASE = math.log(SMALLEST) / _LOG_GAMMA
_log, _ceil = math.log, math.ceil


def bucket_of(value: float) -> int:
    """The bucket of a value in seconds: 0 at or below :data:`SMALLEST`, then logarithmic.

    >>> bucket_of(-3.0), bucket_of(0.001), bucket_of(0.002) > 0, bucket_of(1e9) == BUCKETS - 1
    (0, 0, True, True)
    """
    if value <= SMALLEST:  # also an event from the future (negative lateness)
        return 0
    if value >= LARGEST:
        return _TOP
    return _ceil(_log(value) * _PER_LOG - _BASE)  # >= 1 above SMALLEST, < _TOP below LARGEST


def upper_of(bucket: int) -> float:
    """The largest value a bucket holds (below :data:`LARGEST`): a tolerance this large
    covers every value counted in it, and is at most a bucket's width above them (a factor
    ``(1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)``: 4.1 %), or 1 ms above 0.

    >>> upper_of(bucket_of(5.0)) >= 5.0 > upper_of(bucket_of(5.0) - 1), upper_of(0)
    (True, 0.001)
    """
    if bucket <= 0:
        return SMALLEST
    return min(LARGEST, SMALLEST * _GAMMA**bucket)


def value_of(bucket: int) -> float:
    """What a bucket reads back as: within :data:`RELATIVE_ERROR` of every value in it.

    >>> abs(value_of(bucket_of(5.0)) - 5.0) <= 5.0 * RELATIVE_ERROR
    True
    """
    if bucket <= 0:
        return 0.0
    if bucket >= BUCKETS - 1:
        return LARGEST
    return SMALLEST * 2 * _GAMMA**bucket / (_GAMMA + 1)


class Histogram:
    """Counts of values per logarithmic bucket (:data:`BUCKETS` of them, 4 bytes each).

    >>> h = Histogram()
    >>> for v in [0.5, 1, 2, 3, 100]:
    ...     h.add(v)
    >>> h.count, round(h.quantile(0.5), 1), round(h.quantile(1.0), -1), h.quantile(1.0, upper=True) >= 100
    (5, 2.0, 100.0, True)
    """

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts = array("I", bytes(4 * BUCKETS))

    @property
    def count(self) -> int:
        return sum(self.counts)

    def add(self, value: float) -> None:
        self.counts[bucket_of(value)] += 1

    def merge(self, other: Histogram) -> None:
        counts = self.counts
        for i, n in enumerate(other.counts):
            if n:
                counts[i] += n

    def clear(self) -> None:
        self.counts = array("I", bytes(4 * BUCKETS))

    def quantile(self, q: float, *, upper: bool = False) -> float:
        """The ``q`` quantile (0 < q ≤ 1): the smallest value at least ``q`` of the values are
        at or below, as its bucket reads back (``upper``: its bucket's upper bound); NaN when
        empty."""
        return quantile_of(enumerate(self.counts), self.count, q, upper=upper)

    def buckets(self) -> dict[int, int]:
        """The non-empty buckets: what a status row carries."""
        return {i: n for i, n in enumerate(self.counts) if n}


def quantile_of(buckets: Iterable[tuple[int, int]], count: int, q: float, *, upper: bool = False) -> float:
    """The ``q`` quantile of ``count`` values in ``(bucket, count)`` pairs (any order).

    >>> quantile_of({0: 2, bucket_of(10.0): 2}.items(), 4, 0.5), round(quantile_of({0: 2, bucket_of(10.0): 2}.items(), 4, 0.75))
    (0.0, 10)
    """
    if count <= 0:
        return math.nan
    rank = max(1, math.ceil(q * count - 1e-9))  # the rank-th smallest value
    seen = 0
    for i, n in sorted(buckets):
        seen += n
        if seen >= rank:
            return upper_of(i) if upper else value_of(i)
    return LARGEST


@dataclass(frozen=True, slots=True)
class ObservedTimes:
    """A sketch's last hour as plain data (status rows, ``--advise``): bucket counts by bucket
    number (as text: JSON keys), the number of events sampled, one in ``every`` sampled, and
    the tolerances in force (``late_arrival`` None: off). ``substreams``: the kept substreams'
    ``(name, p99 lateness, p99 disorder)``, worst lateness first; ``untracked``: substreams
    seen but not kept apart.

    >>> sketch = LatenessSketch(every=1)
    >>> for t in [0.0, 2.0, 1.0]:
    ...     sketch.record(10.0, t, 2.0 if t == 1.0 else t)
    >>> seen = sketch.observed(10.0)
    >>> seen.samples, round(seen.quantile("lateness", 0.5)), round(seen.quantile("disorder", 1.0))
    (3, 9, 1)
    """

    samples: int
    every: int
    lateness: dict[str, int] = field(default_factory=dict)
    disorder: dict[str, int] = field(default_factory=dict)
    out_of_order: float = 0.0
    late_arrival: float | None = None
    substreams: list[tuple[str, float, float]] = field(default_factory=list)
    untracked: int = 0

    def quantile(self, which: str, q: float, *, upper: bool = False) -> float:
        """The ``q`` quantile of ``lateness`` or ``disorder``, in seconds (NaN: none sampled;
        ``upper``: its bucket's upper bound, see :func:`upper_of`)."""
        buckets = self.lateness if which == "lateness" else self.disorder
        return quantile_of(((int(i), n) for i, n in buckets.items()), sum(buckets.values()), q, upper=upper)

    def share_within(self, which: str, tolerance: float | None) -> float:
        """The share of the sampled events whose ``which`` is certainly within ``tolerance``
        (their bucket's upper bound at or below it; ``None``: off, every event): a lower bound
        of the share that tolerance keeps unadjusted (NaN: none sampled).

        >>> seen = ObservedTimes(4, 1, lateness={str(bucket_of(1.0)): 3, str(bucket_of(9.0)): 1})
        >>> seen.share_within("lateness", 2.0), seen.share_within("lateness", 1.0), seen.share_within("lateness", None)
        (0.75, 0.0, 1.0)
        """
        buckets = self.lateness if which == "lateness" else self.disorder
        total = sum(buckets.values())
        if not total:
            return math.nan
        if tolerance is None:
            return 1.0
        return sum(n for i, n in buckets.items() if upper_of(int(i)) <= tolerance) / total

    def quantiles(self, which: str) -> tuple[float, ...]:
        """The quantiles status shows (:data:`SHOWN`: p50, p99, p99.9) of ``which``."""
        return tuple(self.quantile(which, q) for q in SHOWN)

    @staticmethod
    def combine(parts: Iterable[ObservedTimes]) -> ObservedTimes:
        """The sketches of several queues as one (the same consumer type); the tolerances are
        the first part's (every queue runs the same declaration)."""
        parts = list(parts)
        if not parts:
            return ObservedTimes(0, EVERY)
        return ObservedTimes(
            samples=sum(p.samples for p in parts),
            every=max(p.every for p in parts),
            lateness=_sum_buckets(p.lateness for p in parts),
            disorder=_sum_buckets(p.disorder for p in parts),
            out_of_order=parts[0].out_of_order,
            late_arrival=parts[0].late_arrival,
            untracked=sum(p.untracked for p in parts),
        )

    @staticmethod
    def from_dict(data: Mapping[str, object]) -> ObservedTimes:
        """What :func:`dataclasses.asdict` made of one (a status row's JSON or msgpack)."""
        subs = data.get("substreams") or []
        if not isinstance(subs, list):
            raise ValueError(f"substreams is a list, not {subs!r}")
        late = data.get("late_arrival")
        return ObservedTimes(
            samples=int(_number(data["samples"])),
            every=int(_number(data["every"])),
            lateness=_buckets(data.get("lateness")),
            disorder=_buckets(data.get("disorder")),
            out_of_order=_number(data.get("out_of_order", 0.0)),
            late_arrival=None if late is None else _number(late),
            substreams=[(str(s[0]), _number(s[1]), _number(s[2])) for s in subs],
            untracked=int(_number(data.get("untracked", 0))),
        )


def _number(value: object) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ValueError(f"not a number: {value!r}")


def _buckets(data: object) -> dict[str, int]:
    return {str(k): int(_number(v)) for k, v in data.items()} if isinstance(data, Mapping) else {}


def _sum_buckets(parts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for part in parts:
        for i, n in part.items():
            total[i] = total.get(i, 0) + n
    return total


class LatenessSketch:
    """Observed lateness and disorder over the last hour of arrival time, for one queue's
    consumer type: what the per-event path samples into (:meth:`record`).

    ``every``: one event in ``every`` is sampled. Memory is at most :data:`SLOTS` pairs of
    histograms (:meth:`size_bytes`), and as many per kept substream.

    >>> sketch = LatenessSketch(every=2)
    >>> sketch.due  # the position of the next event sampled, among those to come
    2
    >>> sketch.record(arrival=100.0, event_time=97.0, newest=99.0)
    >>> sketch.record(arrival=3700.0, event_time=3699.0, newest=3699.0)
    >>> s = sketch.observed(now=3700.0)  # the first sample's slot has left the hour
    >>> s.samples, round(s.quantile("lateness", 0.5), 1), s.quantile("disorder", 0.5)
    (1, 1.0, 0.0)
    """

    __slots__ = (
        "every",
        "due",
        "out_of_order",
        "late_arrival",
        "_slots",
        "_starts",
        "_pair",
        "_since",
        "_until",
        "_subs",
        "untracked",
        "_kept",
    )

    def __init__(
        self, every: int = EVERY, *, out_of_order: float = 0.0, late_arrival: float | None = None, substreams: int = 0
    ) -> None:
        if every < 1:
            raise ValueError(f"every must be at least 1, not {every!r}")
        self.every = every
        self.due = every  # 1-based position of the next sampled event among those to come
        self.out_of_order, self.late_arrival = out_of_order, late_arrival
        # slot i of the ring: (lateness, disorder), holding arrival slot number _starts[i]
        self._slots: list[tuple[Histogram, Histogram] | None] = [None] * SLOTS
        self._starts = [-math.inf] * SLOTS
        # The slot samples go to now: its pair and arrival bounds.
        self._pair: tuple[Histogram, Histogram] | None = None
        self._since = self._until = -math.inf
        self._kept = substreams  # substreams kept apart at most
        self._subs: dict[Hashable, LatenessSketch] = {}
        self.untracked = 0  # samples of substreams not kept apart

    def record(self, arrival: float, event_time: float, newest: float, substream: Hashable = None) -> None:
        """One sampled event (``newest``: its lane's newest event time before it). An arrival
        older than the hour is not kept."""
        # On the per-event path (one event in ``every``): bucket_of inlined, the current
        # slot's bounds kept so that most samples skip the ring's arithmetic.
        pair = self._pair
        if not self._since <= arrival < self._until or pair is None:
            pair = self._turn(arrival)
            if pair is None:  # older than what the ring holds: outside the hour
                return
        late = arrival - event_time
        if late <= SMALLEST:
            pair[0].counts[0] += 1
        else:
            pair[0].counts[_TOP if late >= LARGEST else _ceil(_log(late) * _PER_LOG - _BASE)] += 1
        late = newest - event_time  # the disorder
        if late <= SMALLEST:
            pair[1].counts[0] += 1
        else:
            pair[1].counts[_TOP if late >= LARGEST else _ceil(_log(late) * _PER_LOG - _BASE)] += 1
        if substream is not None and self._kept:
            self._substream(substream, arrival).record(arrival, event_time, newest)

    def _turn(self, arrival: float) -> tuple[Histogram, Histogram] | None:
        """The pair of the ring slot ``arrival`` falls in, made current (cleared when it held an
        older slot); None when it is older than the slot there (outside the hour), or no time."""
        if not math.isfinite(arrival):
            return None
        slot = arrival // SLOT
        i = int(slot % SLOTS)
        if self._starts[i] > slot:
            return None
        pair = self._slots[i]
        if pair is None:
            pair = self._slots[i] = (Histogram(), Histogram())
        elif self._starts[i] != slot:
            pair[0].clear()
            pair[1].clear()
        self._starts[i] = slot
        self._pair, self._since, self._until = pair, slot * SLOT, (slot + 1) * SLOT
        return pair

    def _substream(self, key: Hashable, arrival: float) -> LatenessSketch:
        sub = self._subs.get(key)
        if sub is not None:
            return sub
        if len(self._subs) >= self._kept:  # make room: drop the ones whose hour is empty
            for name in [k for k, s in self._subs.items() if s.empty(arrival)]:
                del self._subs[name]
        if len(self._subs) >= self._kept:
            self.untracked += 1
            return _NOWHERE
        sub = self._subs[key] = LatenessSketch(self.every)
        return sub

    def _live(self, now: float) -> list[tuple[Histogram, Histogram]]:
        oldest = now // SLOT - SLOTS
        return [pair for pair, start in zip(self._slots, self._starts) if pair is not None and start > oldest]

    def empty(self, now: float) -> bool:
        return not any(pair[0].count for pair in self._live(now))

    def histograms(self, now: float) -> tuple[Histogram, Histogram]:
        """``(lateness, disorder)`` over the hour up to ``now`` (arrival-clock seconds)."""
        lateness, disorder = Histogram(), Histogram()
        for late, dis in self._live(now):
            lateness.merge(late)
            disorder.merge(dis)
        return lateness, disorder

    def observed(self, now: float) -> ObservedTimes:
        """The hour up to ``now`` as plain data."""
        lateness, disorder = self.histograms(now)
        subs = []
        for key, sub in self._subs.items():
            late, dis = sub.histograms(now)
            if late.count:
                subs.append((str(key), late.quantile(0.99), dis.quantile(0.99)))
        subs.sort(key=lambda s: (-s[1], s[0]))
        return ObservedTimes(
            samples=lateness.count,
            every=self.every,
            lateness={str(i): n for i, n in lateness.buckets().items()},
            disorder={str(i): n for i, n in disorder.buckets().items()},
            out_of_order=self.out_of_order,
            late_arrival=self.late_arrival,
            substreams=subs[:3],
            untracked=self.untracked,
        )

    def size_bytes(self) -> int:
        """The memory its histograms take now (at most ``SLOTS * 2 * 4 * BUCKETS`` bytes,
        and as much again per kept substream)."""
        own = sum(2 * pair[0].counts.buffer_info()[1] * 4 for pair in self._slots if pair is not None)
        return own + sum(sub.size_bytes() for sub in self._subs.values())


class _Nowhere(LatenessSketch):
    """Where the samples of substreams not kept apart go: nowhere."""

    __slots__ = ()

    def record(self, arrival: float, event_time: float, newest: float, substream: Hashable = None) -> None:
        return


_NOWHERE = _Nowhere()


class LatenessSketches:
    """One queue's sketches, one per consumer type name, made on first use.

    >>> sketches = LatenessSketches(every=1)
    >>> s = sketches.of("app.Totals", out_of_order=5.0, late_arrival=None, substreams=False)
    >>> s is sketches.of("app.Totals", out_of_order=5.0, late_arrival=None, substreams=False)
    True
    >>> s.record(10.0, 9.0, 9.0)
    >>> sketches.observed(10.0)["app.Totals"].samples
    1
    """

    def __init__(self, every: int = EVERY) -> None:
        self.every = every
        self._by_type: dict[str, LatenessSketch] = {}

    def of(
        self, type_name: str, *, out_of_order: float, late_arrival: float | None, substreams: bool
    ) -> LatenessSketch:
        sketch = self._by_type.get(type_name)
        if sketch is None:
            sketch = self._by_type[type_name] = LatenessSketch(
                self.every,
                out_of_order=out_of_order,
                late_arrival=late_arrival,
                substreams=MAX_SUBSTREAMS if substreams else 0,
            )
        return sketch

    def observed(self, now: float) -> dict[str, ObservedTimes]:
        """Per consumer type, the hour up to ``now`` (types with no sample in it left out)."""
        found = {name: sketch.observed(now) for name, sketch in self._by_type.items()}
        return {name: seen for name, seen in found.items() if seen.samples}

    def size_bytes(self) -> int:
        return sum(s.size_bytes() for s in self._by_type.values())


SHARES = (0.99, 0.999)  # the shares of events --advise keeps unadjusted


@dataclass(frozen=True, slots=True)
class Tolerances:
    """A setting of the two tolerances (``late_arrival`` None: off) and its finalization
    delay in seconds."""

    out_of_order: float
    late_arrival: float | None
    delay: float


def finalization_delay(out_of_order: float, late_arrival: float | None, median_lateness: float) -> float:
    """How long after a window's end the watermark typically passes it (module doc).

    >>> finalization_delay(5.0, None, 1.0), finalization_delay(5.0, 3.0, 1.0), finalization_delay(5.0, 30.0, 1.0)
    (6.0, 3.0, 6.0)
    """
    by_order = out_of_order + max(0.0, median_lateness)
    return by_order if late_arrival is None else min(by_order, late_arrival)


def current(seen: ObservedTimes) -> Tolerances:
    """The tolerances in force, with their delay on the observed lateness."""
    return Tolerances(
        seen.out_of_order,
        seen.late_arrival,
        finalization_delay(seen.out_of_order, seen.late_arrival, _median(seen)),
    )


def advise(seen: ObservedTimes, share: float) -> Tolerances:
    """The tolerances that keep ``share`` of the observed events unadjusted (module doc).

    >>> from streams.eventtime.lateness import LatenessSketch
    >>> sketch = LatenessSketch(every=1)
    >>> for i in range(100):  # 1 s late; every tenth 8 s late, 6 s behind the newest
    ...     t = float(i) - (7.0 if i % 10 == 9 else 0.0)
    ...     sketch.record(i + 1.0, t, max(float(i - 1), t))
    >>> a = advise(sketch.observed(100.0), 0.8)
    >>> round(a.out_of_order, 1), round(a.late_arrival or 0, 1), round(a.delay, 1)
    (0.0, 1.0, 1.0)
    >>> a = advise(sketch.observed(100.0), 0.99)
    >>> round(a.out_of_order, 1), round(a.late_arrival or 0, 1), round(a.delay, 1)
    (6.1, 8.1, 7.1)
    """
    if not seen.samples:
        raise ValueError("no events observed: nothing to advise from")
    out_of_order = seen.quantile("disorder", share, upper=True)
    late_arrival = seen.quantile("lateness", share, upper=True)
    return Tolerances(out_of_order, late_arrival, finalization_delay(out_of_order, late_arrival, _median(seen)))


def _median(seen: ObservedTimes) -> float:
    median = seen.quantile("lateness", 0.5)
    return 0.0 if math.isnan(median) else median
