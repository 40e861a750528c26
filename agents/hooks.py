"""A consumer type's optional methods, looked up and adapted once per type.

An agent may activate a consumer type for a hundred thousand stream ids: finding out per
activation which of ``on_window``, ``on_events``, ``on_error``, ``on_completed`` and
``on_watermark`` it has, and whether each is a coroutine function, cost more than the rest
of an activation, and a wrapper kept per activation and method cost memory. Here it is done
once per type; an activation binds a method only when it calls it.
"""

from __future__ import annotations

import functools
import inspect
import types
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from streams.observer import _lift, is_coroutine_function

HOOK_NAMES = ("on_window", "on_events", "on_error", "on_completed", "on_watermark")

Hook = Callable[..., Awaitable[None]]  # called as hook(instance, *args)


def _unbound(fn: Callable[..., Any]) -> Hook:
    """``fn(instance, *args)`` as an async call, awaiting what a plain function returns."""
    if is_coroutine_function(fn):
        return fn

    async def call(instance: Any, *args: Any) -> None:
        result = fn(instance, *args)
        if result is not None and inspect.isawaitable(result):
            await result

    return call


def _looked_up(name: str) -> Hook:
    """For what is not a plain function on the class (a static or class method, a callable
    object): found on the instance at each call, as Python would."""

    async def call(instance: Any, *args: Any) -> None:
        result = getattr(instance, name)(*args)
        if result is not None and inspect.isawaitable(result):
            await result

    return call


def _class_hook(kind: type, name: str) -> Hook | None:
    if getattr(kind, name, None) is None:
        return None
    static = inspect.getattr_static(kind, name, None)
    return _unbound(static) if isinstance(static, types.FunctionType) else _looked_up(name)


def _instance_hook(method: Callable[..., Any]) -> Hook:
    lifted = _lift(method)
    assert lifted is not None

    def call(_instance: Any, *args: Any) -> Awaitable[None]:
        return lifted(*args)

    return call


class ConsumerHooks:
    """Which optional methods a consumer has, each callable as ``hook(instance, *args)``.

    >>> class Tolls:
    ...     def on_window(self, result): print("window", result)
    >>> hooks = ConsumerHooks.of(Tolls())
    >>> hooks.has("on_window"), hooks.has("on_error")
    (True, False)
    >>> ConsumerHooks.of(Tolls()) is hooks      # the same, for every instance of the type
    True
    """

    __slots__ = ("_hooks",)
    _by_type: weakref.WeakKeyDictionary[type, ConsumerHooks] = weakref.WeakKeyDictionary()

    def __init__(self, hooks: dict[str, Hook]) -> None:
        self._hooks = hooks

    @classmethod
    def of(cls, instance: Any) -> ConsumerHooks:
        """The hooks of ``instance``'s type (its own, if it sets one of them itself)."""
        own = getattr(instance, "__dict__", None)
        kind = type(instance)
        if own and any(name in own for name in HOOK_NAMES):
            mixed = {name: _instance_hook(own[name]) if name in own else _class_hook(kind, name) for name in HOOK_NAMES}
            return cls({name: hook for name, hook in mixed.items() if hook is not None})
        hooks = cls._by_type.get(kind)
        if hooks is None:
            found = {name: _class_hook(kind, name) for name in HOOK_NAMES}
            hooks = cls._by_type[kind] = cls({name: hook for name, hook in found.items() if hook is not None})
        return hooks

    def has(self, name: str) -> bool:
        return name in self._hooks

    def bind(self, name: str, instance: Any) -> Callable[..., Awaitable[None]] | None:
        """``instance``'s method ``name`` as an async callable, or None if it has none."""
        hook = self._hooks.get(name)
        return None if hook is None else functools.partial(hook, instance)
