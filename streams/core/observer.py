"""Observers: what consumes a stream, in whatever shape the user wrote it, and the failure handler
told when delivery fails.

Observers: what consumes a stream, in whatever shape the user wrote it.

A consumer may be a callable (sync or async) taking a batch, or an object with ``on_next``
and optionally ``on_error``, ``on_completed`` and ``on_watermark``, each sync or async.
:func:`as_observer` turns any of these into one :class:`StreamObserver`. A worker makes an
activation per stream id, each an instance of the same few types: whether a hook is a
coroutine function is asked once per function (:func:`is_coroutine_function`), and an
event-time consumer type's hooks are looked up once per type (:func:`hooks_of`).

Being told when delivery fails (Orleans' ``IStreamFailureHandler``).
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import FunctionType, MethodType
from typing import Any, Protocol, TypeVar, overload, runtime_checkable

from streams.core.batch import Event, EventBatch
from streams.core.errors import user_error
from streams.core.ids import SequenceToken, StreamId

# A subscription's filter (``stream.subscribe(observer, filter=...)``, Orleans' StreamFilter):
# a plain function of one event; the event is delivered when its result is true.
EventFilter = Callable[[Event], object]


@runtime_checkable
class StreamObserver(Protocol):
    """The shape the runtime delivers to (Orleans' ``IAsyncObserver``)."""

    async def on_next(self, batch: EventBatch) -> None: ...

    async def on_error(self, error: BaseException) -> None: ...

    async def on_completed(self) -> None: ...

    async def on_watermark(self, watermark: float) -> None: ...


# A weak-keyed table kept by hand (a WeakKeyDictionary's get is a Python call more, and
# every activation asks twice): an entry goes when its function does.
_COROUTINE_FUNCTIONS: dict[weakref.ref[Any], bool] = {}


def _forget(ref: weakref.ref[Any]) -> None:
    _COROUTINE_FUNCTIONS.pop(ref, None)


def is_coroutine_function(fn: Callable[..., Any]) -> bool:
    """``inspect.iscoroutinefunction``, remembered per function: a consumer type's methods
    are asked about once per type, not once per activation (the inspection unwraps
    decorators and partials, tens of microseconds each time).

    >>> async def f(): pass
    >>> is_coroutine_function(f), is_coroutine_function(print)
    (True, False)
    """
    key = getattr(fn, "__func__", fn)  # a bound method: its function, shared by instances
    try:
        known = _COROUTINE_FUNCTIONS.get(weakref.ref(key))
    except TypeError:  # not weakly referable (a builtin), or not hashable: ask each time
        return inspect.iscoroutinefunction(fn)
    if known is None:
        known = inspect.iscoroutinefunction(fn)
        if key is fn or known == inspect.iscoroutinefunction(key):
            _COROUTINE_FUNCTIONS[weakref.ref(key, _forget)] = known
    return known


_Callback = TypeVar("_Callback", bound=Callable[..., Any])


def inline(fn: _Callback) -> _Callback:
    """Mark an ``async def`` consumer callback that never awaits, so the pulling agent calls it
    where the data arrives, with no task switch per batch.

    A plain ``def on_next`` is always called that way: it cannot suspend. An ``async def`` one
    runs in the consumer's own task unless it carries this mark; one that is marked and awaits
    all the same fails that delivery with an error that says so (it is retried and
    dead-lettered like any failing delivery).

    >>> from streams import inline
    >>> class Counter:
    ...     @inline
    ...     async def on_next(self, batch):
    ...         self.seen = len(batch)
    >>> is_inline(Counter().on_next)
    True
    """
    fn.__headrace_inline__ = True  # type: ignore[attr-defined]
    return fn


def is_inline(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` (or the function of a bound method) was marked with :func:`inline`."""
    return getattr(getattr(fn, "__func__", fn), "__headrace_inline__", False) is True


@overload
def lift(fn: None) -> None: ...


@overload
def lift(fn: Callable[..., Any]) -> Callable[..., Awaitable[None]]: ...


@overload
def lift(fn: Callable[..., Any] | None) -> Callable[..., Awaitable[None]] | None: ...


def lift(fn: Callable[..., Any] | None) -> Callable[..., Awaitable[None]] | None:
    """An async function that calls ``fn`` and awaits it if it returned an awaitable
    (``fn`` itself when it is a coroutine function; None for None).

    >>> import anyio
    >>> seen = []
    >>> anyio.run(lift(seen.append), 1), seen
    (None, [1])
    """
    if fn is None:
        return None
    if is_coroutine_function(fn):
        return fn

    return _Lifted(fn)


class _Lifted:
    """``fn`` as an async callable: one slotted object per adapted hook, where a closure
    was three (function, cell, tuple) for the collector to walk in each of a worker's
    100,000 activations."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    async def __call__(self, *args: Any) -> None:
        result = self.fn(*args)
        if result is not None and inspect.isawaitable(result):
            await result


class _LiftedMethod:
    """A type's plain method of one instance as an async callable: the function (the type's,
    shared) and the instance, where a :class:`_Lifted` of the bound method is two objects
    per hook kept by each of a worker's activations.

    >>> import anyio
    >>> class Box:
    ...     def put(self, x): self.x = x
    >>> box = Box(); hook = _LiftedMethod(Box.put, box)
    >>> anyio.run(hook, 3), box.x, plain_function(hook)(4), box.x
    (None, 3, None, 4)
    """

    __slots__ = ("function", "instance")

    def __init__(self, function: Callable[..., Any], instance: object) -> None:
        self.function = function
        self.instance = instance

    async def __call__(self, *args: Any) -> None:
        result = self.function(self.instance, *args)
        if result is not None and inspect.isawaitable(result):
            await result

    @property
    def fn(self) -> Callable[..., Any]:
        """The bound method, made when asked for."""
        return MethodType(self.function, self.instance)


class TypeMethod:
    """Stands for a consumer type's own method ``name`` as the hook of any of its instances:
    one per type and name, shared by its activations, made into one instance's hook when it
    is called (:func:`hook_of`). It holds no reference to the function (a type's hooks are
    kept weakly, see :class:`TypeHooks`).

    >>> class Box:
    ...     def put(self, x): self.x = x
    >>> box = Box(); [(_, shared)] = hooks_of(Box).bind(box, "put", shared=True)
    >>> shared is hooks_of(Box).bind(Box(), "put", shared=True)[0][1], is_plain(shared)
    (True, True)
    >>> plain_function(hook_of(shared, box))(5), box.x
    (None, 5)
    """

    __slots__ = ("name", "is_async")

    def __init__(self, name: str, is_async: bool) -> None:
        self.name = name
        self.is_async = is_async


SharedHook = Callable[..., Awaitable[None]] | TypeMethod
"""A hook as an activation keeps it: its own async callable, or its type's shared method."""


def hook_of(hook: SharedHook, instance: object) -> Callable[..., Awaitable[None]]:
    """``hook`` as an async callable of ``instance`` (bound now if it is its type's method)."""
    if type(hook) is not TypeMethod:
        return hook  # type: ignore[return-value]
    function = getattr(type(instance), hook.name)
    return MethodType(function, instance) if hook.is_async else _LiftedMethod(function, instance)


def is_plain(hook: SharedHook | None) -> bool:
    """Whether ``hook`` lifts a plain (not async) function, which may be called where it is."""
    if type(hook) is TypeMethod:
        return not hook.is_async
    return plain_function(hook) is not None  # type: ignore[arg-type]


def plain_function(hook: Callable[..., Awaitable[None]] | None) -> Callable[..., Any] | None:
    """The user's plain (not async) function behind a lifted hook, which a caller may call
    where it is, without awaiting; None for a coroutine function or no hook.

    >>> plain_function(_Lifted(print)) is print, plain_function(nothing)
    (True, None)
    """
    if type(hook) is _Lifted or type(hook) is _LiftedMethod:
        return hook.fn
    return None


async def nothing(*_: Any) -> None:
    """The hook a consumer did not write."""
    return None


# A hook as a type has it: its function, weakly (a method using super() refers to its class:
# a strong reference would keep the type, the key of a weak table, alive; None: the type has
# no plain function of that name), and whether it is a coroutine function.
_Entry = tuple["weakref.ref[FunctionType] | None", bool]
_NO_HOOK: tuple[None, None] = (None, None)
Hook = tuple[Callable[..., Any] | None, Callable[..., Awaitable[None]] | None]
"""A hook as the user wrote it, and as an async callable (None, None: no such hook)."""


class TypeHooks:
    """The hooks of one consumer type, each inspected the first time it is asked for; each
    instance's are its bound methods, lifted without asking again whether they are async
    (what an instance sets of its own, or a type computes, is lifted as before).

    >>> class Counter:
    ...     def on_next(self, batch): self.seen = batch
    >>> hooks, c = hooks_of(Counter), Counter()
    >>> hooks is hooks_of(Counter), hooks.bind(c, "on_error")
    (True, [(None, None)])
    >>> [(on_next, lifted)] = hooks.bind(c, "on_next")
    >>> import anyio
    >>> anyio.run(lifted, [1]), c.seen
    (None, [1])
    """

    __slots__ = ("checked", "_entries", "_shared")

    def __init__(self) -> None:
        # What callers have established about the type once (an event-time consumer check).
        self.checked: set[str] = set()
        self._entries: dict[str, _Entry] = {}
        self._shared: dict[str, TypeMethod] = {}

    @overload
    def bind(self, target: object, *names: str) -> list[Hook]: ...

    @overload
    def bind(
        self, target: object, *names: str, shared: bool
    ) -> list[tuple[Callable[..., Any] | None, SharedHook | None]]: ...

    def bind(
        self, target: object, *names: str, shared: bool = False
    ) -> list[Hook] | list[tuple[Callable[..., Any] | None, SharedHook | None]]:
        """``target``'s hooks ``names`` (``target`` an instance of this type), each as the
        user wrote it (``getattr(target, name, None)``) and as an async callable (``lift``
        of it); ``shared``: the type's own method as its :class:`TypeMethod` instead, which
        the caller makes into ``target``'s hook when it calls it (:func:`hook_of`)."""
        entries = self._entries
        pairs: list[Any] = []
        for name in names:
            found = getattr(target, name, None)
            if found is None:
                pairs.append(_NO_HOOK)
                continue
            entry = entries.get(name)
            if entry is None:
                entry = entries[name] = _inspect(type(target), name)
            ref, is_async = entry
            if ref is not None and type(found) is MethodType and found.__func__ is ref():
                if shared:
                    method = self._shared.get(name)
                    if method is None:
                        method = self._shared[name] = TypeMethod(name, is_async)
                    pairs.append((found, method))
                else:
                    pairs.append((found, found if is_async else _LiftedMethod(found.__func__, found.__self__)))
            else:  # not the type's function (the instance's own, a static method...): ask
                pairs.append((found, lift(found)))
        return pairs


def _inspect(cls: type, name: str) -> _Entry:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            attr = klass.__dict__[name]
            if type(attr) is FunctionType:
                return weakref.ref(attr), is_coroutine_function(attr)
            break
    return None, False


_HOOKS: weakref.WeakKeyDictionary[type, TypeHooks] = weakref.WeakKeyDictionary()


def hooks_of(cls: type) -> TypeHooks:
    """The hooks of ``cls``: one :class:`TypeHooks` per type, for as long as the type lives."""
    hooks = _HOOKS.get(cls)
    if hooks is None:
        hooks = _HOOKS[cls] = TypeHooks()
    return hooks


class _AdaptedObserver:
    """The one wrapper around a user's observer or callable (an ``agents.activation.Activation``).

    ``on_next`` is kept lifted (a keyed activation wraps it); the hooks called once in a
    while (``on_error``, ``on_completed``, ``on_watermark``) are looked up on the target when
    called, so a quiet activation, one of a worker's many, keeps no object for them.
    """

    __slots__ = ("target", "user_on_next", "on_next", "has_on_error")

    redeliverable = True  # a failed batch may be delivered again: it keeps nothing of it
    waiting_on_handoff = False  # only the runtime's event-time activations hand off
    take_now = None  # no step of its own: on_next as the user wrote it (user_on_next)

    def __init__(self, target: Any, on_next: Callable[..., Any]) -> None:
        self.target = target
        # As the user wrote it (the agent may call it directly); None: only through on_next.
        self.user_on_next: Callable[..., Any] | None = on_next
        self.on_next = lift(on_next)
        # A callable observer is its own on_next, and has no on_error of its own.
        self.has_on_error = target is not on_next and getattr(target, "on_error", None) is not None

    def _hook(self, name: str) -> Callable[..., Awaitable[None]] | None:
        return lift(getattr(self.target, name, None))

    async def on_error(self, error: BaseException) -> None:
        hook = self._hook("on_error") if self.has_on_error else None
        if hook is not None:
            await hook(error)

    async def on_completed(self) -> None:
        hook = self._hook("on_completed")
        if hook is not None:
            await hook()

    async def on_watermark(self, watermark: float) -> None:
        hook = self._hook("on_watermark")
        if hook is not None:
            await hook(watermark)


def as_observer(target: Any) -> _AdaptedObserver:
    """Adapt a callable or an observer-like object.

    >>> seen = []
    >>> observer = as_observer(seen.extend)
    """
    on_next = getattr(target, "on_next", None)
    if on_next is not None and callable(on_next):
        return _AdaptedObserver(target, on_next)
    if callable(target):
        return _AdaptedObserver(target, target)
    raise TypeError(
        f"a stream observer is a callable taking a batch, or an object with on_next(batch); got {type(target).__name__}"
    )


log = logging.getLogger("headrace.delivery")


@dataclass(frozen=True, slots=True)
class DeliveryFailure:
    subscription_id: str
    stream_id: StreamId
    token: SequenceToken | None
    error: BaseException
    faulted: bool  # the subscription was faulted because of it
    # Its traceback is in the log already (the first failure of this run of failures was
    # logged with it when its retries began): say it in one line.
    logged: bool = False


class StreamFailureHandler(Protocol):
    """Called for every failed delivery and every cache miss."""

    async def on_delivery_failure(self, failure: DeliveryFailure) -> None: ...


class LoggingFailureHandler:
    """The default handler: one warning per failure (with the traceback of an error the
    consumer raised), and a count."""

    def __init__(self) -> None:
        self.failures: int = 0

    async def on_delivery_failure(self, failure: DeliveryFailure) -> None:
        self.failures += 1
        log.warning(
            "delivery failed: stream=%s subscription=%s token=%s faulted=%s error=%r",
            failure.stream_id,
            failure.subscription_id,
            failure.token,
            failure.faulted,
            failure.error,
            # A raised error's traceback says where the consumer failed; a timeout or a
            # cache miss was never raised and has none.
            exc_info=user_error(failure.error)
            if failure.error.__traceback__ is not None and not failure.logged
            else None,
        )
