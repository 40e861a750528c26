"""The ordering policy, step by step: early, late, out of order, and what each action does."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from streams.core.errors import ConfigurationError, StreamCompletedError
from streams.eventtime import OrderingPolicy, Processor, Tumbling
from tests.streams.eventtime.helpers import SID, events, feed, outcomes


def fates(policy, rows, **kw):
    p = Processor(policy, trace=True, **kw)
    return p, [(o.status, o.reason, o.timestamp) for o in outcomes(feed(p, events(rows)))]


def test_comparisons_are_strict_at_every_tolerance():
    # exactly E early is not early; exactly L late is not late; a timestamp equal to W is in order
    _, got = fates(
        OrderingPolicy(early_arrival=5, late_arrival=10, out_of_order=3),
        [
            (105, 100),  # exactly 5 s early
            (90, 100),  # exactly 10 s late; W = max(105 - 3, 100 - 10) = 102 before it
            (102, 101),  # equal to W = 102: in order
        ],
    )
    assert got == [("kept", None, 105.0), ("adjusted", "out_of_order", 102.0), ("kept", None, 102.0)]


def test_early_events_are_dropped_and_move_no_watermark():
    p, got = fates(OrderingPolicy(early_arrival=5), [(10, 10), (16, 10.5), (11, 11)])
    assert got == [("kept", None, 10.0), ("dropped", "early_arrival", None), ("kept", None, 11.0)]
    assert p.watermark == 11.0
    assert p.counters.early_arrival == 1


@pytest.mark.parametrize(
    ("action", "expected", "counter"),
    [
        ("adjust", ("adjusted", "late_arrival", 95.0), "late_arrival_adjusted"),
        ("drop", ("dropped", "late_arrival", None), "late_arrival_dropped"),
        ("accept", ("kept", "late_arrival", 80.0), "late_arrival_accepted"),
    ],
)
def test_late_arrival_actions(action, expected, counter):
    p, got = fates(OrderingPolicy(late_arrival=5, action=action), [(80, 100)])
    assert got == [expected]
    assert getattr(p.counters, counter) == 1


@pytest.mark.parametrize(
    ("action", "expected", "counter"),
    [
        ("adjust", ("adjusted", "out_of_order", 20.0), "out_of_order_adjusted"),
        ("drop", ("dropped", "out_of_order", None), "out_of_order_dropped"),
        ("accept", ("kept", "out_of_order", 12.0), "out_of_order_accepted"),
    ],
)
def test_out_of_order_actions(action, expected, counter):
    p, got = fates(OrderingPolicy(out_of_order=5, action=action), [(25, 25), (12, 26)])
    assert got[1] == expected
    assert getattr(p.counters, counter) == 1


def test_late_then_out_of_order_reports_out_of_order():
    # late: 100 - 60 > 30 -> 70; then 70 < W = 95 -> 95; both adjust: the reason is out_of_order
    p, got = fates(OrderingPolicy(late_arrival=30, out_of_order=5), [(100, 100), (60, 100)])
    assert got[1] == ("adjusted", "out_of_order", 95.0)
    assert (p.counters.late_arrival_adjusted, p.counters.out_of_order_adjusted) == (1, 1)
    assert p.counters.adjusted == 1  # one event, however many rules moved it


def test_adjusted_counts_each_moved_event_once():
    # kept; late only (-> 170 >= W 95); kept; out of order only (190 < W 195); late, then
    # out of order (-> 173 < W 195 -> 195)
    p, got = fates(
        OrderingPolicy(late_arrival=30, out_of_order=5),
        [
            (100, 100),
            (130, 200),
            (200, 201),
            (190, 202),
            (50, 203),
        ],
    )
    assert [status for status, _, _ in got] == ["kept", "adjusted", "kept", "adjusted", "adjusted"]
    assert (p.counters.late_arrival_adjusted, p.counters.out_of_order_adjusted) == (2, 2)
    assert p.counters.adjusted == 3


def test_dropped_events_become_dead_letters_with_the_original_record():
    p = Processor(OrderingPolicy(out_of_order=1, action="drop"))
    evs = events([(10, 10), (5, 11)])
    out = p.on_events(evs)
    [letter] = out.dead_letters
    assert letter.reason == "out_of_order"
    assert (letter.value, letter.event_time, letter.stream) == ({"key": None, "n": 1}, 5.0, str(SID))
    assert (letter.queue, letter.sequence_number, letter.recorded_at) == (0, 0, 11.0)
    assert "token 0:1" in letter.detail


def test_timestamp_by_field_extractor_and_datetime():
    rows = [{"ts": 30, "d": "a"}, {"ts": datetime(1970, 1, 1, 0, 0, 20, tzinfo=UTC), "d": "a"}]
    evs = [e for e in events([(0, 100), (0, 101)])]
    for e, v in zip(evs, rows):
        e.value = v
    by_field = Processor(OrderingPolicy(timestamp_by="ts", out_of_order=15), trace=True)
    by_function = Processor(OrderingPolicy(timestamp_by=lambda e: e.value["ts"], out_of_order=15), trace=True)
    for p in (by_field, by_function):
        assert [o.timestamp for o in p.on_events(evs).events] == [30.0, 20.0]


def test_an_unusable_timestamp_is_dead_lettered():
    evs = events([(0, 1), (0, 2)])
    evs[0].value = {"ts": 5.0}
    evs[1].value = {"ts": datetime(2024, 1, 1)}  # naive: ambiguous
    p = Processor(OrderingPolicy(timestamp_by="ts"))
    out = p.on_events(evs)
    assert [o.timestamp for o in out.events] == [5.0]
    assert [d.reason for d in out.dead_letters] == ["invalid_timestamp"]
    assert "timezone" in out.dead_letters[0].detail


def test_without_a_window_kept_events_pass_through_with_their_timestamps():
    p = Processor(OrderingPolicy(out_of_order=0))
    out = p.on_events(events([(1, 1), (3, 3), (2, 4)]))
    assert [(o.record.value["n"], o.timestamp, o.status) for o in out.events] == [
        (0, 1.0, "kept"),
        (1, 3.0, "kept"),
        (2, 3.0, "adjusted"),
    ]
    assert out.watermark == 3.0


def test_nothing_is_taken_after_completion():
    p = Processor()
    p.on_completed(0, arrival_time=5.0)
    with pytest.raises(StreamCompletedError, match="completed"):
        p.on_events(events([(1, 6)]))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: OrderingPolicy(out_of_order=-1), "out_of_order must be a duration"),
        (lambda: OrderingPolicy(late_arrival=float("nan")), "late_arrival must be"),
        (lambda: OrderingPolicy(action="ignore"), "action must be one of adjust, drop, accept"),
        (lambda: OrderingPolicy(over=3), "over must be a field name"),
        (lambda: Processor(OrderingPolicy(over="d"), inputs=[0, 1]), "substreams .* apply within one input"),
        (lambda: Processor(OrderingPolicy(over="d"), group_by="other"), "windows are per substream key"),
        (lambda: Processor(inputs=[0, 0]), "distinct"),
        (lambda: Processor(inputs=["a", "b"], imports={"a": "c"}), "imports maps"),
        (lambda: Processor(inputs=["a", "b"], imports={"a": "b", "b": "a"}), "cycle"),
        (lambda: Tumbling(0), "size must be"),
        (lambda: Tumbling(10, allowed_lateness=-1), "allowed_lateness must be"),
    ],
)
def test_configuration_mistakes_are_explained(make, message):
    with pytest.raises(ConfigurationError, match=message):
        make()


def test_an_undeclared_input_is_refused():
    with pytest.raises(ConfigurationError, match="unknown input 'x'"):
        Processor().on_events(events([(1, 1)]), "x")
