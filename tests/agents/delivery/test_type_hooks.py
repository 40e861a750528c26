"""A consumer type's hooks, inspected once per type (streams.core.observer.TypeHooks): each
instance gets what ``lift(getattr(instance, name, None))`` gave it, whatever the type's shape."""

from __future__ import annotations

import gc
import weakref

import anyio

import streams.core.observer as observer_module
from streams.core.observer import TypeHooks, hooks_of

NAMES = ("on_next", "on_error", "on_completed", "on_watermark")


def _called(hook, *args):
    return anyio.run(hook, *args)


def test_a_type_is_inspected_once_for_all_its_instances(monkeypatch):
    inspected = []
    real = observer_module._inspect
    monkeypatch.setattr(observer_module, "_inspect", lambda cls, name: inspected.append(name) or real(cls, name))

    class Consumer:
        def __init__(self):
            self.seen = []

        def on_next(self, batch):
            self.seen.append(batch)

        async def on_completed(self):
            self.seen.append("done")

    hooks = hooks_of(Consumer)
    first, second = Consumer(), Consumer()
    for c in (first, second):
        on_next, on_error, on_completed, on_watermark = hooks.bind(c, *NAMES)
        assert (on_error, on_watermark) == ((None, None), (None, None))
        assert on_next[0] == c.on_next and on_completed[1] == c.on_completed
        _called(on_next[1], [1])
        _called(on_completed[1])
    assert sorted(inspected) == ["on_completed", "on_next"]  # once each, for two instances
    assert first.seen == [[1], "done"] and second.seen == [[1], "done"]
    assert hooks_of(Consumer) is hooks


def test_what_an_instance_sets_of_its_own_wins_and_is_inspected_itself():
    class Consumer:
        def on_next(self, batch):
            raise AssertionError("the instance's own on_next should be called")

    own_calls = []

    async def own(batch):
        own_calls.append(batch)

    plain, special = Consumer(), Consumer()
    special.on_next = own
    hooks = hooks_of(Consumer)
    [(user_plain, _)] = hooks.bind(plain, "on_next")
    [(user_special, lifted)] = hooks.bind(special, "on_next")
    assert user_special is own and lifted is own  # a coroutine function: itself, as lift gives
    _called(lifted, [2])
    assert own_calls == [[2]]
    assert user_plain.__func__ is Consumer.on_next


def test_static_methods_callable_objects_and_getattr_types_are_lifted_as_before():
    calls = []

    class Hook:
        def __call__(self, batch):
            calls.append(("object", batch))

    class Odd:
        on_next = Hook()

        @staticmethod
        def on_completed():
            calls.append(("static",))

        def __getattr__(self, name):
            if name == "on_watermark":
                return lambda wm: calls.append(("computed", wm))
            raise AttributeError(name)

    odd = Odd()
    on_next, on_error, on_completed, on_watermark = hooks_of(Odd).bind(odd, *NAMES)
    assert on_error == (None, None)
    _called(on_next[1], [3])
    _called(on_completed[1])
    _called(on_watermark[1], 7.0)
    assert calls == [("object", [3]), ("static",), ("computed", 7.0)]


def test_a_method_replaced_on_the_type_after_its_first_instance_is_the_one_bound():
    class Consumer:
        async def on_next(self, batch):
            pass

    hooks = hooks_of(Consumer)
    hooks.bind(Consumer(), "on_next")
    seen = []
    Consumer.on_next = lambda self, batch: seen.append(batch)  # sync now
    [(user, lifted)] = hooks.bind(Consumer(), "on_next")
    _called(lifted, [4])
    assert seen == [[4]]


def test_the_table_of_types_keeps_no_type_alive():
    def make():
        class Base:
            def on_next(self, batch):
                pass

        class Consumer(Base):
            def on_next(self, batch):  # refers to its class (super): a cycle through it
                super().on_next(batch)

        hooks_of(Consumer).bind(Consumer(), *NAMES)
        return weakref.ref(Consumer)

    ref = make()
    gc.collect()
    assert ref() is None
    assert isinstance(hooks_of(int), TypeHooks)
