"""MergedRelease: several inputs' events in one event-time order."""

from __future__ import annotations

from types import SimpleNamespace as NS

from streams.eventtime.release import MergedRelease


def ev(ts: float, seq: int, index: int = 0) -> NS:
    return NS(timestamp=ts, record=NS(token=NS(sequence_number=seq, event_index=index)))


def test_ties_across_inputs_leave_in_queue_order_and_each_event_once():
    m = MergedRelease(["tolls", "prices"])
    m.add("tolls", ev(5.0, 7))
    m.add("prices", ev(5.0, 3))
    m.add("tolls", ev(5.0, 2))
    m.add("prices", ev(4.0, 9))
    got = [(name, e.record.token.sequence_number) for name, e in m.release(5.0)]
    assert got == [("prices", 9), ("tolls", 2), ("prices", 3), ("tolls", 7)]
    assert m.release(100.0) == [] and len(m) == 0


def test_the_checkpoint_is_held_at_the_oldest_held_event_of_any_input():
    m = MergedRelease(["tolls", "prices"])
    m.saw("tolls", (4, 0))
    m.add("tolls", ev(10.0, 4))
    m.add("prices", ev(3.0, 6))
    assert m.oldest() == (4, 0)
    m.release(5.0)  # the price goes; the toll stays
    assert m.oldest() == (4, 0) and m.below("prices") == (6, 1) and m.below("tolls") == (4, 0)
    m.release(10.0)
    assert m.oldest() is None and m.below("tolls") == (4, 1)


def test_an_imported_inputs_event_in_force_holds_the_checkpoint_until_a_later_one_is_released():
    m = MergedRelease(["tolls", "prices"], in_force=["prices"])
    m.add("prices", ev(1.0, 2))
    m.add("tolls", ev(2.0, 3))
    m.release(2.0)
    assert m.oldest() == (2, 0)  # everything released, the price still in force
    m.add("prices", ev(3.0, 8))
    m.add("prices", ev(2.5, 9))  # arrived later, earlier in event time: not the one in force
    m.release(3.0)
    assert m.oldest() == (8, 0)
