"""A dead letter's event time is the event's, never its arrival: the time ``timestamp_by``
read where the consumer's policy has one, the producer's where it gave one, else none
(``dlq list`` shows ``-``)."""

from __future__ import annotations

import json

from streams import StreamId, StreamProvider
from streams.cli.common import utc_text
from streams.eventtime import EventTime, OrderingPolicy
from tests.agents.delivery.conftest import drained
from tests.streams.cli.helpers import headrace

T0 = 1_600_000_000.0  # long before any arrival
FAST = {"max_event_delivery_time": 0.1, "delivery_retry_backoff": 0.01}


async def test_letters_carry_the_events_time_not_the_arrival(tmp_path):
    provider = StreamProvider.embedded(tmp_path / "store", queues=1, **FAST)

    @provider.implicit("timed")
    class Released:  # its time is the value's "t"
        event_time = EventTime(OrderingPolicy(timestamp_by="t"))

        def __init__(self, stream_id):
            pass

        def on_events(self, outcomes):
            raise ValueError("cannot store them")

    @provider.implicit("plain")
    class Failing:
        def __init__(self, stream_id):
            pass

        def on_next(self, batch):
            raise ValueError("cannot store it")

    async with provider:
        await provider.get_stream(StreamId("timed", "a")).on_next({"t": T0 + 1})
        await provider.get_stream(StreamId("plain", "given")).on_next("x", event_time=T0 + 2)
        await provider.get_stream(StreamId("plain", "none")).on_next("y")
        await drained(provider)

    listed = headrace("dlq", "list", "--path", "store", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    times = {x["stream"]: (x["reason"], x["event_time"]) for x in map(json.loads, listed.stdout.splitlines())}
    assert times == {
        "timed/a": ("delivery_failed", T0 + 1),  # what timestamp_by read
        "plain/given": ("delivery_failed", T0 + 2),  # what the producer gave
        "plain/none": ("delivery_failed", None),  # nothing known: not the arrival
    }
    table = headrace("dlq", "list", "--path", "store", cwd=tmp_path).stdout
    rows = {line.split()[2]: line for line in table.splitlines() if "delivery_failed" in line}
    assert utc_text(T0 + 1) in rows["timed/a"] and utc_text(T0 + 2) in rows["plain/given"]
    assert rows["plain/none"].split()[4] == "-"  # id, reason, stream, queue:seq, event time
