"""One event never fails its batch in the core: times that are not
finite, not parseable or beyond what a handoff can hold are dead-lettered as
``invalid_timestamp``; a key or aggregate that raises dead-letters its event as
``invalid_value``; the others go on."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

from streams.core.batch import Event
from streams.core.errors import ConfigurationError
from streams.core.ids import SequenceToken
from streams.eventtime import Count, OrderingPolicy, Processor, Sum, Tumbling
from streams.eventtime.policy import timestamp_extractor
from tests.streams.eventtime.helpers import SID

BAD_TIMES = [math.nan, math.inf, -math.inf, 1.7e15, 1.7e12, -1e12, "12:00", None]  # 1.7e15: epoch µs as seconds


def with_values(values: list[object], arrival: float = 5.0, times: list[object] | None = None) -> list[Event]:
    """Events with these values (and event times: 0.0 unless given), token ``0:n``."""
    made = []
    for n, value in enumerate(values):
        at = 0.0 if times is None else times[n]
        made.append(Event(value, at, arrival + n * 0.001, SequenceToken(0, n), SID))  # type: ignore[arg-type]
    return made


@pytest.mark.parametrize("bad", BAD_TIMES)
@pytest.mark.parametrize("by", [None, "time"])
def test_a_bad_time_dead_letters_only_its_event(bad, by):
    p = Processor(OrderingPolicy(timestamp_by=by), Tumbling(10))
    evs = with_values([{"time": 1.0}, {"time": bad}, {"time": 2.0}], times=[1.0, bad, 2.0] if by is None else None)
    out = p.on_events(evs)
    [letter] = out.dead_letters
    assert letter.reason == "invalid_timestamp"
    assert letter.sequence_number == 0 and "token 0:1" in letter.detail
    assert letter.value == {"time": bad} or math.isnan(letter.value["time"])
    assert p.counters.invalid_timestamp == 1 and p.counters.events == 3
    assert p.open_windows() == [(None, 0.0, 10.0)]
    [window] = p.flush().windows
    assert (window.start, window.end, window.value) == (0.0, 10.0, 2)  # the first and the third


def test_the_reason_says_what_is_wrong_with_the_time():
    p = Processor(OrderingPolicy(timestamp_by="time"))
    out = p.on_events(with_values([{"time": math.nan}, {"time": 1.7e15}, {"time": "12:00"}]))
    nan, micros, text = (d.detail for d in out.dead_letters)
    assert "not a finite time" in nan
    assert "beyond year 9999" in micros and "unit" in micros
    assert "ISO-8601" in text


def test_iso_8601_times_with_an_offset_are_parsed():
    p = Processor(OrderingPolicy(timestamp_by="time"))
    out = p.on_events(
        with_values(
            [
                {"time": "2024-05-01T12:00:01Z"},
                {"time": "2024-05-01T14:00:05+02:00"},
                {"time": datetime(2024, 5, 1, 12, 0, 7, tzinfo=UTC)},
                {"time": datetime(2024, 5, 1, 13, 0, 9, tzinfo=timezone(timedelta(hours=1)))},
                {"time": 1714564811},
            ]
        )
    )
    base = datetime(2024, 5, 1, 12, tzinfo=UTC).timestamp()
    assert [o.timestamp - base for o in out.events] == [1.0, 5.0, 7.0, 9.0, 11.0]
    assert out.dead_letters == []


def test_an_iso_time_without_an_offset_is_refused_and_says_so():
    p = Processor(OrderingPolicy(timestamp_by="time"))
    out = p.on_events(with_values([{"time": "2024-05-01T12:00:01"}, {"time": "2024-05-01T12:00:02Z"}]))
    assert len(out.events) == 1
    [letter] = out.dead_letters
    assert letter.reason == "invalid_timestamp"
    assert "no UTC offset" in letter.detail


def test_epoch_milliseconds_with_unit_ms():
    p = Processor(OrderingPolicy(timestamp_by="ts", unit="ms"), Tumbling(60))
    out = p.on_events(with_values([{"ts": 1_714_564_800_500}, {"ts": 1_714_564_859_999}, {"ts": 1_714_564_860_000}]))
    assert out.dead_letters == []
    assert [(w.start, w.value) for w in out.windows + p.flush().windows] == [(1714564800.0, 2), (1714564860.0, 1)]
    # ISO text and datetimes are not scaled: they name their instant
    assert timestamp_extractor("ts", "ms")(with_values([{"ts": "1970-01-01T00:00:02Z"}])[0]) == 2_000_000  # µs


def test_without_unit_ms_epoch_milliseconds_are_refused():
    out = Processor(OrderingPolicy(timestamp_by="ts")).on_events(with_values([{"ts": 1_714_564_800_500}]))
    assert [d.reason for d in out.dead_letters] == ["invalid_timestamp"]


def test_an_unknown_unit_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="unit must be one of s, ms, us"):
        OrderingPolicy(timestamp_by="ts", unit="minutes")


def test_an_aggregate_that_raises_dead_letters_its_event_only():
    p = Processor(OrderingPolicy(), Tumbling(10), Sum(), select="amount")
    evs = with_values([{"amount": 1.0}, {"amount": "two"}, {"amount": 3.0}], times=[1.0, 2.0, 3.0])
    out = p.on_events(evs)
    [letter] = out.dead_letters
    assert (letter.reason, letter.value, letter.event_time) == ("invalid_value", {"amount": "two"}, 2.0)
    assert "TypeError" in letter.detail and "Sum" in letter.detail
    assert [w.value for w in p.flush().windows] == [4.0]
    assert p.counters.invalid_value == 1


def test_a_key_function_that_raises_dead_letters_its_event_only():
    p = Processor(OrderingPolicy(over=lambda e: e.value["device"]), Tumbling(10), Count())
    evs = with_values([{"device": "a"}, {}, {"device": "a"}], times=[1.0, 2.0, 3.0])
    out = p.on_events(evs)
    assert [(d.reason, d.value) for d in out.dead_letters] == [("invalid_value", {})]
    assert "KeyError" in out.dead_letters[0].detail
    assert [(w.key, w.value) for w in p.flush().windows] == [("a", 2)]


@pytest.mark.parametrize("error", [ZeroDivisionError, RuntimeError, KeyError])
def test_a_timestamp_function_that_raises_anything_dead_letters_its_event_as_an_invalid_timestamp(error):
    def event_time(e):
        if e.value.get("bad"):
            raise error("no time here")
        return e.value["t"]

    p = Processor(OrderingPolicy(timestamp_by=event_time), Tumbling(10), Count())
    out = p.on_events(with_values([{"t": 1.0}, {"t": 2.0, "bad": True}, {"t": 3.0}]))
    [letter] = out.dead_letters
    assert (letter.reason, letter.value) == ("invalid_timestamp", {"t": 2.0, "bad": True})
    assert error.__name__ in letter.detail and "no time here" in letter.detail
    assert "in event_time" in letter.detail  # its traceback, naming the user's function
    assert "key" not in letter.detail.split("\n")[0]  # not blamed on a key function
    assert [w.value for w in p.flush().windows] == [2]
    assert (p.counters.invalid_timestamp, p.counters.invalid_value) == (1, 0)


@pytest.mark.parametrize(
    ("action", "counted"), [("adjust", "late_arrival_adjusted"), ("accept", "late_arrival_accepted")]
)
def test_an_event_dead_lettered_by_its_aggregate_is_not_counted_as_adjusted(action, counted):
    p = Processor(OrderingPolicy(late_arrival=1, action=action), Tumbling(100), Sum(), select="amount")
    # the second is late and out of order
    evs = with_values([{"amount": 1.0}, {"amount": "two"}], arrival=20.0, times=[19.5, 3.0])
    out = p.on_events(evs)
    assert [d.reason for d in out.dead_letters] == ["invalid_value"]
    c = p.counters
    assert (c.adjusted, c.late_arrival_adjusted, c.late_arrival_accepted) == (0, 0, 0)
    assert (c.out_of_order_adjusted, c.out_of_order_accepted, c.invalid_value, getattr(c, counted)) == (0, 0, 1, 0)
