"""Which input holds a merged watermark back: per-input watermarks and the holder
in Prometheus and in ``headrace status`` rows, and one log line when an input starts
holding back and one when it stops."""

from __future__ import annotations

import json
import logging

import anyio

from streams import StreamId, StreamProvider
from streams.eventtime import EventTime, OrderingPolicy
from streams.runtime.metrics import metric_families
from streams.runtime.snapshot import take_snapshot
from streams.runtime.status import agent_status
from tests.agents.delivery.conftest import drained

T0 = 1_700_000_000.0


def samples(provider: StreamProvider, name: str) -> dict[str, float]:
    families = {f.name: f for f in metric_families(take_snapshot(provider), {})}
    family = families.get(name)
    return {} if family is None else {s.labels["input"]: s.value for s in family.samples}


def register_tolls(provider: StreamProvider) -> None:
    """A windowless consumer of tolls and prices, merged, that ignores what it gets."""

    @provider.implicit("tolls", "prices")
    class Tolls:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), inputs=("tolls", "prices"))

        def __init__(self, stream_id):
            pass

        def on_events(self, events):
            pass


async def test_the_holder_is_in_the_metrics_the_status_and_the_log(caplog):
    caplog.set_level(logging.INFO, logger="headrace.eventtime")
    provider = StreamProvider.memory(queues=1, co_partitioned=[("tolls", "prices")], get_queue_msgs_timer_period=0.02)

    register_tolls(provider)

    async def publish(namespace: str, key: str, offset: float) -> None:
        await provider.get_stream(StreamId(namespace, key)).on_next({"t": T0 + offset})

    async with provider:
        for key in ["a", "b"]:
            await publish("prices", key, 1)
            await publish("tolls", key, 5)
        await publish("tolls", "c", 9)  # c: no price at all yet
        await drained(provider)
        for activation in provider.agents[0].event_time_activations():
            activation.holdback.after = 0.0  # report at the next step
        await anyio.sleep(0.2)  # ticks are steps: the hold-backs are noticed
        holding = samples(provider, "headrace_eventtime_input_holding")
        marks = samples(provider, "headrace_eventtime_input_watermark_timestamp_seconds")
        (queue,) = take_snapshot(provider).queues
        status = agent_status("w", queue, 0.0, 1.0)
        started = [r.getMessage() for r in caplog.records if "holds the merged watermark back" in r.getMessage()]

        for key in ["a", "b", "c"]:  # prices pass the tolls
            await publish("prices", key, 20)
        await drained(provider)
        await anyio.sleep(0.2)
        after = samples(provider, "headrace_eventtime_input_holding")
        stopped = [r.getMessage() for r in caplog.records if "no longer holds" in r.getMessage()]

    assert holding == {"tolls": 0, "prices": 3}  # a, b at 1 and c with none, behind the tolls
    assert marks == {"tolls": T0 + 5, "prices": T0 + 1}  # the lowest of each input
    assert status.held_by == "prices (3 held, at 2023-11-14T22:13:21Z)"
    assert status.input_watermarks == {"tolls": T0 + 5, "prices": T0 + 1}
    assert sorted(m.split(":")[0] for m in started) == ["tolls/a", "tolls/b", "tolls/c"]  # once each
    assert all("'prices'" in m for m in started)
    # now tolls are behind prices: the tolls hold back every key (and each prices episode ended once)
    assert after == {"tolls": 3, "prices": 0}
    assert sorted(m.split(":")[0] for m in stopped) == ["tolls/a", "tolls/b", "tolls/c"]


async def test_headrace_status_shows_the_input_holding_a_queue_back(tmp_path):
    from streams.runtime.status import StatusReporter
    from tests.streams.cli.helpers import headrace

    provider = StreamProvider.embedded(tmp_path / "store", queues=1, co_partitioned=[("tolls", "prices")])

    register_tolls(provider)

    async with provider:
        for key in ["a", "b"]:
            await provider.get_stream(StreamId("prices", key)).on_next({"t": T0 + 1})
            await provider.get_stream(StreamId("tolls", key)).on_next({"t": T0 + 5})
        await drained(provider)
        assert provider.store is not None
        await StatusReporter(provider, provider.backend.status_board(), interval=60.0).report()
        shown = await anyio.to_thread.run_sync(lambda: headrace("status", "--path", "store", cwd=tmp_path))
        read = await anyio.to_thread.run_sync(lambda: headrace("status", "--path", "store", "--json", cwd=tmp_path))
    assert shown.returncode == 0, shown.stderr
    [queue] = json.loads(read.stdout)["queues"]
    assert queue["agent"]["input_watermarks"] == {"tolls": T0 + 5, "prices": T0 + 1}  # each input's lowest
    assert "held back by" in shown.stdout
    assert "prices (2 held, at 2023-11-14T22:13:21Z)" in shown.stdout


async def test_headrace_status_shows_the_slowest_substreams_not_a_label_per_key(tmp_path):
    from streams.eventtime import Count, Tumbling
    from streams.runtime.status import StatusReporter
    from tests.streams.cli.helpers import headrace, json_of

    provider = StreamProvider.embedded(tmp_path / "store", queues=1)

    @provider.implicit("hall")
    class PerDevice:
        event_time = EventTime(OrderingPolicy(timestamp_by="t", over="device"), Tumbling(60), Count())

        def __init__(self, stream_id):
            pass

        def on_window(self, result):
            pass

    async with provider:
        stream = provider.get_stream(StreamId("hall", "h1"))
        for device, offset in [("d1", 50), ("d2", 10), ("d3", 40), ("d4", 20), ("d5", 30)]:
            await stream.on_next({"t": T0 + offset, "device": device})
        await drained(provider)
        assert provider.store is not None
        await StatusReporter(provider, provider.backend.status_board(), interval=60.0).report()
        families = {f.name for f in metric_families(take_snapshot(provider), {})}
        status = await anyio.to_thread.run_sync(
            lambda: json_of(headrace("status", "--path", "store", "--json", cwd=tmp_path))
        )
        table = await anyio.to_thread.run_sync(lambda: headrace("status", "--path", "store", cwd=tmp_path))
    [agent] = [q["agent"] for q in status["queues"] if q["agent"]]
    assert agent["slowest_substreams"] == (
        "hall/h1:d2 at 2023-11-14T22:13:30Z, hall/h1:d4 at 2023-11-14T22:13:40Z, hall/h1:d5 at 2023-11-14T22:13:50Z"
    )
    assert "slowest substreams" in table.stdout and "hall/h1:d2 at 2023-11-14T22:13:30Z" in table.stdout
    assert not any("substream" in name for name in families)  # no label per key
