"""Every table of the seed documents, reproduced as the time-semantics page states it.

The samples in ``data/`` are the seed tables as ``headrace simulate`` reads them; where a
seed table has a typo (noted below), the test asserts what the seed's own text says.
"""

from __future__ import annotations

import pytest

from streams.eventtime import (
    Collect,
    Hopping,
    OrderingPolicy,
    Processor,
    Tumbling,
    WatermarkGeneration,
)
from streams.eventtime.replay import ReplayOptions
from tests.streams.eventtime.helpers import advances, clock, events, feed, outcomes, run_sample, sample, windows

# ---------------------------------------------------------------- 003: ASA ordering policies


def test_asa_ordering_policy_table_late_15s_out_of_order_5s():
    trace = run_sample("asa_ordering_policy.csv", ReplayOptions(OrderingPolicy(out_of_order=5, late_arrival=15)))
    got = [(clock(o.timestamp), o.status, o.reason) for o in outcomes(trace)]
    assert got == [
        ("00:10:25", "adjusted", "late_arrival"),  # 40 s late: arrival - 15 s
        ("00:10:30", "kept", None),  # late, within tolerance
        ("00:10:42", "kept", None),  # on time
        ("00:10:38", "kept", None),  # out of order within 5 s
        ("00:10:37", "adjusted", "out_of_order"),  # beyond 5 s: to the watermark
    ]


# ---------------------------------------------------------------- 001: ASA time handling

ASA = OrderingPolicy(early_arrival=300, late_arrival=300, out_of_order=120)


def _fates(trace):
    return {
        i + 1: (o.status, o.reason, clock(o.timestamp)) for i, o in enumerate(outcomes(trace)) if o.status != "kept"
    }


def test_asa_watermark_illustration_with_all_three_policies():
    trace = run_sample("asa_watermarks.csv", ReplayOptions(ASA))
    fates = _fates(trace)
    assert fates[3] == ("dropped", "early_arrival", None)  # 6 min early, tolerance 5
    assert fates[6] == ("adjusted", "out_of_order", "12:17")
    assert fates[12] == ("adjusted", "late_arrival", "12:22")  # 6 min late; above W = 12:21
    # the early event does not move the watermark; the watermark before event 12 is 12:21
    steps = [(clock(a.arrival_time), clock(a.watermark)) for a in advances(trace)]
    assert ("12:11", "12:15") not in steps
    before_12 = [w for a, w in steps if a < "12:27"][-1]
    assert before_12 == "12:21"
    # the contract's other outcome of these rules: event 9 (12:16 at 12:21) is below W = 12:18
    assert fates == {
        3: ("dropped", "early_arrival", None),
        6: ("adjusted", "out_of_order", "12:17"),
        9: ("adjusted", "out_of_order", "12:18"),
        12: ("adjusted", "late_arrival", "12:22"),
    }


def test_asa_without_early_policy_the_outlier_raises_the_watermark():
    policy = OrderingPolicy(late_arrival=300, out_of_order=120)
    trace = run_sample("asa_watermarks.csv", ReplayOptions(policy))
    fates = _fates(trace)
    assert 3 not in fates  # kept: no early-arrival policy
    assert fates[4] == ("adjusted", "out_of_order", "12:15")  # forward 7 minutes


def test_asa_substreams_per_device_adjust_fewer_events():
    partition = _fates(run_sample("asa_watermarks.csv", ReplayOptions(ASA)))
    trace = run_sample(
        "asa_watermarks.csv",
        ReplayOptions(OrderingPolicy(early_arrival=300, late_arrival=300, out_of_order=120, over="key")),
    )
    per_device = _fates(trace)
    adjusted = lambda fates: [i for i, f in fates.items() if f[0] == "adjusted"]  # noqa: E731
    assert len(adjusted(per_device)) < len(adjusted(partition))
    assert per_device == {3: ("dropped", "early_arrival", None), 12: ("adjusted", "late_arrival", "12:22")}
    # one watermark per device, and the partition's floor (None) that every arrival lifts
    lanes = {a.substream for a in advances(trace)}
    assert lanes == {"device1", "device2", "device3", None}


# ---------------------------------------------------------------- 002: Atlas windows

FIVE_MIN = Tumbling(300)


@pytest.mark.parametrize("action", ["adjust", "accept"])
def test_atlas_watermark_table_windows_capture_every_document(action):
    rows = sample("atlas_watermarks.csv")
    trace = run_sample("atlas_watermarks.csv", ReplayOptions(OrderingPolicy(action=action), FIVE_MIN))
    closed = windows(trace)
    assert [(clock(w.start), clock(w.end), w.value, clock(w.closed_at)) for w in closed] == [
        ("12:00", "12:05", [0, 1, 2, 3, 4, 5, 6], "12:07"),  # seven documents, closed at 12:07
    ]
    # the "with watermarks" column: the window each document is captured by
    column = ["12:00"] * 7 + ["12:05"] * 3  # (the table's "12:04-12:10" is a typo for 12:05-12:10)
    window_of = {}
    for o in outcomes(trace):
        window_of[o.record.index] = clock(o.timestamp // 300 * 300)
    assert [window_of[r.index] for r in rows] == column


def test_atlas_watermark_table_without_watermarks_is_processing_time():
    """The "without watermarks" column: windows by processing (arrival) time."""
    rows = sample("atlas_watermarks.csv")
    p = Processor(OrderingPolicy(timestamp_by=lambda r: r.arrival_time), FIVE_MIN, Collect(), select=lambda r: r.index)
    closed = p.on_events(rows).windows + p.flush().windows
    by_window = {clock(w.start): w.value for w in closed}
    assert by_window == {"12:00": [0, 1, 2, 3], "12:05": [4, 5, 6, 7, 8, 9]}  # four of seven


def test_atlas_allowed_lateness_table():
    rows = sample("atlas_allowed_lateness.csv")
    p = Processor(
        OrderingPolicy(action="accept"), Tumbling(300, allowed_lateness=120), Collect(), select=lambda r: r.index
    )
    table = []
    closed = []
    for row in rows:
        closed += p.on_events([row]).windows
        table.append(
            (
                clock(row.event_time),
                clock(p.watermark),
                clock(p.watermark - 120),
                [f"{clock(s)}-{clock(e)}" for _, s, e in p.open_windows()],
            )
        )
    both = ["12:00-12:05", "12:05-12:10"]  # (the table's "12:00-12:15" is a typo)
    assert table == [
        ("12:00", "12:00", "11:58", ["12:00-12:05"]),
        ("12:01", "12:01", "11:59", ["12:00-12:05"]),
        ("12:03", "12:03", "12:01", ["12:00-12:05"]),
        ("12:02", "12:03", "12:01", ["12:00-12:05"]),
        ("12:04", "12:04", "12:02", ["12:00-12:05"]),
        ("12:01", "12:04", "12:02", ["12:00-12:05"]),
        ("12:05", "12:05", "12:03", both),
        ("12:06", "12:06", "12:04", both),
        ("12:04", "12:06", "12:04", both),
        ("12:07", "12:07", "12:05", ["12:05-12:10"]),
    ]
    # the 12:04 document arriving at watermark 12:06 still counts in 12:00-12:05
    assert [(clock(w.start), w.value) for w in closed] == [("12:00", [0, 1, 2, 3, 4, 5, 8])]


def test_atlas_idle_timeout_table():
    rows = sample("atlas_idle_timeout.csv")
    p = Processor(OrderingPolicy(), Tumbling(180, idle_timeout=60), Collect(), select=lambda r: r.index)
    table = []
    closed = []
    for row in rows:
        out = p.on_tick(row.arrival_time) if row.event_time is None else p.on_events([row])
        closed += out.windows
        table.append((clock(row.arrival_time), clock(p.watermark)))
    # (the table's 12:00 at 12:07 and 12:08 is a typo: its text says the timeout moves it to 12:06)
    assert table == [
        ("12:00", "12:00"),
        ("12:01", "12:00"),
        ("12:02", "12:00"),
        ("12:03", "12:00"),
        ("12:04", "12:02"),
        ("12:05", "12:05"),
        ("12:06", "12:05"),
        ("12:07", "12:06"),
        ("12:08", "12:06"),
        ("12:09", "12:09"),
    ]
    assert [(clock(w.start), clock(w.end), w.value, clock(w.closed_at)) for w in closed] == [
        ("12:00", "12:03", [0, 4], "12:05"),  # the 12:02 document at 12:04 joined it first
        ("12:03", "12:06", [5], "12:07"),  # closed by the idle timeout
    ]
    assert [f"{clock(s)}-{clock(e)}" for _, s, e in p.open_windows()] == ["12:09-12:12"]


# ---------------------------------------------------------------- 000: StreamInsight CTIs


def test_cti_generated_every_10_events_with_a_5_second_delay():
    """AdvanceTimeGenerationSettings(10, TimeSpan.FromSeconds(5), true)."""
    p = Processor(OrderingPolicy(out_of_order=5), generation=WatermarkGeneration.every(events=10), trace=True)
    trace = feed(p, events((t, t) for t in range(100, 125)))
    steps = [(a.arrival_time, a.watermark) for a in advances(trace)]
    assert steps == [(109.0, 104.0), (119.0, 114.0)]  # the 10th and 20th events, minus 5 s
    final = p.flush()
    assert final.watermark == float("inf")  # the final CTI at +infinity


def test_cti_generated_every_duration_of_event_time():
    p = Processor(generation=WatermarkGeneration.every(duration=10), trace=True)
    trace = feed(p, events((t, t) for t in (0, 4, 9, 10, 15, 19, 21, 30, 31)))
    # whenever event time moved 10 s past the last generated one: 0, 10, 21, then 31 (not 30)
    assert [a.watermark for a in advances(trace)] == [0.0, 10.0, 21.0, 31.0]


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("drop", [("dropped", "out_of_order", None), ("kept", None, 60.0)]),
        ("adjust", [("adjusted", "out_of_order", 50.0), ("kept", None, 60.0)]),
    ],
)
def test_cti_violations_follow_the_policy(action, expected):
    """An enqueued CTI at 50: an event before it violates it (AdvanceTimePolicy Drop/Adjust)."""
    p = Processor(OrderingPolicy(action=action), trace=True)
    p.advance_time(50.0, arrival_time=1.0)
    trace = feed(p, events([(40, 2), (60, 3)]))
    assert [(o.status, o.reason, o.timestamp) for o in outcomes(trace)] == expected
    assert p.counters.punctuations == 1


def test_cti_commits_strictly_before_its_timestamp():
    """An event exactly at the CTI is valid; only those strictly before it violate it."""
    p = Processor(OrderingPolicy(action="drop"), trace=True)
    p.advance_time(50.0, arrival_time=1.0)
    trace = feed(p, events([(50, 2), (49.999, 3)]))
    assert [o.status for o in outcomes(trace)] == ["kept", "dropped"]


def test_cti_import_slow_reference_stream_follows_fast_stream():
    """AdvanceTimeImportSettings("dataStream"): a join releases results as fast as the
    fast input, because the slow input's watermark is imported from it."""
    join = Processor(OrderingPolicy(), Tumbling(10), inputs=["data", "lookup"], imports={"lookup": "data"})
    join.on_events(events([(0, 0)]), "lookup")  # the reference stream speaks once
    out = join.on_events(events([(1, 1), (5, 5), (12, 12)], start=1), "data")
    assert [(w.start, w.end, w.value) for w in out.windows] == [(0.0, 10.0, 3)]
    assert join.metrics().watermarks == {"data": 12.0, "lookup": 12.0}
    # without the import, the silent lookup input holds the join back
    held = Processor(OrderingPolicy(), Tumbling(10), inputs=["data", "lookup"])
    held.on_events(events([(0, 0)]), "lookup")
    assert held.on_events(events([(1, 1), (5, 5), (12, 12)], start=1), "data").windows == []
    assert held.metrics().holder == "lookup"


def test_cti_import_between_processors():
    fast = Processor(OrderingPolicy(out_of_order=1))
    slow = Processor(OrderingPolicy(), Hopping(10, 10))
    slow.on_events(events([(3, 3)]))
    out = fast.on_events(events([(20, 20)]))
    imported = slow.import_watermark(out.watermark, arrival_time=20.0)
    assert [(w.start, w.value) for w in imported.windows] == [(0.0, 1)]
