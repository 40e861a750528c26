"""Interval joins in the runtime: one activation per key over two co-partitioned namespaces,
pairs to on_join once the merged watermark passes them, the checkpoint held by what the join
holds, and one row a pair in the Spark handoff log, each once."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_sink import EventHandoff
from streams import ConfigurationError, StreamId, StreamProvider
from streams.eventtime import EventTime, OrderingPolicy
from streams.eventtime.joins import IntervalJoin
from tests.agents.delivery.conftest import drained
from tests.helpers import handoff_rows, persisted_checkpoint, saved_states, wait_until_async

T0 = 1_700_000_000.0
SPEC = EventTime(
    OrderingPolicy(timestamp_by="t", action="drop"),
    inputs=("clicks", "orders"),
    join=IntervalJoin(lower=0, upper=60, how="left"),
)


async def publish(provider: StreamProvider, namespace: str, key: str, offset: float, **value: object) -> None:
    await provider.get_stream(StreamId(namespace, key)).on_next({"t": T0 + offset, **value})


async def test_pairs_reach_on_join_once_the_merged_watermark_passes_them():
    provider = StreamProvider.memory(queues=2, co_partitioned=[("clicks", "orders")])
    pairs: list[tuple] = []

    @provider.implicit("clicks", "orders")
    class ClickToOrder:
        event_time = SPEC

        def __init__(self, stream_id):
            self.user = stream_id.key

        def on_join(self, joined):
            for j in joined:
                right = None if j.right is None else (j.right.timestamp - T0, j.right.record.value["total"])
                pairs.append((self.user, j.left.timestamp - T0, j.left.record.value["page"], right))

    async with provider:
        await publish(provider, "clicks", "ann", 0, page="/shoes")
        await publish(provider, "clicks", "bob", 5, page="/hats")
        await publish(provider, "orders", "ann", 30, total=80.0)
        await publish(provider, "clicks", "ann", 40, page="/socks")
        await publish(provider, "orders", "ann", 50, total=12.0)
        await publish(provider, "orders", "ann", 10, total=1.0)  # out of order: dropped
        await drained(provider)
        assert pairs == []  # ann's watermark: min(clicks 40, orders 50); 0 + 60 not passed
        await publish(provider, "clicks", "ann", 70, page="/")
        await publish(provider, "orders", "ann", 65, total=5.0)  # W 65 > 60: click 0 is final
        await drained(provider)
        assert pairs == [("ann", 0.0, "/shoes", (30.0, 80.0)), ("ann", 0.0, "/shoes", (50.0, 12.0))]
        [letter] = await provider.dead_letters.list(reason="out_of_order")
        for namespace in ("clicks", "orders"):
            for user in ("ann", "bob"):
                await provider.get_stream(StreamId(namespace, user)).on_completed()
        await drained(provider)
    assert letter.value["total"] == 1.0
    assert sorted(pairs[2:]) == [
        ("ann", 40.0, "/socks", (50.0, 12.0)),
        ("ann", 40.0, "/socks", (65.0, 5.0)),
        ("ann", 70.0, "/", None),  # left outer: no order in [70, 130]
        ("bob", 5.0, "/hats", None),
    ]


def embedded_join(path: Path) -> StreamProvider:
    provider = StreamProvider.embedded(path, queues=1, co_partitioned=[("clicks", "orders")])

    @provider.implicit("clicks", "orders")
    class ClickToOrder:
        event_time = SPEC
        handoff = EventHandoff(
            "conversions", {"left_page": "string", "right_total": "double", "right_time": "timestamp"}
        )

        def __init__(self, stream_id):
            pass

    return provider


def conversions(path: Path) -> list[tuple]:
    return [
        (
            r["event_time"].timestamp() - T0,
            r["stream_id"],
            r["left_page"],
            r["right_total"],
            None if r["right_time"] is None else r["right_time"].timestamp() - T0,
        )
        for r in handoff_rows(path, "conversions")
    ]


async def test_pairs_are_handed_to_spark_one_row_each_once_across_a_restart(tmp_path):
    first = embedded_join(tmp_path)
    async with first:
        await publish(first, "orders", "ann", 100, total=5.0)  # record 0
        await publish(first, "clicks", "ann", 0, page="/shoes")  # record 1
        await publish(first, "clicks", "ann", 70, page="/")  # record 2: W 70 > 0 + 60
        await drained(first)
        assert await wait_until_async(lambda: len(conversions(tmp_path)) == 1, 10)
        # Order 100 can still match a click (70 is one): the join keeps it, in its state saved
        # with the checkpoint, so the checkpoint passes it.
        assert await wait_until_async(lambda: persisted_checkpoint(tmp_path) == 2, 10)
        assert [stream for stream, _, _ in saved_states(tmp_path)] == ["clicks/ann"]
    # The next worker restores the join (order 100, click 70) and reads on after record 2.
    second = embedded_join(tmp_path)
    async with second:
        await publish(second, "clicks", "ann", 200, page="/late")
        await publish(second, "orders", "ann", 300, total=1.0)  # W 200: click 70 is final
        await drained(second)
        assert await wait_until_async(lambda: len(conversions(tmp_path)) == 2, 10)
        await drained(second)
    assert conversions(tmp_path) == [
        (0.0, "clicks/ann", "/shoes", None, None),
        (70.0, "clicks/ann", "/", 5.0, 100.0),
    ]


def test_a_join_type_without_on_join_or_handoff_is_refused_at_registration():
    provider = StreamProvider.memory(queues=1, co_partitioned=[("clicks", "orders")])
    with pytest.raises(ConfigurationError, match=r"with a join: it needs on_join\(pairs\)"):

        @provider.implicit("clicks", "orders")
        class NoHandler:
            event_time = SPEC

            def __init__(self, stream_id):
                pass
