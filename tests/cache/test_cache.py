from __future__ import annotations

import gc
import tracemalloc

import pytest

from cache.simple import SimpleQueueCache
from streams import BatchContainer, BatchKind, CacheMissError, QueueId, QueueMessage, SequenceToken, StreamId
from streams.core.codec import interned
from streams.core.record_batch import ContainerGroup

A, B = StreamId("ns", "a"), StreamId("ns", "b")


def msgs(streams, start=0):
    out = []
    for i, sid in enumerate(streams, start):
        c = BatchContainer(sid, BatchKind.DATA, 0.0, [i])
        out.append((QueueMessage(QueueId(0), i, c.encode()), c))
    return out


def drain(cursor):
    got = []
    while (item := cursor.current()) is not None:
        got.append(item.message.sequence_number)
        cursor.advance()
    return got


def test_cursor_sees_only_its_stream_in_order():
    cache = SimpleQueueCache(100, 10)
    a, b = cache.create_cursor(A, None), cache.create_cursor(B, None)
    assert cache.add(msgs([A, B, A, A, B])) == {A, B}
    assert drain(a) == [0, 2, 3]
    assert drain(b) == [1, 4]
    cache.add(msgs([B, A], start=5))
    assert drain(a) == [6] and drain(b) == [5]


def test_purge_keeps_what_a_cursor_needs_and_pressure_stops_reads():
    cache = SimpleQueueCache(max_size=20, buckets=4)  # buckets of 5
    slow, fast = cache.create_cursor(A, None), cache.create_cursor(B, None)
    cache.add(msgs([A] + [B] * 19))
    assert drain(fast) == list(range(1, 20))
    assert cache.is_under_pressure() and cache.get_max_add_count() == 0
    assert cache.try_purge() == 0  # the slow cursor stands in the oldest bucket
    assert cache.oldest_needed() == 0
    assert cache.size == 20
    slow.advance()  # it finishes batch 0 and catches up
    assert cache.oldest_needed() is None
    assert cache.try_purge() == 5  # one bucket: just enough room
    assert cache.get_max_add_count() == 5 and not cache.is_under_pressure()


def test_history_is_kept_until_room_is_needed_so_rewinds_hit_the_cache():
    cache = SimpleQueueCache(max_size=20, buckets=4)
    cache.add(msgs([A, B] * 5))
    assert cache.try_purge() == 0  # plenty of room: keep it
    late = cache.create_cursor(A, SequenceToken(4))
    assert drain(late) == [4, 6, 8]


def test_token_older_than_cache_is_a_miss():
    cache = SimpleQueueCache(max_size=10, buckets=2)
    cache.add(msgs([A] * 10))
    assert cache.try_purge() == 5
    with pytest.raises(CacheMissError, match="older than the queue cache"):
        cache.create_cursor(A, SequenceToken(3))
    cursor = cache.create_cursor(A, cache.oldest_cached_token())
    assert drain(cursor) == [5, 6, 7, 8, 9]


def test_closed_cursor_releases_its_bucket():
    cache = SimpleQueueCache(max_size=10, buckets=2)
    cursor = cache.create_cursor(A, None)
    cache.add(msgs([A] * 10))
    assert cache.try_purge() == 0
    cursor.close()
    assert cursor.current() is None
    assert cache.try_purge() == 5


def test_a_cached_batch_gives_back_its_message():
    cache = SimpleQueueCache(100, 10)
    cursor = cache.create_cursor(A, None)
    added = msgs([A, B])
    cache.add(added)
    assert cursor.current().message == added[0][0]
    assert cursor.current().sequence == 0
    assert cache.oldest_cached_token() == SequenceToken(0)


def test_a_batch_no_cursor_will_pass_keeps_only_its_bytes():
    cache = SimpleQueueCache(100, 10)
    cache.create_cursor(A, None)
    cache.add(msgs([A, B]))
    with_cursor, without = cache._items
    assert with_cursor._container is not None and without._container is None
    late = cache.create_cursor(B, SequenceToken(0))  # a rewind still reads it, decoded again
    assert [e.value for e in late.current().events] == [1]


def test_bad_sizes_are_refused():
    from streams import ConfigurationError

    with pytest.raises(ConfigurationError, match="cache_size"):
        SimpleQueueCache(0, 1)


def test_a_stream_whose_batches_were_dropped_keeps_its_cursor_until_it_closes():
    cache = SimpleQueueCache(max_size=4, buckets=2)
    a = cache.create_cursor(A, None)
    cache.add(msgs([A, B, B, B]))
    assert drain(a) == [0]
    cache.add(msgs([B, B], start=4))  # no room: the oldest bucket, holding A's batch, goes
    cache.try_purge()
    cache.add(msgs([A], start=6))  # A has no batch cached, but an open cursor: it steps onto the new one
    assert drain(a) == [6]


def cache_growth(cache, sids, rounds):
    """Bytes the process holds more after ``rounds`` streams each come and go: a cursor
    opened, a batch read, the batch dropped from the cache, and then the cursor closed."""
    batches = [msgs([sid], start=n) for n, sid in enumerate(sids)]  # made before measuring
    cursors = []
    tracemalloc.start()
    try:
        for n, (sid, batch) in enumerate(zip(sids, batches)):
            if n == len(sids) - rounds:
                gc.collect()
                before = tracemalloc.get_traced_memory()[0]
            cursors.append(cache.create_cursor(sid, None))
            cache.add(batch)
            cache.try_purge()
            assert drain(cursors[-1]) == [n]
            if len(cursors) > 8:  # its batch left the cache long ago
                cursors.pop(0).close()
        for cursor in cursors:
            cursor.close()
        cursors.clear()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_streams_that_come_and_go_leave_nothing_in_the_cache():
    # A deactivated stream must leave nothing behind (a worker's 100,000 streams come and
    # go), here its batches leave the cache first and its cursor closes after. One stream's
    # leftovers (its entry, its place in the cache's map) would cost over 100 bytes.
    cache = SimpleQueueCache(max_size=4, buckets=2)
    sids = [interned(StreamId("ns", f"s{n}")) for n in range(4_000)]  # the worker's table of ids, made first
    assert cache_growth(cache, sids, rounds=3_000) < 3_000 * 50 // 10  # under 5 bytes a stream


def test_several_caught_up_cursors_of_a_stream_each_step_onto_its_new_batch():
    # One, two and three cursors of a stream waiting at once, one closing while caught up,
    # one whose token is ahead of the next batch: each sees exactly its own batches.
    cache = SimpleQueueCache(100, 10)
    first, second = cache.create_cursor(A, None), cache.create_cursor(A, None)
    ahead = cache.create_cursor(A, SequenceToken(3))  # wants batches from position 3 on
    cache.add(msgs([A, B], start=0))
    assert drain(first) == [0] and drain(second) == [0] and drain(ahead) == []
    second.close()  # caught up when it closes: it must not be woken again
    cache.add(msgs([A, A, B], start=2))
    assert drain(first) == [2, 3] and drain(ahead) == [3] and drain(second) == []
    assert second.closed
    first.close()
    cache.add(msgs([A], start=5))
    assert drain(ahead) == [5] and drain(first) == []
    ahead.close()  # A's batches are still cached, for rewinds
    assert drain(cache.create_cursor(A, SequenceToken(2))) == [2, 3, 5]


# -- groups of one-event records (streams.core.record_batch.ContainerGroup) ----------------


def group(sid, positions):
    """A gathered message: one event a record at ``positions``, standing at the first."""
    batch = ContainerGroup(sid, list(positions), [None] * len(positions), [1.0] * len(positions), list(positions))
    return QueueMessage(QueueId(0), positions[0], b"", 1.0, batch), batch


def test_a_cursor_from_a_token_inside_a_group_gets_its_events_from_the_token_on():
    cache = SimpleQueueCache(100, 10)
    cache.add([group(A, [0, 3, 5]), msgs([B], start=1)[0], group(A, [7, 9])])
    cursor = cache.create_cursor(A, SequenceToken(3))
    item = cursor.current()
    assert item is not None and item.sequence == 0 and item.last == 5
    assert [str(e.token) for e in item.events] == ["3:0", "5:0"]
    cursor.advance()
    assert [str(e.token) for e in cursor.current().events] == ["7:0", "9:0"]
    after = cache.create_cursor(A, SequenceToken(6))  # between two groups: the next one whole
    assert [e.value for e in after.current().events] == [7, 9]


def test_a_dropped_group_covers_up_to_its_last_record():
    cache = SimpleQueueCache(max_size=4, buckets=2)  # buckets of 2
    cache.add([group(A, [0, 5]), msgs([B], start=1)[0], msgs([B], start=2)[0], msgs([B], start=3)[0]])
    assert cache.try_purge() == 2  # the oldest bucket: A's group (0..5) and B's record 1
    # Record 5 (A's) went with its group: the cache serves A fully only from position 6 on.
    assert cache.covered_from() == 6
    with pytest.raises(CacheMissError):
        cache.create_cursor(A, SequenceToken(4))
