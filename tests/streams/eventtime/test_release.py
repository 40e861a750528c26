"""TimestampOrder: events leave once the watermark reaches them, in timestamp order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streams.eventtime.release import TimestampOrder

times = st.lists(st.integers(0, 50), max_size=40)
watermarks = st.lists(st.integers(0, 60), max_size=8)


@given(times=times, watermarks=watermarks)
def test_what_leaves_is_in_timestamp_order_and_nothing_leaves_early(times, watermarks) -> None:
    order: TimestampOrder = TimestampOrder()
    for index, t in enumerate(times):
        order.add(float(t), (1, index), (t, index))
    left: list[tuple[int, int]] = []
    mark = float("-inf")
    for w in sorted(watermarks):
        released = order.release(float(w))
        assert all(t <= w for t, _ in released)
        left += released
        mark = w
    assert left == sorted(left)  # timestamp order, ties in arrival order
    held = sorted((t, i) for i, t in enumerate(times) if t > mark)
    assert sorted(left + order.release(float("inf"))) == sorted((t, i) for i, t in enumerate(times))
    assert len(left) == len(times) - len(held)


def test_below_is_the_oldest_held_position_or_past_the_newest_seen() -> None:
    order: TimestampOrder = TimestampOrder()
    assert order.below() is None and order.oldest() is None
    order.saw((3, 4))  # refused events move it too
    assert order.below() == (3, 5)
    order.add(20.0, (4, 0), "late-ts")
    order.add(10.0, (4, 1), "early-ts")
    assert order.release(15.0) == ["early-ts"]
    assert (order.oldest(), order.below()) == ((4, 0), (4, 0))
    assert order.release(20.0) == ["late-ts"] and order.below() == (4, 2)


def test_orders_hold_their_own_events_though_quiet_ones_share_their_empty_lists() -> None:
    quiet: TimestampOrder = TimestampOrder()
    busy: TimestampOrder = TimestampOrder()
    busy.add(5.0, (1, 0), "x")
    busy.add(3.0, (1, 1), "y")
    assert (len(quiet), quiet.oldest(), quiet.earliest(), quiet.release(10.0)) == (0, None, None, [])
    assert (len(busy), busy.oldest(), busy.earliest()) == (2, (1, 0), 3.0)
    quiet.add(1.0, (7, 0), "z")
    assert busy.release(10.0) == ["y", "x"]
    assert (len(quiet), quiet.oldest(), TimestampOrder().oldest()) == (1, (7, 0), None)
    assert quiet.release(1.0) == ["z"]
