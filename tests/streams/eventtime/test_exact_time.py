"""Exact time in the core (docs/event-time.md, "Exact time"): windows of 100 ms, 250 ms and
1.5 s over millisecond timestamps on their edges, sliding windows with gaps of exactly the
span (KIP-450), sessions with gaps of exactly the session gap, tolerances at exactly their
limit, each decided on integer microseconds; and saved state of the float format refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace as Ev

import msgpack
import pytest

from streams.core.micros import to_micros, to_seconds
from streams.core.state import _UNIT, StateError, TimerTable, unpack_unit
from streams.eventtime import Count, Hopping, OrderingPolicy, Processor, Session, Sliding, Tumbling
from streams.eventtime.snapshot import SnapshotError
from tests.streams.eventtime.exact_cases import EDGE_MS, WINDOWS_MS, sliding_reference, windows_reference

T0_MS = 1_714_564_800_000  # 2024-05-01T12:00:00Z: epoch milliseconds, as Kafka carries them


def evs(times: list[object], arrivals: list[float] | None = None) -> list[Ev]:
    """Events whose value is their time (read by ``timestamp_by="t"``)."""
    arrivals = arrivals or [0.0] * len(times)
    return [
        Ev(value={"t": t}, event_time=0.0, arrival_time=a, token=i) for i, (t, a) in enumerate(zip(times, arrivals))
    ]


def fixed(size_ms: int, hop_ms: int) -> Tumbling | Hopping:
    return Tumbling(size_ms / 1000) if size_ms == hop_ms else Hopping(size_ms / 1000, hop_ms / 1000)


def closed(p: Processor, events: list[Ev]) -> list[tuple[float, float, object]]:
    out = p.on_events(events)
    return [(w.start, w.end, w.value) for w in out.windows + p.flush().windows]


def test_the_issue_s_100_ms_windows_start_where_spark_s_do():
    p = Processor(OrderingPolicy(), Tumbling(0.1))
    out = p.on_events([Ev(value=0, event_time=t, arrival_time=t, token=i) for i, t in enumerate([0.3, 0.7, 1.0, 2.3])])
    got = [(w.start, w.end, w.value) for w in out.windows + p.flush().windows]
    assert got == [(0.3, 0.4, 1), (0.7, 0.8, 1), (1.0, 1.1, 1), (2.3, 2.4, 1)]
    assert repr(got[0][0]) == "0.3" and repr(got[3][1]) == "2.4"  # the exact decimal, not 0.30000000000000004


@pytest.mark.parametrize(("size", "hop", "_spark_size", "_spark_hop"), WINDOWS_MS)
def test_sub_second_windows_on_their_edges_match_the_exact_reference_in_every_time_form(
    size, hop, _spark_size, _spark_hop
):
    expected = [((T0_MS + s) / 1000, (T0_MS + e) / 1000, n) for s, e, n in windows_reference(EDGE_MS, size, hop)]
    base = datetime.fromtimestamp(T0_MS // 1000, tz=UTC)
    forms = {
        "ms": ([T0_MS + t for t in EDGE_MS], "ms"),
        "us": ([(T0_MS + t) * 1000 for t in EDGE_MS], "us"),
        "seconds": ([(T0_MS + t) / 1000 for t in EDGE_MS], "s"),
        "iso": [[(base + timedelta(milliseconds=t)).isoformat() for t in EDGE_MS], "s"],
        "datetime": ([base + timedelta(milliseconds=t) for t in EDGE_MS], "s"),
    }
    for form, (times, unit) in forms.items():
        p = Processor(OrderingPolicy(timestamp_by="t", unit=unit), fixed(size, hop), Count())
        assert closed(p, evs(times)) == expected, form
    assert len(expected) == len({s for s, _, _ in expected})  # one result a window


def test_a_watermark_reads_back_exact_and_equal_windows_close_on_it():
    p = Processor(OrderingPolicy(timestamp_by="t", unit="ms"), Tumbling(0.1), Count())
    out = p.on_events(evs([200, 300]))  # W = 0.3: [0.2, 0.3) closes, 0.3 is in [0.3, 0.4)
    assert out.watermark == 0.3 and [(w.start, w.end, w.value) for w in out.windows] == [(0.2, 0.3, 1)]
    assert p.open_windows() == [(None, 0.3, 0.4)]


def test_sliding_windows_with_gaps_of_exactly_the_span_match_kip_450():
    span = 5.0
    # the issue's pair (30.02 s and 35.02 s are exactly a span apart) and more gaps of exactly
    # 5 s, 1 ms less and 1 ms more, in milliseconds
    times_ms = [30_020, 35_020, 40_020, 40_021, 45_020, 45_022, 50_021, 52_000, 57_000, 57_001]
    p = Processor(OrderingPolicy(timestamp_by="t", unit="ms"), Sliding(span), Count())
    got = sorted(closed(p, evs(times_ms)))
    us = [t * 1000 for t in times_ms]
    assert got == [(to_seconds(s), to_seconds(e), n) for s, e, n in sliding_reference(us, to_micros(span))]
    assert (30.02, 35.02, 2) in got  # both ends of a window are in it
    assert (35.020001, 40.020001, 1) in got  # a right window starts a microsecond after its event


@pytest.mark.parametrize("span_ms", [100, 250, 1500])
def test_sliding_windows_over_millisecond_grids_match_kip_450(span_ms):
    times_ms = sorted({t for t in EDGE_MS if t % 3 != 1} | {t + span_ms for t in EDGE_MS[::5]})
    p = Processor(OrderingPolicy(timestamp_by="t"), Sliding(span_ms / 1000), Count())
    got = sorted(closed(p, evs([t / 1000 for t in times_ms])))  # given as float seconds
    us = [t * 1000 for t in times_ms]
    assert got == [(to_seconds(s), to_seconds(e), n) for s, e, n in sliding_reference(us, span_ms * 1000)]


def test_events_exactly_a_session_gap_apart_are_two_sessions_and_closer_ones_one():
    # 0.007 + 0.1 > 0.107 in floats: exactly, [0.007, 0.107) only touches [0.107, 0.207)
    p = Processor(OrderingPolicy(timestamp_by="t"), Session(0.1), Count())
    assert closed(p, evs([0.007, 0.107, 0.206, 0.5])) == [(0.007, 0.107, 1), (0.107, 0.306, 2), (0.5, 0.6, 1)]
    p = Processor(OrderingPolicy(timestamp_by="t", unit="ms"), Session(0.3), Count())
    assert closed(p, evs([266, 566, 865])) == [(0.266, 0.566, 1), (0.566, 1.165, 2)]


def test_an_event_exactly_out_of_order_is_in_order_and_one_more_is_adjusted():
    # W = 0.14 - 0.1 = 0.04 exactly (0.04000000000000001 in floats): 0.04 is not below it
    p = Processor(OrderingPolicy(timestamp_by="t", out_of_order=0.1), Tumbling(0.01), Count())
    out = p.on_events(evs([0.14, 0.04, 0.039]))
    assert p.counters.out_of_order_adjusted == 1 and out.dead_letters == []
    assert closed(p, []) == [(0.04, 0.05, 2), (0.14, 0.15, 1)]  # 0.039 adjusted to W = 0.04


def test_an_event_exactly_late_arrival_late_is_not_late_and_one_microsecond_more_is():
    # arrival 0.203 - event 0.103 = 0.1 exactly (0.10000000000000002 in floats)
    policy = OrderingPolicy(timestamp_by="t", late_arrival=0.1, action="drop")
    p = Processor(policy)
    out = p.on_events(evs([0.103, 0.102999], arrivals=[0.203, 0.203]))
    assert [e.timestamp for e in out.events] == [0.103]
    assert [(d.reason, d.event_time, d.detail.split(";")[0]) for d in out.dead_letters] == [
        ("late_arrival", 0.102999, "0.100001 s behind its arrival (late_arrival 0.1 s)")
    ]


def test_an_event_exactly_early_arrival_early_is_kept():
    p = Processor(OrderingPolicy(timestamp_by="t", early_arrival=0.1, action="drop"))
    out = p.on_events(evs([0.3, 0.300001], arrivals=[0.2, 0.2]))
    assert [e.timestamp for e in out.events] == [0.3] and [d.reason for d in out.dead_letters] == ["early_arrival"]


def test_a_float_is_rounded_to_the_nearest_microsecond_once():
    p = Processor(OrderingPolicy(timestamp_by="t"), Tumbling(0.000002), Count())
    assert closed(p, evs([0.0000014, 0.0000016, 0.1 + 0.2])) == [
        (0.0, 0.000002, 1),
        (0.000002, 0.000004, 1),
        (0.3, 0.300002, 1),
    ]
    with pytest.raises(Exception, match="at least 0.000001"):
        Tumbling(0.0000004)  # rounds to no time at all


def test_event_time_timers_are_due_by_exact_microseconds():
    timers = TimerTable(event_time=True)
    timers.at_event_time(0.1 + 0.2, "a")
    timers.at_event_time(0.3000004, "b")  # the same microsecond
    timers.at_event_time(0.300001, "c")
    assert [t.name for t in timers.due("event", 0.3)] == ["a", "b"]
    assert [(t.name, t.time) for t in timers.due("event", 0.4, before=0.300001)] == []
    assert [(t.name, t.time) for t in timers.due("event", 0.4)] == [("c", 0.300001)]


def test_a_window_snapshot_of_the_float_format_is_refused_saying_what_to_do():
    p = Processor(OrderingPolicy(), Tumbling(10))
    old = msgpack.packb({"format": 1, "input": [1.0, float("inf"), False, float("inf"), [1.0, 1.0, 1.0, 0, 1.0]]})
    with pytest.raises(
        SnapshotError, match=r"float seconds \(saved state format 1\).*Finish the queue with the version"
    ):
        p.restore(old)
    # the current format reads back
    p.on_events([Ev(value=0, event_time=0.3, arrival_time=0.3, token=0)])
    q = Processor(OrderingPolicy(), Tumbling(10))
    q.restore(p.snapshot())
    assert q.watermark == 0.3 and q.open_windows() == [(None, 0.0, 10.0)]


def test_saved_timers_of_the_float_format_are_refused_saying_what_to_do():
    old = _UNIT + msgpack.packb([1, None, {}, [["event", "a", 0.3, 1]], None])
    with pytest.raises(StateError, match="integer microseconds and does not read it"):
        unpack_unit(object(), old, TimerTable(event_time=True))
