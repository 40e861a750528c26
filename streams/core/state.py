"""Durable state declared on a consumer type: fields an activation keeps across restarts and
moves, and the saved unit they form with its timers and windows.

A consumer type declares a durable field with a class attribute ``name = Durable(default)``
(Orleans' grain state, Spark's ``ValueState``). Its instances read and write it as a plain
attribute; the runtime saves the fields of each activation with the queue's checkpoint, in
the same transaction on the embedded store and on the state changelog before the offset
commit on Kafka, and whoever reads the queue next restores them before the activation's
first event. The saved unit holds the position of the last event it reflects, so the events
it already counted are not delivered to it again: each event changes the state once.

>>> class ThirdOrderAlert:
...     orders = Durable(0)
...     seen = Durable(dict)  # a callable default makes a new value per activation
...     def __init__(self, stream_id): ...
>>> alert = ThirdOrderAlert("orders/ann")
>>> alert.orders += 1; alert.seen["o-1"] = 12.5
>>> saved = save_fields(alert)
>>> again = ThirdOrderAlert("orders/ann")
>>> load_fields(again, saved); again.orders, again.seen
(1, {'o-1': 12.5})

A field holds what msgpack encodes (None, bool, int, float, str, bytes, and lists, tuples and
dicts of them; a tuple reads back as a list). Anything else is refused when the state is
saved, naming the field, and that activation's state then holds the queue's checkpoint (a
restart replays its events rather than lose them):

>>> alert.seen["when"] = {1, 2}
>>> save_fields(alert)
Traceback (most recent call last):
...
streams.core.state.StateError: ThirdOrderAlert.seen holds a set, which durable state cannot save (msgpack encodes None, bool, int, float, str, bytes, and lists, tuples and dicts of them): convert it, e.g. a set to a sorted list
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast, overload

import msgpack
import msgspec

from streams.core.clock import WALL_CLOCK, Clock
from streams.core.codec import as_ext_type, pack, unpack
from streams.core.errors import HeadraceError
from streams.core.micros import bound_micros, to_seconds

__all__ = ["Durable", "StateError", "durable_fields", "load_fields", "save_fields"]

T = TypeVar("T")


class StateError(HeadraceError):
    """A consumer's state cannot be saved or read back (a value msgpack cannot encode, or
    bytes of an unknown format)."""


_IMMUTABLE = frozenset({int, float, str, bytes, bool, type(None)})  # defaults no activation can change


class Durable(Generic[T]):
    """One durable field of a consumer type: ``count = Durable(0)``, ``seen = Durable(dict)``.

    ``default`` is the field's value in a new activation: a value (copied per activation,
    so a list default is never shared) or a callable that makes one. ``ttl``: seconds of
    processing time after which the state of a stream that has been idle that long is
    dropped, from the worker and from the store (the shortest ``ttl`` of a type's fields
    is its state's).

    The field is a plain attribute of each instance once read or written (the descriptor
    only makes its first value), so reading and writing it costs what any attribute does.
    """

    __slots__ = ("default", "ttl", "name")

    def __init__(self, default: T | Callable[[], T], *, ttl: float | None = None) -> None:
        if ttl is not None and not ttl > 0:
            raise ValueError(f"Durable(ttl=...) is a number of seconds above 0, not {ttl!r}")
        self.default = default
        self.ttl = ttl
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def initial(self) -> T:
        """A new activation's value of the field."""
        default = self.default
        if type(default) in _IMMUTABLE:  # shared safely, without deepcopy's dispatch (each new activation)
            return cast(T, default)
        if callable(default):
            made: T = default()
            return made
        return copy.deepcopy(default)

    @overload
    def __get__(self, instance: None, owner: type) -> Durable[T]: ...

    @overload
    def __get__(self, instance: object, owner: type) -> T: ...

    def __get__(self, instance: object | None, owner: type) -> Durable[T] | T:
        if instance is None:
            return self
        value = self.initial()
        # No __set__: the instance's own attribute shadows the descriptor from now on.
        try:
            instance.__dict__[self.name] = value
        except AttributeError:
            raise StateError(
                f"{owner.__qualname__}.{self.name}: a type with durable fields needs instance "
                "attributes (drop __slots__, or add '__dict__' to them)"
            ) from None
        return value

    def __repr__(self) -> str:
        ttl = "" if self.ttl is None else f", ttl={self.ttl}"
        return f"Durable({self.default!r}{ttl})"


_FIELDS: dict[type, dict[str, Durable[Any]]] = {}


def durable_fields(cls: type) -> dict[str, Durable[Any]]:
    """The durable fields ``cls`` declares (its bases' too), by name; empty for most types.

    >>> class Counter:
    ...     total = Durable(0.0, ttl=3600)
    >>> durable_fields(Counter), durable_fields(int)
    ({'total': Durable(0.0, ttl=3600)}, {})
    """
    found = _FIELDS.get(cls)
    if found is None:
        found = {}
        for base in reversed(cls.__mro__):
            for name, value in vars(base).items():
                if isinstance(value, Durable):
                    found[name] = value
                else:
                    found.pop(name, None)  # a subclass's plain attribute replaces the field
        _FIELDS[cls] = found
    return found


def state_ttl(cls: type) -> float | None:
    """How long (processing-time seconds) an idle stream's state of ``cls`` is kept: the
    shortest ``ttl`` of its fields, else the type's own ``state_ttl`` attribute, else None.

    >>> class Devices:
    ...     last = Durable(None, ttl=60)
    ...     seen = Durable(0)
    >>> state_ttl(Devices), state_ttl(int)
    (60, None)
    """
    ttls = [f.ttl for f in durable_fields(cls).values() if f.ttl is not None]
    declared = getattr(cls, "state_ttl", None)
    if isinstance(declared, int | float) and not isinstance(declared, bool) and declared > 0:
        ttls.append(declared)
    return min(ttls) if ttls else None


def field_values(instance: object) -> dict[str, Any]:
    """The fields ``instance`` has set or read (those it never touched are at their default)."""
    own = instance.__dict__
    return {name: own[name] for name in durable_fields(type(instance)) if name in own}


def set_field_values(instance: object, values: dict[str, Any]) -> None:
    """Put saved field values into a new instance (a field no longer declared is ignored)."""
    declared = durable_fields(type(instance))
    for name, value in values.items():
        if name in declared:
            instance.__dict__[name] = value


def encode(value: Any, instance: object) -> bytes:
    """``value`` (what a unit saves: fields, timers) as msgpack, or a :class:`StateError`
    naming the field that cannot be."""
    try:
        return pack(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _refusal(instance, exc) from exc


def decode(data: bytes) -> Any:
    # msgspec first (codec.unpack): it reads a map key saved as an array (a tuple's) back as
    # a tuple, as wake_and_declares reads it when a store takes the state; msgpack refuses it.
    try:
        return unpack(data)
    except Exception as exc:
        raise StateError(f"saved state is not readable: {exc}") from exc


def save_fields(instance: object) -> bytes:
    """The durable fields of ``instance`` as bytes :func:`load_fields` reads back."""
    return encode(field_values(instance), instance)


def load_fields(instance: object, data: bytes) -> None:
    set_field_values(instance, decode(data))


def _refusal(instance: object, exc: Exception) -> StateError:
    """Which field could not be encoded, and what to do about it."""
    cls = type(instance)
    for name, value in field_values(instance).items():
        try:
            msgpack.packb(value, use_bin_type=True)
        except (TypeError, ValueError, OverflowError):
            culprit = _unencodable(value)
            what = type(culprit).__name__ if culprit is not None else type(value).__name__
            hint = ", e.g. a set to a sorted list" if isinstance(culprit, set | frozenset) else ""
            return StateError(
                f"{cls.__qualname__}.{name} holds a {what}, which durable state cannot save (msgpack "
                f"encodes None, bool, int, float, str, bytes, and lists, tuples and dicts of them): "
                f"convert it{hint}"
            )
    return StateError(f"{cls.__qualname__}: its state cannot be saved: {exc}")


def _unencodable(value: Any) -> Any:
    """The first value inside ``value`` msgpack cannot encode (None: none found)."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        if isinstance(value, int) and not -(2**63) <= value < 2**64:
            return value
        return None
    if isinstance(value, list | tuple):
        for item in value:
            if (bad := _unencodable(item)) is not None:
                return bad
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            for part in (key, item):
                if (bad := _unencodable(part)) is not None:
                    return bad
        return None
    return value


# -- timers ------------------------------------------------------------------------------------
EVENT_TIME = "event"
PROCESSING_TIME = "processing"


class Timer:
    """A timer that fired: what ``on_timer`` is given.

    ``name``: the name it was set with; ``time``: when it was due (event time for an
    event-time timer, the queue's processing clock for a processing-time one); ``kind``:
    ``"event"`` or ``"processing"``."""

    __slots__ = ("name", "time", "kind")

    def __init__(self, name: str, time: float, kind: str) -> None:
        self.name, self.time, self.kind = name, time, kind

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Timer) and (self.name, self.time, self.kind) == (other.name, other.time, other.kind)

    def __hash__(self) -> int:
        return hash((self.name, self.time, self.kind))

    def __repr__(self) -> str:
        return f"Timer({self.name!r}, {self.time!r}, {self.kind!r})"


class TimerTable:
    """One activation's timers, each named (setting a name again moves it, as an Orleans
    reminder is registered or updated): durable, saved with its state.

    Due times are kept as integer microseconds (:mod:`streams.core.micros`), so a timer at
    ``0.1 + 0.2`` s is due when the watermark reaches 0.3 s; they are given and read back
    in seconds.

    >>> timers = TimerTable(event_time=True)
    >>> timers.at_event_time(60.0, "close-day"); timers.at_processing_time(5.0, "ping")
    >>> timers.at_event_time(0.1 + 0.2, "close-day")  # moved, not added
    >>> timers.due(EVENT_TIME, 0.3), timers.due(EVENT_TIME, 45.0), len(timers)
    ([Timer('close-day', 0.3, 'event')], [], 1)
    """

    __slots__ = ("_timers", "_order", "_event_time", "changed", "clock")

    def __init__(self, *, event_time: bool, clock: Clock = WALL_CLOCK) -> None:
        # (kind, name) -> (due in microseconds, order set): the order breaks ties between
        # equal due times
        self._timers: dict[tuple[str, str], tuple[float, int]] = {}
        self._order = 0
        self._event_time = event_time  # the consumer works in event time (has a watermark)
        self.changed = False  # set or cancelled since the owner last looked
        # The worker's processing clock (the runtime sets it when it activates the instance;
        # the harness's is the one its test moves).
        self.clock = clock

    def __len__(self) -> int:
        return len(self._timers)

    def at_event_time(self, when: float, name: str = "") -> None:
        """Call ``on_timer`` at the first step whose watermark reaches ``when`` (``W ≥ when``)."""
        if not self._event_time:
            raise StateError(
                "event-time timers need an event-time consumer (declare event_time = EventTime(...)); "
                "a plain consumer has processing-time timers (at_processing_time)"
            )
        self._set(EVENT_TIME, name, when)

    def now(self) -> float:
        """The processing clock's time now (POSIX seconds): ``at_processing_time(now() + 300)``
        is five minutes from now, by the worker's clock (the harness's in a test).

        >>> from streams.core.clock import ManualClock
        >>> TimerTable(event_time=False, clock=ManualClock(100.0)).now()
        100.0
        """
        return self.clock.now()

    def at_processing_time(self, when: float, name: str = "") -> None:
        """Call ``on_timer`` at the first tick at or after ``when`` (POSIX seconds, by the
        queue's processing clock: the newest record's arrival during a backlog)."""
        self._set(PROCESSING_TIME, name, when)

    def cancel(self, name: str = "", kind: str | None = None) -> bool:
        """Remove the timer ``name`` (of ``kind``, or of either kind); True if there was one."""
        kinds = (EVENT_TIME, PROCESSING_TIME) if kind is None else (kind,)
        found = [self._timers.pop((k, name), None) is not None for k in kinds]
        self.changed = self.changed or any(found)
        return any(found)

    def pending(self) -> list[Timer]:
        """The timers set and not fired, soonest first."""
        ordered = sorted(self._timers.items(), key=lambda item: item[1])
        return [Timer(name, to_seconds(due), kind) for (kind, name), (due, _) in ordered]

    def next_due(self, kind: str) -> float | None:
        """The earliest due time of a timer of ``kind`` (None: none)."""
        dues = [due for (k, _), (due, _) in self._timers.items() if k == kind]
        return to_seconds(min(dues)) if dues else None

    def due(self, kind: str, now: float, *, before: float | None = None) -> list[Timer]:
        """Remove and return the timers of ``kind`` due at ``now`` (due time ``≤ now``) and,
        with ``before``, due strictly before it, in order of due time, then of being set."""
        last = bound_micros(now)
        if before is not None:
            last = min(last, bound_micros(before) - 1)  # whole microseconds: < before is ≤ before - 1
        fired = sorted(
            ((due, order, name) for (k, name), (due, order) in self._timers.items() if k == kind and due <= last)
        )
        for _, _, name in fired:
            del self._timers[(kind, name)]
        if fired:
            self.changed = True
        return [Timer(name, to_seconds(due), kind) for due, _, name in fired]

    def _set(self, kind: str, name: str, when: float) -> None:
        if not isinstance(name, str):
            raise TypeError(f"a timer's name is a str, not {type(name).__name__}")
        if isinstance(when, bool) or not isinstance(when, int | float) or when != when:
            raise TypeError(f"a timer's time is a number of seconds, not {when!r}")
        self._order += 1
        self._timers[(kind, name)] = (bound_micros(when), self._order)
        self.changed = True

    def dump(self) -> list[list[Any]]:
        return [[kind, name, due, order] for (kind, name), (due, order) in self._timers.items()]

    def load(self, rows: list[list[Any]]) -> None:
        self._timers = {(kind, name): (due, order) for kind, name, due, order in rows}
        self._order = max((order for _, _, _, order in rows), default=0)


class Timers:
    """Declares that a consumer type sets timers: ``timers = Timers()``; its instances set
    them through ``self.timers`` (a :class:`TimerTable`) and receive ``on_timer(timer)``.

    >>> class Session:
    ...     timers = Timers()
    ...     def on_timer(self, timer): ...
    >>> s = Session()
    >>> s.timers.at_processing_time(100.0, "idle"); [t.name for t in s.timers.pending()]
    ['idle']
    """

    __slots__ = ("name",)

    def __init__(self) -> None:
        self.name = "timers"

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type) -> Timers: ...

    @overload
    def __get__(self, instance: object, owner: type) -> TimerTable: ...

    def __get__(self, instance: object | None, owner: type) -> Timers | TimerTable:
        if instance is None:
            return self
        table = TimerTable(event_time=getattr(owner, "event_time", None) is not None)
        instance.__dict__[self.name] = table  # shadows the descriptor from now on
        return table


def timers_of(instance: object) -> TimerTable | None:
    """The timer table of ``instance`` if its type declares :class:`Timers` (made now if
    it was never used), else None."""
    for name, _declared in _declared_timers(type(instance)):
        table = getattr(instance, name)
        return table if isinstance(table, TimerTable) else None
    return None


_TIMERS: dict[type, list[tuple[str, Timers]]] = {}


def _declared_timers(cls: type) -> list[tuple[str, Timers]]:
    found = _TIMERS.get(cls)
    if found is None:
        found = _TIMERS[cls] = [(n, v) for base in cls.__mro__ for n, v in vars(base).items() if isinstance(v, Timers)][
            :1
        ]
    return found


def is_stateful(cls: type) -> bool:
    """Whether ``cls`` declares durable fields or timers (its activations' state is saved)."""
    return bool(durable_fields(cls) or _declared_timers(cls))


# -- the saved unit ----------------------------------------------------------------------------
# A unit begins with a byte msgpack never starts a value with, so a window-only snapshot
# (a msgpack map, as streams.eventtime.snapshot writes it) reads back as one unchanged.
_UNIT = b"\xc1"
OLD_TIMES = (
    "this saved state was written by a version of headrace that kept times as float seconds "
    "(saved state format 1); this version keeps them as integer microseconds and does not read it. "
    "Finish the queue with the version that saved it, or start the consumer type afresh (a new "
    "store, or its saved state removed) so that it replays its queue"
)
UNIT_FORMAT = 2  # 2: timers' due times in integer microseconds (1 had float seconds)


def pack_unit(instance: object, windows: bytes | None, timers: TimerTable | None, held: bytes | None = None) -> bytes:
    """An activation's saved unit: its window state (if any), durable fields and timers, and
    the events it holds for the watermark (``held``, a windowless handoff's)."""
    body = [UNIT_FORMAT, windows, field_values(instance), None if timers is None else timers.dump(), held]
    return _UNIT + encode(body, instance)


def unpack_unit(instance: object, data: bytes, timers: TimerTable | None) -> tuple[bytes | None, bytes | None]:
    """Restore the fields and timers of a saved unit into ``instance``; ``(its window state,
    the events it held)`` back (a window-only snapshot is returned as it is)."""
    if not data.startswith(_UNIT):
        return data, None
    body = decode(data[1:])
    if isinstance(body, list) and body and body[0] == 1:
        raise StateError(OLD_TIMES)
    if not isinstance(body, list) or not body or body[0] != UNIT_FORMAT:
        raise StateError(f"unknown saved state format {body[0] if isinstance(body, list) and body else body!r}")
    windows, values, timer_rows = body[1:4]
    held = body[4] if len(body) > 4 else None
    set_field_values(instance, values)
    if timers is not None and timer_rows:
        timers.load(timer_rows)
    return _bytes(windows), _bytes(held)


def _bytes(value: Any) -> bytes | None:
    return value if value is None or isinstance(value, bytes) else bytes(value)


def next_processing_timer(data: bytes) -> float | None:
    """When the earliest processing-time timer of a saved unit is due (None: it has none):
    what a worker must wake an inactive activation for."""
    return _next_timer(decode(data[1:])) if data.startswith(_UNIT) else None


def wake_and_declares(data: bytes) -> tuple[float | None, bool]:
    """:func:`next_processing_timer` of saved bytes, and whether they hold durable fields
    or timers of a consumer's own (not only its windows or held events: the state a lookup
    store reads by key rather than at start); read once, as a store writes both beside
    each state.

    >>> class Meter:
    ...     total = Durable(0)
    >>> meter = Meter(); meter.total = 3
    >>> wake_and_declares(pack_unit(meter, None, None)), wake_and_declares(b"windows only")
    ((None, True), (None, False))
    """
    if not data.startswith(_UNIT):
        return None, False
    try:  # the unit's five parts, its windows and held events (the bulk) left unread
        fmt, _, fields, timers, _ = _unit_outline(data[1:])
    except msgspec.MsgspecError:  # another shape (an older unit): read whole
        body = decode(data[1:])
        return _next_timer(body), _declares(body)
    if timers:
        return _next_timer([fmt, None, None, timers]), True
    return None, bool(fields)


# A unit read for what a store keeps beside it (wake_and_declares): the parts it needs decoded,
# its windows and held events skipped as raw msgpack.
_unit_outline = msgspec.msgpack.Decoder(tuple[Any, msgspec.Raw, Any, Any, msgspec.Raw], ext_hook=as_ext_type).decode


def _declares(body: Any) -> bool:
    return isinstance(body, list) and len(body) > 3 and bool(body[2] or body[3])


def _next_timer(body: Any) -> float | None:
    rows = body[3] if isinstance(body, list) and len(body) > 3 else None
    dues = [due for kind, _, due, _ in rows or () if kind == PROCESSING_TIME]
    if dues and body[0] != UNIT_FORMAT:
        return None  # an older unit: refused when restored (OLD_TIMES)
    return to_seconds(min(dues)) if dues else None


def unit_json(data: bytes) -> dict[str, Any]:
    """A saved unit as plain values, for people (``headrace state``): fields, timers and
    whether windows are open."""
    if not data.startswith(_UNIT):
        return {"fields": {}, "timers": [], "windows": True}
    body = decode(data[1:])
    if not isinstance(body, list) or len(body) < 4:
        raise StateError(f"saved state of an unknown shape: {body!r:.80}")
    _, windows, values, timer_rows = body[:4]
    timers = [
        {"kind": kind, "name": name, "time": to_seconds(due) if body[0] == UNIT_FORMAT else due}
        for kind, name, due, _ in sorted(timer_rows or [], key=lambda r: (r[2], r[3]))
    ]
    return {"fields": values, "timers": timers, "windows": windows is not None}
