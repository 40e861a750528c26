"""Processors built from shared parts (streams.eventtime.parts): one declaration prepared once,
each processor with its own watermarks, windows and counters, behaving as one built alone."""

from __future__ import annotations

import pickle
from types import SimpleNamespace as Ev

import pytest

from streams.core.errors import ConfigurationError
from streams.eventtime import Count, EventTime, Hopping, OrderingPolicy, Processor, Sum, Tumbling
from streams.eventtime.declaration import Declaration
from streams.eventtime.parts import ProcessorParts


def _events(times, key="a"):
    return [Ev(value={"k": key, "v": i}, event_time=t, arrival_time=t, token=i) for i, t in enumerate(times)]


def _fates(out):
    return (
        [(w.key, w.start, w.end, w.value, w.final) for w in out.windows],
        [(d.reason, d.event_time) for d in out.dead_letters],
        [(e.key, e.timestamp, e.status) for e in out.events],
        out.watermark,
    )


def test_processors_of_one_declaration_keep_their_own_state():
    spec = EventTime(OrderingPolicy(out_of_order=2), Tumbling(10), Count(), group_by="k")
    a, b = spec.processor("devices/a"), spec.processor("devices/b")
    assert spec.parts() is spec.parts()
    out = a.on_events(_events([1.0, 2.0, 3.0]), "devices/a")
    assert out.windows == []
    assert a.open_windows() == [("a", 0.0, 10.0)]
    assert b.open_windows() == []  # a's events are a's alone
    assert (a.counters.events, b.counters.events) == (3, 0)
    assert (a.watermark, b.watermark) == (1.0, float("-inf"))
    closed = b.on_events(_events([4.0, 15.0], key="b"), "devices/b")
    assert [(w.key, w.value) for w in closed.windows] == [("b", 1)]
    assert a.open_windows() == [("a", 0.0, 10.0)]
    assert [(w.key, w.value) for w in a.flush().windows] == [("a", 3)]
    assert a.metrics().watermarks == {"devices/a": float("inf")}
    assert b.metrics().watermarks == {"devices/b": 13.0}


@pytest.mark.parametrize(
    "declare",
    [
        lambda: dict(policy=OrderingPolicy(out_of_order=1.0), window=Tumbling(5), group_by="k"),
        lambda: dict(
            policy=OrderingPolicy(out_of_order=1.0, late_arrival=3.0, action="drop"),
            window=Hopping(6, 2),
            aggregate=Sum(),
            select=lambda e: e.value["v"],
        ),
        lambda: dict(policy=OrderingPolicy(over="k", out_of_order=0.5), window=Tumbling(4)),
        lambda: dict(policy=OrderingPolicy(out_of_order=1.0)),
    ],
)
def test_a_processor_from_parts_gives_what_one_built_alone_gives(declare):
    times = [1.0, 3.0, 2.0, 9.0, 4.0, 12.0, 0.5, 20.0, 19.0]
    alone = Processor(inputs=("p",), **declare())
    settings = declare()
    parts = ProcessorParts(Declaration(**settings))
    built = Processor.of(parts, "p")
    for i in range(0, len(times), 2):
        batch = _events(times[i : i + 2], key="ab"[i % 2])
        assert _fates(built.on_events(batch, "p")) == _fates(alone.on_events(batch, "p"))
    assert _fates(built.on_tick(30.0)) == _fates(alone.on_tick(30.0))
    assert _fates(built.flush()) == _fates(alone.flush())
    assert built.counters == alone.counters


def test_a_declaration_no_processor_could_follow_is_refused_as_before():
    with pytest.raises(ConfigurationError, match="per substream key"):
        EventTime(OrderingPolicy(over="k"), Tumbling(10), group_by="other").processor("s")
    with pytest.raises(ConfigurationError, match="another declared input"):
        Processor(inputs=("a", "b"), imports={"a": "c"})
    with pytest.raises(ConfigurationError, match="a cycle"):
        Processor(inputs=("a", "b"), imports={"a": "b", "b": "a"})
    with pytest.raises(ConfigurationError, match="distinct names"):
        Processor(inputs=("a", "a"))


def test_merged_inputs_share_parts_and_follow_imports_each_on_its_own():
    spec = EventTime(OrderingPolicy(), Tumbling(10), inputs=("tolls", "prices"), imports={"prices": "tolls"})
    one, two = spec.processor(), spec.processor()
    one.on_events(_events([12.0]), "tolls")
    assert one.metrics().watermarks == {"tolls": 12.0, "prices": 12.0}  # prices follows tolls
    assert two.metrics().watermarks == {"tolls": float("-inf"), "prices": float("-inf")}


def test_a_declaration_with_its_parts_prepared_still_pickles():
    spec = EventTime(OrderingPolicy(out_of_order=5, timestamp_by="t"), Tumbling(60), Count())
    spec.processor("s")  # prepares (and keeps) its parts, which hold functions
    copy = pickle.loads(pickle.dumps(spec))
    assert (copy.policy, copy.window) == (spec.policy, spec.window)
    processor = copy.processor("s")
    processor.on_events([Ev(value={"t": 61.0}, event_time=0.0, arrival_time=0.0, token=0)], "s")
    assert processor.watermark == 56.0


def test_one_input_is_found_by_its_name_and_another_name_is_refused_naming_it():
    # One input has no dict by name (its processor compares the name); several do.
    one = Processor.of(ProcessorParts(Declaration(OrderingPolicy(), Tumbling(10))), "booths/b0")
    assert one.on_events(_events([1.0]), "booths/b0").watermark == 1.0
    with pytest.raises(ConfigurationError, match=r"unknown input 'booths/b1'.*\['booths/b0'\]"):
        one.on_events(_events([2.0]), "booths/b1")
    two = Processor(OrderingPolicy(), Tumbling(10), inputs=("a", "b"))
    assert two.on_events(_events([1.0]), "b").watermark == float("-inf")  # a has none yet
    with pytest.raises(ConfigurationError, match=r"unknown input 'c'.*\['a', 'b'\]"):
        two.on_events(_events([2.0]), "c")
    assert one.on_completed("booths/b0").watermark == float("inf")
    assert [(w.start, w.value) for w in two.flush().windows] == [(0.0, 1)]


def test_a_processor_takes_the_declarations_arguments_and_checks_them_there():
    import inspect

    declared = list(inspect.signature(Declaration).parameters)
    assert list(inspect.signature(Processor).parameters) == declared  # as help() shows it
    p = Processor(OrderingPolicy(out_of_order=2), Tumbling(10), Sum(), group_by="k", select="v")
    out = p.on_events(_events([1.0, 2.0, 13.0]))
    assert [(w.key, w.start, w.value) for w in out.windows] == [("a", 0.0, 1)]  # v = 0 + 1
    with pytest.raises(TypeError, match="unexpected keyword argument 'group'"):
        Processor(group="k")  # type: ignore[call-arg]


def test_an_event_time_declaration_refuses_a_trace_its_activations_would_not_keep():
    assert Processor(trace=True).on_events(_events([1.0])).trace
    with pytest.raises(ConfigurationError, match="trace is a Processor's"):
        EventTime(trace=True)
